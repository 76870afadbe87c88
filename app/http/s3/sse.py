"""Server-side encryption, as S3 clients ask for and are told of it.

With master keys configured (docs/encryption.md) every object stored in
Telegram is sealed: that is SSE-S3, and such objects answer
`x-amz-server-side-encryption: AES256`. A write asking for AES256 is taken
when encryption is on and refused (400) when it is off: storing plaintext
while the client believes otherwise is the one wrong answer. SSE-KMS is not
implemented: refused with 501 NotImplemented, never ignored.

SSE-C (customer-provided keys, docs/encryption.md#sse-c) works with or
without master keys: the key headers are checked here as AWS checks them,
and the key then seals the object's chunks (the store's `customer_key`).
Plain HTTP is not refused, unlike AWS: the service runs behind a TLS proxy.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping

from app.http.s3.errors import S3Error
from app.store.service import ObjectInfo, ObjectSeal

HEADER = "x-amz-server-side-encryption"
AES256 = "AES256"
CUSTOMER = "x-amz-server-side-encryption-customer-"
COPY_SOURCE_CUSTOMER = "x-amz-copy-source-server-side-encryption-customer-"
_KEY_BYTES = 32


def customer_key(headers: Mapping[str, str], prefix: str = CUSTOMER) -> bytes | None:
    """The customer key the headers under `prefix` give (None: none), checked
    as AWS checks it: all three headers, AES256, 32 bytes, their MD5."""
    algorithm = headers.get(prefix + "algorithm")
    encoded = headers.get(prefix + "key")
    md5 = headers.get(prefix + "key-md5")
    if algorithm is None and encoded is None and md5 is None:
        return None
    if algorithm is None:
        raise S3Error(
            "InvalidArgument",
            "Requests specifying Server Side Encryption with Customer provided keys must "
            "provide a valid encryption algorithm.",
            details={"ArgumentName": prefix + "algorithm"},
        )
    if algorithm != AES256:
        raise S3Error(
            "InvalidEncryptionAlgorithmError",
            details={"ArgumentName": prefix + "algorithm", "ArgumentValue": algorithm[:64]},
        )
    if encoded is None:
        raise S3Error(
            "InvalidArgument",
            "Requests specifying Server Side Encryption with Customer provided keys must "
            "provide an appropriate secret key.",
            details={"ArgumentName": prefix + "key"},
        )
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != _KEY_BYTES:
        # The key itself is never echoed, not even in part.
        raise S3Error(
            "InvalidArgument",
            "The secret key was invalid for the specified algorithm.",
            details={"ArgumentName": prefix + "key"},
        )
    if md5 is None:
        raise S3Error(
            "InvalidArgument",
            "Requests specifying Server Side Encryption with Customer provided keys must "
            "provide the client calculated MD5 of the secret key.",
            details={"ArgumentName": prefix + "key-MD5"},
        )
    if md5 != key_md5(key):
        raise S3Error(
            "InvalidArgument",
            "The calculated MD5 hash of the key did not match the hash that was provided.",
            details={"ArgumentName": prefix + "key-MD5"},
        )
    return key


def key_md5(key: bytes) -> str:
    return base64.b64encode(hashlib.md5(key, usedforsecurity=False).digest()).decode()


def check_write(headers: Mapping[str, str], *, encryption_on: bool) -> bytes | None:
    """Refuse a write whose encryption request this service cannot honour;
    the customer key it gives (SSE-C), if any."""
    customer = customer_key(headers)
    asked = headers.get(HEADER)
    if asked is None:
        return customer
    if customer is not None:
        raise S3Error(
            "InvalidArgument",
            "Server Side Encryption with Customer provided key is incompatible with the "
            "encryption method specified",
            details={"ArgumentName": HEADER, "ArgumentValue": asked[:64]},
        )
    if asked == AES256:
        if not encryption_on:
            raise S3Error(
                "InvalidArgument",
                "Server-side encryption (AES256) was asked for, but this service has no "
                "encryption keys configured.",
                details={"ArgumentName": HEADER, "ArgumentValue": asked[:64]},
            )
        return None
    if asked in ("aws:kms", "aws:kms:dsse"):
        raise S3Error("NotImplemented", "SSE-KMS is not implemented; use AES256.")
    raise S3Error(
        "InvalidArgument",
        "The encryption method specified is not supported.",
        details={"ArgumentName": HEADER, "ArgumentValue": asked[:64]},
    )


def opening_key(seal: ObjectSeal, info: ObjectInfo, key: bytes | None) -> bytes | None:
    """The customer key that opens the object whose seal is `seal` (None:
    it needs none), or the refusal AWS gives: 400 InvalidRequest without it,
    403 AccessDenied for another one (the store's errors), 400 for a key
    given for an object stored without one."""
    if seal.needs_customer_key:
        seal.check_customer_key(key)
        return key
    if key is not None and info.size > 0:
        raise not_applicable()
    # An empty object has no chunk to seal: it is answered as it was asked.
    return key if info.size == 0 else None


def check_part_key(seal: ObjectSeal, key: bytes | None, *, completing: bool = False) -> None:
    """The parts of a multipart upload are all under one customer key, or
    none is: `seal` is its parts' so far, `key` the one this request brings
    (a part's, or CompleteMultipartUpload's, where it may be left out)."""
    if key is None:
        if seal.needs_customer_key and seal.other_chunks:
            raise S3Error(
                "InvalidRequest",
                "The parts of this upload are not all stored under the same customer key.",
            )
        if seal.needs_customer_key and not completing:
            raise S3Error(
                "InvalidRequest",
                "The multipart upload initiate requested encryption. Subsequent part requests "
                "must include the appropriate encryption parameters.",
            )
        return
    if seal.other_chunks or not seal.opens_with(key):
        raise S3Error(
            "InvalidArgument",
            "The provided encryption parameters did not match the ones used originally.",
        )


def not_applicable() -> S3Error:
    """Customer key headers on an object stored without one (as AWS)."""
    return S3Error("InvalidRequest", "The encryption parameters are not applicable to this object.")


def response_headers(sealed: bool, customer: bytes | None = None) -> dict[str, str]:
    """What a response says of the object's encryption: SSE-S3, or the
    customer key's algorithm and MD5 (never the key)."""
    if customer is not None:
        return {CUSTOMER + "algorithm": AES256, CUSTOMER + "key-MD5": key_md5(customer)}
    return {HEADER: AES256} if sealed else {}
