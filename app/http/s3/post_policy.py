"""The policy of a browser-based upload (S3 POST Object): its signature and
its conditions.

A web page that lets browsers upload straight into a bucket gets a policy
from its back end (boto3's `generate_presigned_post`, for one): a base64 JSON
document with an expiration and the conditions every form field must meet,
signed with the back end's S3 secret (SigV4, or SigV2's HMAC-SHA1). The form
carries the policy, the signature and the fields; the service checks that the
signature is the policy's, that the policy has not expired, that every
condition holds and that no field is left uncovered by one.

Field names are case-insensitive, and so are the names in conditions
("$Content-Type" matches the field `content-type`) and their operators; the
policy's own keys (`expiration`, `conditions`) are not, as in AWS.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from app.http.s3.errors import S3Error
from app.http.s3.sigv4 import ALGORITHM, derive_signing_key, sign_hex, signatures_equal
from app.http.shared.parsing import parse_decimal

#: Fields no condition has to name: the signature's own and the file.
UNCOVERED_FIELDS = frozenset({"policy", "signature", "awsaccesskeyid", "x-amz-signature", "file"})
#: Fields that exist only for the browser's page and are never checked.
IGNORED_PREFIX = "x-ignore-"
#: Checksums of the file need no condition: they only narrow what is stored.
CHECKSUM_PREFIX = "x-amz-checksum-"
#: The most conditions a policy may have (the form's text is capped too).
MAX_CONDITIONS = 100


@dataclass(frozen=True)
class LengthRange:
    low: int
    high: int


@dataclass(frozen=True)
class Policy:
    expiration: datetime
    conditions: tuple[tuple[str, str, Any], ...]  # (operator, field, value)
    length_range: LengthRange | None


def authorize(
    fields: Mapping[str, str],
    credentials: Mapping[str, str],
    *,
    now: datetime,
    region: str | None,
) -> tuple[str, Policy]:
    """The access key that signed the form's policy, and the policy; raises
    S3Error when the signature is missing or wrong. `fields`: lowercased names."""
    encoded = fields.get("policy")
    if "x-amz-signature" in fields or "x-amz-algorithm" in fields:
        access_key = _verify_v4(fields, encoded, credentials, region)
    elif "awsaccesskeyid" in fields:
        access_key = _verify_v2(fields, encoded, credentials)
    else:
        raise S3Error("AccessDenied", "Anonymous uploads are not allowed: sign the policy.")
    assert encoded is not None  # both verifiers require it
    policy = decode_policy(encoded)
    if now >= policy.expiration:
        raise S3Error("AccessDenied", "Invalid according to Policy: Policy expired.")
    return access_key, policy


def check_fields(policy: Policy, fields: Mapping[str, str], bucket: str) -> None:
    """Every condition holds, and every field is named by one. `fields`:
    lowercased names, `key` already with ${filename} replaced."""
    values = {**fields, "bucket": bucket}
    covered = {"bucket"}
    for operator, name, expected in policy.conditions:
        covered.add(name)
        actual = values.get(name)
        if operator == "eq":
            held = actual is not None and actual == expected
        else:  # starts-with; a missing field is an empty one
            held = (actual or "").startswith(expected)
        if not held:
            shown = json.dumps([operator, f"${name}", expected])
            raise S3Error(
                "AccessDenied", f"Invalid according to Policy: Policy Condition failed: {shown}"
            )
    extra = sorted(
        name
        for name in fields
        if name not in covered
        and name not in UNCOVERED_FIELDS
        and not name.startswith((IGNORED_PREFIX, CHECKSUM_PREFIX))
    )
    if extra:
        raise S3Error(
            "AccessDenied",
            f"Invalid according to Policy: Extra input fields: {', '.join(extra)}",
        )


def decode_policy(encoded: str) -> Policy:
    """The policy document, checked for shape; InvalidPolicyDocument if it is
    not one."""
    try:
        document = json.loads(base64.b64decode(encoded, validate=True))
    except (binascii.Error, ValueError, RecursionError):
        raise _invalid("the policy is not base64-encoded JSON") from None
    if not isinstance(document, dict):
        raise _invalid("the policy is not a JSON object")
    expiration = document.get("expiration")
    if not isinstance(expiration, str):
        raise _invalid("Policy missing expiration")
    conditions = document.get("conditions")
    if not isinstance(conditions, list):
        raise _invalid("Policy missing conditions")
    if len(conditions) > MAX_CONDITIONS:
        raise _invalid(f"more than {MAX_CONDITIONS} conditions")
    parsed: list[tuple[str, str, Any]] = []
    length_range: LengthRange | None = None
    for condition in conditions:
        if isinstance(condition, dict):
            parsed.append(_exact_match(condition))
        elif isinstance(condition, list) and condition:
            operator = str(condition[0]).lower()
            if operator == "content-length-range":
                length_range = _length_range(condition)
            else:
                parsed.append(_comparison(operator, condition))
        else:
            raise _invalid(f"Invalid condition: {json.dumps(condition)[:200]}")
    return Policy(_expiration(expiration), tuple(parsed), length_range)


def _verify_v4(
    fields: Mapping[str, str],
    encoded: str | None,
    credentials: Mapping[str, str],
    region: str | None,
) -> str:
    algorithm = fields.get("x-amz-algorithm")
    if algorithm != ALGORITHM:
        raise S3Error("InvalidArgument", f"x-amz-algorithm must be {ALGORITHM}.")
    provided = fields.get("x-amz-signature")
    if provided is None:
        raise S3Error(
            "InvalidArgument", "Bucket POST must contain a field named 'x-amz-signature'."
        )
    if encoded is None:
        raise S3Error("InvalidArgument", "Bucket POST must contain a field named 'policy'.")
    parts = fields.get("x-amz-credential", "").split("/")
    if len(parts) != 5 or parts[3] != "s3" or parts[4] != "aws4_request":
        raise S3Error(
            "InvalidArgument",
            "x-amz-credential must be <access key>/<date>/<region>/s3/aws4_request.",
        )
    access_key, date, credential_region = parts[0], parts[1], parts[2]
    if region is not None and credential_region != region:
        raise S3Error(
            "InvalidArgument",
            f"The credential's region {credential_region[:64]!r} is wrong; expecting {region!r}.",
        )
    secret = _secret(credentials, access_key)
    expected = sign_hex(derive_signing_key(secret, date, credential_region), encoded)
    if not provided.isascii() or not signatures_equal(expected, provided):
        raise S3Error(
            "SignatureDoesNotMatch",
            "The policy's signature does not match.",
            details={"AWSAccessKeyId": access_key[:128]},
        )
    return access_key


def _verify_v2(
    fields: Mapping[str, str], encoded: str | None, credentials: Mapping[str, str]
) -> str:
    access_key = fields["awsaccesskeyid"]
    provided = fields.get("signature")
    if provided is None:
        raise S3Error("InvalidArgument", "Bucket POST must contain a field named 'Signature'.")
    if encoded is None:
        raise S3Error("InvalidArgument", "Bucket POST must contain a field named 'policy'.")
    secret = _secret(credentials, access_key)
    expected = base64.b64encode(
        hmac.new(secret.encode(), encoded.encode("utf-8", "replace"), hashlib.sha1).digest()
    )
    if not hmac.compare_digest(expected, provided.encode("utf-8", "replace")):
        raise S3Error(
            "SignatureDoesNotMatch",
            "The policy's signature does not match.",
            details={"AWSAccessKeyId": access_key[:128]},
        )
    return access_key


def _secret(credentials: Mapping[str, str], access_key: str) -> str:
    secret = credentials.get(access_key)
    # An empty secret would make every signature "verify" with a guessable key.
    if not secret:
        raise S3Error("InvalidAccessKeyId", details={"AWSAccessKeyId": access_key[:128]})
    return secret


def _expiration(value: str) -> datetime:
    """ISO 8601 in UTC, with or without milliseconds (boto3 sends none,
    browsers' toISOString sends them)."""
    for layout in ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S.%fZ"):
        try:
            return datetime.strptime(value, layout).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise _invalid(f"Invalid Policy: Invalid 'expiration' value: {value[:64]!r}")


def _exact_match(condition: dict[Any, Any]) -> tuple[str, str, Any]:
    if len(condition) != 1:
        raise _invalid(f"Invalid condition: {json.dumps(condition)[:200]}")
    ((name, value),) = condition.items()
    if not isinstance(name, str) or not isinstance(value, str):
        raise _invalid(f"Invalid condition: {json.dumps(condition)[:200]}")
    return ("eq", name.lower(), value)


def _comparison(operator: str, condition: list[Any]) -> tuple[str, str, Any]:
    if operator not in ("eq", "starts-with") or len(condition) != 3:
        raise _invalid(f"Invalid condition: {json.dumps(condition)[:200]}")
    _, name, value = condition
    if not isinstance(name, str) or not name.startswith("$") or not isinstance(value, str):
        raise _invalid(f"Invalid condition: {json.dumps(condition)[:200]}")
    return (operator, name[1:].lower(), value)


def _length_range(condition: list[Any]) -> LengthRange:
    if len(condition) != 3:
        raise _invalid("content-length-range takes a minimum and a maximum")
    bounds = [_bound(value) for value in condition[1:]]
    if bounds[0] is None or bounds[1] is None or bounds[0] > bounds[1]:
        raise _invalid("content-length-range takes two non-negative integers, minimum first")
    return LengthRange(bounds[0], bounds[1])


def _bound(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str):
        return parse_decimal(value)
    return None


def _invalid(message: str) -> S3Error:
    return S3Error("InvalidPolicyDocument", message)
