"""Server-side encryption, as S3 clients ask for and are told of it.

With master keys configured (docs/encryption.md) every object stored in
Telegram is sealed: that is SSE-S3, and such objects answer
`x-amz-server-side-encryption: AES256`. A write asking for AES256 is taken
when encryption is on and refused (400) when it is off: storing plaintext
while the client believes otherwise is the one wrong answer. SSE-KMS and
SSE-C (customer-provided keys) are not implemented: refused with 501
NotImplemented, as S3-compatible stores without them answer, never ignored.
"""

from __future__ import annotations

from collections.abc import Mapping

from app.s3.errors import S3Error

HEADER = "x-amz-server-side-encryption"
AES256 = "AES256"
_CUSTOMER = (
    "x-amz-server-side-encryption-customer-algorithm",
    "x-amz-copy-source-server-side-encryption-customer-algorithm",
)


def check_write(headers: Mapping[str, str], *, encryption_on: bool) -> None:
    """Refuse a write whose encryption request this service cannot honour."""
    check_customer_keys(headers)
    asked = headers.get(HEADER)
    if asked is None:
        return
    if asked == AES256:
        if not encryption_on:
            raise S3Error(
                "InvalidArgument",
                "Server-side encryption (AES256) was asked for, but this service has no "
                "encryption keys configured.",
                details={"ArgumentName": HEADER, "ArgumentValue": asked[:64]},
            )
        return
    if asked in ("aws:kms", "aws:kms:dsse"):
        raise S3Error("NotImplemented", "SSE-KMS is not implemented; use AES256.")
    raise S3Error(
        "InvalidArgument",
        "The encryption method specified is not supported.",
        details={"ArgumentName": HEADER, "ArgumentValue": asked[:64]},
    )


def check_customer_keys(headers: Mapping[str, str]) -> None:
    """SSE-C is not implemented: a customer key is refused, never ignored
    (the client would believe its key protects the object)."""
    if any(name in headers for name in _CUSTOMER):
        raise S3Error(
            "NotImplemented", "Server-side encryption with customer keys (SSE-C) is not supported."
        )


def response_headers(sealed: bool) -> dict[str, str]:
    return {HEADER: AES256} if sealed else {}
