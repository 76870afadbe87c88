"""The S3 error table."""

from __future__ import annotations

import pytest

from app.s3.errors import ERROR_TABLE, S3Error

EXPECTED_STATUS = {
    "AccessDenied": 403,
    "SignatureDoesNotMatch": 403,
    "InvalidAccessKeyId": 403,
    "RequestTimeTooSkewed": 403,
    "AuthorizationHeaderMalformed": 400,
    "AuthorizationQueryParametersError": 400,
    "XAmzContentSHA256Mismatch": 400,
    "BadDigest": 400,
    "InvalidDigest": 400,
    "IncompleteBody": 400,
    "MalformedXML": 400,
    "InvalidArgument": 400,
    "InvalidRequest": 400,
    "EntityTooLarge": 400,
    "EntityTooSmall": 400,
    "KeyTooLongError": 400,
    "NoSuchKey": 404,
    "NoSuchBucket": 404,
    "NoSuchUpload": 404,
    "BucketNotEmpty": 409,
    "BucketAlreadyOwnedByYou": 409,
    "InvalidBucketName": 400,
    "InvalidPart": 400,
    "InvalidPartOrder": 400,
    "InvalidRange": 416,
    "PreconditionFailed": 412,
    "NotImplemented": 501,
    "MethodNotAllowed": 405,
    "InternalError": 500,
    "SlowDown": 503,
    "ServiceUnavailable": 503,
}


@pytest.mark.parametrize(("code", "status"), EXPECTED_STATUS.items())
def test_codes_and_statuses(code: str, status: int) -> None:
    err = S3Error(code)
    assert err.status == status == ERROR_TABLE[code][0]
    assert err.message
    assert str(err) == f"{code}: {err.message}"


def test_overrides_and_extras() -> None:
    err = S3Error(
        "NoSuchKey",
        "custom",
        resource="/b/k",
        details={"Key": "k"},
        headers={"x-amz-request-id": "1"},
    )
    assert (err.code, err.message, err.status, err.resource) == ("NoSuchKey", "custom", 404, "/b/k")
    assert err.details == {"Key": "k"}
    assert err.headers == {"x-amz-request-id": "1"}
    assert repr(err) == "S3Error('NoSuchKey', 'custom', 404)"
    assert S3Error("Custom", "free-form", 418).status == 418
    with pytest.raises(KeyError):
        S3Error("NoSuchThing")
