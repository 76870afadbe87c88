"""Metadata at scale through real boto3 against a running service (SQLite and
Postgres through pgbouncer): what a listing and a small object cost the
database, and ListMultipartUploads with a delimiter."""

from __future__ import annotations

from typing import Any

import pytest

from app.store import store_deletes
from tests.db.helpers import statements
from tests.http.s3.test_api_boto3 import S3, code
from tests.running_service import INLINE, Service


@pytest.fixture
async def s3(s3_service: Service) -> S3:
    client = S3(s3_service)
    await client("create_bucket", Bucket="box")
    return client


async def test_a_delimiter_listing_is_one_statement_without_content(s3: S3) -> None:
    # Three "folders" of 2 KiB objects (inline: their bytes are in the table).
    for folder in ("a", "b", "c"):
        for n in range(30):
            await s3("put_object", Bucket="box", Key=f"{folder}/{n:02}", Body=b"x" * 2048)
    await s3("put_object", Bucket="box", Key="top", Body=b"top")

    with statements() as seen:
        page = await s3("list_objects_v2", Bucket="box", Delimiter="/")
    assert [p["Prefix"] for p in page["CommonPrefixes"]] == ["a/", "b/", "c/"]
    assert [o["Key"] for o in page["Contents"]] == ["top"]
    reads = [sql for sql in seen if "FROM objects" in sql]
    # One statement for the page however many keys each prefix holds (the old
    # code ran one per prefix, each fetching up to max-keys + 1 rows).
    assert len(reads) == 1, reads
    assert all("inline_data" not in sql for sql in reads)

    with statements() as seen:
        page = await s3("list_objects_v2", Bucket="box", Prefix="b/", MaxKeys=5)
    assert [o["Key"] for o in page["Contents"]] == [f"b/{n:02}" for n in range(5)]
    reads = [sql for sql in seen if "FROM objects" in sql]
    assert len(reads) == 1 and "inline_data" not in reads[0], reads


async def test_list_multipart_uploads_with_a_delimiter_pages_like_objects(s3: S3) -> None:
    keys = ["img/a.png", "img/b.png", "logs/1", "readme", "v2/x/blob"]
    ids = {}
    for key in keys:
        ids[key] = (await s3("create_multipart_upload", Bucket="box", Key=key))["UploadId"]

    page = await s3("list_multipart_uploads", Bucket="box", Delimiter="/")
    assert [p["Prefix"] for p in page["CommonPrefixes"]] == ["img/", "logs/", "v2/"]
    assert [(u["Key"], u["UploadId"]) for u in page["Uploads"]] == [("readme", ids["readme"])]
    assert page["IsTruncated"] is False

    seen: list[str] = []
    params: dict[str, Any] = {"Bucket": "box", "Delimiter": "/", "MaxUploads": 1}
    for _ in range(10):
        page = await s3("list_multipart_uploads", **params)
        seen += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        seen += [u["Key"] for u in page.get("Uploads", [])]
        if not page["IsTruncated"]:
            break
        params["KeyMarker"] = page["NextKeyMarker"]
        params["UploadIdMarker"] = page.get("NextUploadIdMarker", "")
    assert seen == ["img/", "logs/", "readme", "v2/"]

    nested = await s3("list_multipart_uploads", Bucket="box", Prefix="v2/", Delimiter="/")
    assert [p["Prefix"] for p in nested["CommonPrefixes"]] == ["v2/x/"]


async def test_a_delimiter_ending_in_the_last_code_point_is_a_clear_400(s3: S3) -> None:
    error = await s3.error("list_objects_v2", Bucket="box", Delimiter="/\U0010ffff")
    assert code(error) == "InvalidArgument"
    assert "U+10FFFF" in error.response["Error"]["Message"]


async def test_small_objects_do_not_ask_for_the_bucket_and_a_new_key_is_one_insert(
    s3: S3,
) -> None:
    await s3("put_object", Bucket="box", Key="warm", Body=b"w")
    with statements() as seen:
        await s3("put_object", Bucket="box", Key="new", Body=b"x" * INLINE)
        assert (await s3("head_object", Bucket="box", Key="new"))["ContentLength"] == INLINE
    # The bucket is known to exist: no query for it on either request.
    assert [sql for sql in seen if "FROM buckets" in sql] == []
    # The PUT of a new key writes its row with one statement and reads none.
    objects = [sql for sql in seen if " objects" in sql]
    assert [sql.split()[0] for sql in objects] == ["INSERT", "SELECT"], objects
    assert "ON CONFLICT" in objects[0]

    # Replacing a key still works (the insert yields, the old version goes).
    await s3("put_object", Bucket="box", Key="new", Body=b"y")
    assert (await s3("head_object", Bucket="box", Key="new"))["ContentLength"] == 1


async def test_a_small_put_asks_nothing_about_the_object_it_wrote(s3: S3) -> None:
    """Its answer names how the object is sealed (x-amz-server-side-encryption);
    a small object's bytes are in its row, sealed by nothing, so the PUT needs
    no query of its chunks' seals or of whether it is still pending."""
    await s3("put_object", Bucket="box", Key="warm", Body=b"w")
    for key in ("new", "new"):  # a new key, then over an inline object
        with statements() as seen:
            answer = await s3("put_object", Bucket="box", Key=key, Body=b"x" * INLINE)
        assert "ServerSideEncryption" not in answer
        reads = [sql for sql in seen if sql.startswith("SELECT")]
        asked = [sql for sql in reads if "pieces.object_id" in sql or "completed_object_id" in sql]
        assert asked == [], asked


async def test_pages_of_one_with_another_delimiter_and_unicode_keys(s3: S3) -> None:
    keys = ["a-1", "a-2-x", "b", "é-1", "é-2", "ü+ key", "😀-x"]
    for key in keys:
        await s3("put_object", Bucket="box", Key=key, Body=b"k")
    seen: list[str] = []
    params: dict[str, Any] = {"Bucket": "box", "Delimiter": "-", "MaxKeys": 1}
    for _ in range(20):
        # boto3 asks for encoding-type=url and decodes the answer.
        page = await s3("list_objects_v2", **params)
        assert page["KeyCount"] == 1
        seen += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        seen += [o["Key"] for o in page.get("Contents", [])]
        if not page["IsTruncated"]:
            break
        params["ContinuationToken"] = page["NextContinuationToken"]
    assert seen == ["a-", "b", "é-", "ü+ key", "😀-"]

    v1 = await s3("list_objects", Bucket="box", Delimiter="-", Marker="a-1", MaxKeys=2)
    assert [o["Key"] for o in v1.get("Contents", [])] == ["b"]
    assert [p["Prefix"] for p in v1["CommonPrefixes"]] == ["é-"]
    assert v1["NextMarker"] == "é-"


async def test_a_delete_of_a_key_that_is_not_there_opens_no_transaction(
    s3: S3, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Clients delete keys long gone (a registry's upload state, rclone's
    purges); the answer is the same 204, so it must cost no more than a
    delete of a small object: one delete and one read, no transaction."""
    await s3("put_object", Bucket="box", Key="kept", Body=b"k")
    transactions: list[object] = []
    in_transaction = store_deletes.in_transaction

    def counted(sessionmaker: Any, work: Any) -> Any:
        transactions.append(sessionmaker)
        return in_transaction(sessionmaker, work)

    monkeypatch.setattr(store_deletes, "in_transaction", counted)
    with statements() as seen:
        answer = await s3("delete_object", Bucket="box", Key="never-there")
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert transactions == []
    objects = [sql.split()[0] for sql in seen if " objects" in sql]
    assert objects == ["DELETE", "SELECT"], seen

    # A key that is there is still deleted, and then is not there.
    await s3("delete_object", Bucket="box", Key="kept")
    error = await s3.error("head_object", Bucket="box", Key="kept")
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 404
