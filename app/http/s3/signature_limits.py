"""An S3 signature is a key check: a failed one (a wrong signature, an
unknown access key id) counts against the client, by the access key id it
named, as a wrong API key does (app/store/key_failures.py). S3 secrets are
the operator's choice, so they can be weak: a client past the limits is
answered 503 SlowDown, its signatures unchecked, the right one included,
until its window ends.

A chunk's or a trailer's signature that does not match comes after the
request's own signature verified: a damaged body, not a guess; not counted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TypeVar

from app.http.s3.errors import S3Error
from app.store.key_failures import KeyFailures, s3_credential

T = TypeVar("T")

#: The errors that say the credential is wrong (a guess), not the request.
SIGNATURE_FAILURES: Final = frozenset({"SignatureDoesNotMatch", "InvalidAccessKeyId"})


async def checked_signature(
    failures: KeyFailures, address: str, check: Callable[[], T], access_key: Callable[[T], str]
) -> T:
    """What `check` (a signature's verification) returns, unless the client
    at `address` is past the limits for the access key (TooManyFailedChecks,
    whatever `check` found); a failure of `check` is counted, then raised."""
    try:
        verified = check()
    except S3Error as exc:
        named = exc.details.get("AWSAccessKeyId")
        if exc.code not in SIGNATURE_FAILURES or named is None:
            raise
        credential = s3_credential(named)
        failures.check(address, credential)
        await failures.failed(address, credential)
        raise
    failures.check(address, s3_credential(access_key(verified)))
    return verified
