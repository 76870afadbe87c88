"""Bucket names, object keys and path splitting."""

from __future__ import annotations

import pytest

from app.http.s3.errors import S3Error
from app.http.s3.names import (
    MAX_KEY_BYTES,
    RESERVED_BUCKETS,
    bucket_name_problem,
    is_reserved_bucket,
    is_valid_bucket_name,
    split_path,
    validate_bucket_name,
    validate_object_key,
)

VALID = ["abc", "registry", "gitea-lfs", "my.bucket.name", "a1b", "0-0", "x" * 63, "123"]
INVALID = [
    "ab",
    "x" * 64,
    "UPPER",
    "under_score",
    "-start",
    "end-",
    ".start",
    "end.",
    "two..dots",
    "dot.-dash",
    "dash-.dot",
    "192.168.1.1",
    "space name",
    "ünï",
    "xn--punycode",
    "sthree-x",
    "bucket-s3alias",
    "bucket--ol-s3",
    "a/b",
    "",
]


@pytest.mark.parametrize("name", VALID)
def test_valid_bucket_names(name: str) -> None:
    assert is_valid_bucket_name(name)
    assert validate_bucket_name(name) == name


@pytest.mark.parametrize("name", INVALID)
def test_invalid_bucket_names(name: str) -> None:
    assert bucket_name_problem(name) is not None
    with pytest.raises(S3Error) as caught:
        validate_bucket_name(name)
    assert caught.value.code == "InvalidBucketName"
    assert caught.value.status == 400


def test_reserved_bucket_names() -> None:
    assert {"api", "f", "file", "files", "health", "ready", "metrics", "docs"} <= RESERVED_BUCKETS
    assert {"redoc", "openapi.json", "static", "dav"} <= RESERVED_BUCKETS
    for name in ("api", "health", "openapi.json", "static", "metrics"):
        assert is_reserved_bucket(name)
        assert is_valid_bucket_name(name)  # a valid S3 name, but ours
        with pytest.raises(S3Error) as caught:
            validate_bucket_name(name)
        assert caught.value.code == "InvalidBucketName"
        assert validate_bucket_name(name, allow_reserved=True) == name
    assert not is_reserved_bucket("registry")


def test_object_keys() -> None:
    assert validate_object_key("a") == "a"
    assert validate_object_key("ü" * (MAX_KEY_BYTES // 2)) == "ü" * 512
    assert validate_object_key(" /..//x/ ") == " /..//x/ "
    cases = {
        "": "InvalidArgument",
        "a\x00b": "InvalidArgument",
        "x" * (MAX_KEY_BYTES + 1): "KeyTooLongError",
        "ü" * 513: "KeyTooLongError",
        "\udcff": "InvalidArgument",
    }
    for key, code in cases.items():
        with pytest.raises(S3Error) as caught:
            validate_object_key(key)
        assert caught.value.code == code
        assert caught.value.status == 400


def test_split_path() -> None:
    assert split_path(b"/") == (None, None)
    assert split_path(b"/bucket") == ("bucket", None)
    assert split_path(b"/bucket/") == ("bucket", None)
    assert split_path(b"/bucket/key") == ("bucket", "key")
    assert split_path(b"/bucket//key/") == ("bucket", "/key/")
    assert split_path(b"/bucket/a%20b+c%2Fd") == ("bucket", "a b+c/d")
    assert split_path(b"/bucket/%C3%BC") == ("bucket", "ü")
    assert split_path("/bucket/k") == ("bucket", "k")
    for raw in (b"bucket/key", b"/bucket/%FF", b""):
        with pytest.raises(S3Error) as caught:
            split_path(raw)
        assert caught.value.code == "InvalidURI"
