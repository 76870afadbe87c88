"""The S3 API through minio-py (the client family Gitea uses, through minio-go),
against a running service with the Telegram simulator behind it (SQLite and
Postgres through pgbouncer).

minio is synchronous and the service runs on the test's event loop, so every
call goes through `asyncio.to_thread`. CHUNK stays at the fixture's 64 KiB so
that every object above a few KiB is stored as several Telegram chunks.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import pytest
from minio import Minio
from minio.commonconfig import CopySource
from minio.deleteobjects import DeleteObject
from minio.error import S3Error

from tests.running_service import CHAT_ID, CHUNK, INLINE, Service, ServiceFactory

ACCESS_KEY = "AKIDTELEUPLOADERMINIO"
SECRET = "teleuploader-minio-secret-0123456789"
MiB = 1024 * 1024
PART = 5 * MiB  # minio's smallest part size
BUCKET = "gitea"
T = TypeVar("T")


def data(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def md5_hex(body: bytes) -> str:
    return hashlib.md5(body).hexdigest()


def multipart_etag(parts: list[bytes]) -> str:
    digests = b"".join(hashlib.md5(part).digest() for part in parts)
    return f"{hashlib.md5(digests).hexdigest()}-{len(parts)}"


class Reader:
    """A stream of unknown length: only `read`, as a pipe would be."""

    def __init__(self, body: bytes) -> None:
        self._io = io.BytesIO(body)
        self.reads = 0

    def read(self, size: int = -1) -> bytes:
        self.reads += 1
        return self._io.read(size)


class Client:
    """A minio client whose calls run in a thread (the service shares our loop)."""

    def __init__(self, service: Service, *, region: str | None = "us-east-1") -> None:
        self.service = service
        self.minio = Minio(
            urlsplit(service.url).netloc,
            access_key=ACCESS_KEY,
            secret_key=SECRET,
            secure=False,
            region=region,
        )

    async def __call__(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(method, *args, **kwargs)

    async def read(self, key: str, **kwargs: Any) -> bytes:
        def get() -> bytes:
            response = self.minio.get_object(BUCKET, key, **kwargs)
            try:
                return response.read()
            finally:
                response.close()
                response.release_conn()

        return await asyncio.to_thread(get)

    async def error(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> S3Error:
        with pytest.raises(S3Error) as caught:
            await self(method, *args, **kwargs)
        return caught.value

    async def keys(self, **kwargs: Any) -> list[str]:
        def listing() -> list[str]:
            return [str(o.object_name) for o in self.minio.list_objects(BUCKET, **kwargs)]

        return await asyncio.to_thread(listing)

    def messages(self) -> int:
        return self.service.sim.message_count(CHAT_ID)


@pytest.fixture
async def mc(start_service: ServiceFactory) -> Client:
    # Parts of 5 MiB and more must fit under the upload limit.
    service = await start_service(s3_credentials={ACCESS_KEY: SECRET}, max_upload_size=64 * MiB)
    client = Client(service)
    assert not await client(client.minio.bucket_exists, BUCKET)
    await client(client.minio.make_bucket, BUCKET)
    return client


async def test_bucket_exists_and_make_bucket(mc: Client) -> None:
    # Gitea's start: BucketExists, MakeBucket when missing, and no region set
    # (minio then asks GetBucketLocation first).
    regionless = Client(mc.service, region=None)
    assert await regionless(regionless.minio.bucket_exists, BUCKET)
    assert not await regionless(regionless.minio.bucket_exists, "other")
    await regionless(regionless.minio.make_bucket, "other")
    assert await mc(mc.minio.bucket_exists, "other")
    buckets = await mc(mc.minio.list_buckets)
    assert [b.name for b in buckets] == [BUCKET, "other"]
    error = await mc.error(mc.minio.make_bucket, "api")
    assert error.code == "InvalidBucketName"
    await mc(mc.minio.remove_bucket, "other")
    assert not await mc(mc.minio.bucket_exists, "other")


@pytest.mark.parametrize("size", [0, INLINE, 3 * CHUNK + 5])
async def test_put_known_length_get_stat_remove(mc: Client, size: int) -> None:
    body = data(size, seed=size)
    result = await mc(
        mc.minio.put_object,
        BUCKET,
        "attachments/a/b/file.bin",
        io.BytesIO(body),
        length=size,
        content_type="application/x-test",
        metadata={"owner": "gitea", "X-Amz-Meta-Purpose": "round trip"},
    )
    assert result.etag == md5_hex(body)

    stat = await mc(mc.minio.stat_object, BUCKET, "attachments/a/b/file.bin")
    assert stat.size == size
    assert stat.etag == md5_hex(body)
    assert stat.content_type == "application/x-test"
    assert stat.metadata["x-amz-meta-owner"] == "gitea"
    assert stat.metadata["x-amz-meta-purpose"] == "round trip"
    assert stat.last_modified is not None
    assert await mc.read("attachments/a/b/file.bin") == body
    if size > 10:
        assert await mc.read("attachments/a/b/file.bin", offset=size - 10) == body[-10:]
    if size > CHUNK + 4:
        part = await mc.read("attachments/a/b/file.bin", offset=CHUNK - 3, length=7)
        assert part == body[CHUNK - 3 : CHUNK + 4]

    await mc(mc.minio.remove_object, BUCKET, "attachments/a/b/file.bin")
    error = await mc.error(mc.minio.stat_object, BUCKET, "attachments/a/b/file.bin")
    assert error.code == "NoSuchKey"
    error = await mc.error(mc.minio.get_object, BUCKET, "attachments/a/b/file.bin")
    assert error.code == "NoSuchKey"
    # Removing what is gone is fine, as on S3.
    await mc(mc.minio.remove_object, BUCKET, "attachments/a/b/file.bin")


async def test_put_unknown_length_small_is_one_put(mc: Client) -> None:
    body = data(3 * CHUNK + 1, seed=1)
    result = await mc(
        mc.minio.put_object, BUCKET, "small-stream", Reader(body), length=-1, part_size=PART
    )
    assert result.etag == md5_hex(body)  # a single PutObject, not multipart
    assert await mc.read("small-stream") == body


async def test_put_unknown_length_streams_multipart(mc: Client) -> None:
    """length=-1: minio reads part_size at a time and uploads the parts (three
    in parallel) of a multipart upload; the last part is short."""
    body = data(2 * PART + 3 * CHUNK + 7, seed=2)
    parts = [body[:PART], body[PART : 2 * PART], body[2 * PART :]]
    reader = Reader(body)

    result = await mc(
        mc.minio.put_object,
        BUCKET,
        "packages/blob",
        reader,
        length=-1,
        part_size=PART,
        content_type="application/octet-stream",
    )

    assert reader.reads >= 3
    assert result.etag == multipart_etag(parts)
    stat = await mc(mc.minio.stat_object, BUCKET, "packages/blob")
    assert stat.size == len(body)
    assert stat.etag == multipart_etag(parts)
    # How many messages the parts became depends on whether each one went
    # straight to the bots or through the spool, which is the machine's load
    # to decide (tests/http/s3/test_write_behind.py checks both paths).
    assert await mc.read("packages/blob") == body
    # A range across the boundary of parts 1 and 2.
    assert (
        await mc.read("packages/blob", offset=PART - 100, length=200)
        == (body[PART - 100 : PART + 100])
    )
    uploads = await mc(lambda: list(mc.minio._list_multipart_uploads(BUCKET).uploads))
    assert uploads == []


async def test_fput_object_bigger_than_part_size(mc: Client, tmp_path: Path) -> None:
    body = data(PART + 2 * CHUNK + 11, seed=3)
    path = tmp_path / "upload.bin"
    path.write_bytes(body)

    result = await mc(
        mc.minio.fput_object,
        BUCKET,
        "lfs/ab/cd/object",
        str(path),
        content_type="application/zip",
        part_size=PART,
    )

    parts = [body[:PART], body[PART:]]
    assert result.etag == multipart_etag(parts)
    stat = await mc(mc.minio.stat_object, BUCKET, "lfs/ab/cd/object")
    assert (stat.size, stat.content_type) == (len(body), "application/zip")
    target = tmp_path / "download.bin"
    await mc(mc.minio.fget_object, BUCKET, "lfs/ab/cd/object", str(target))
    assert target.read_bytes() == body


async def test_list_objects_recursive_and_not(mc: Client) -> None:
    keys = [
        "avatars/1",
        "avatars/2",
        "packages/x/y/blob",
        "packages/z",
        "readme",
        "unicode/ключ файл.txt",
        "with+plus/and%percent",
    ]
    for key in keys:
        await mc(mc.minio.put_object, BUCKET, key, io.BytesIO(key.encode()), len(key.encode()))

    assert await mc.keys(recursive=True) == keys
    # minio yields a page's objects before its common prefixes.
    assert await mc.keys() == ["readme", "avatars/", "packages/", "unicode/", "with+plus/"]
    assert await mc.keys(prefix="packages/") == ["packages/z", "packages/x/"]
    assert await mc.keys(prefix="packages/", recursive=True) == ["packages/x/y/blob", "packages/z"]
    assert await mc.keys(prefix="unicode/", recursive=True) == ["unicode/ключ файл.txt"]
    assert await mc.keys(recursive=True, start_after="packages/z") == keys[4:]
    assert await mc.keys(recursive=True, use_api_v1=True) == keys
    assert await mc.keys(use_api_v1=True, prefix="avatars/") == ["avatars/1", "avatars/2"]

    listed = await mc(lambda: list(mc.minio.list_objects(BUCKET, prefix="avatars/")))
    assert [(o.size, o.etag) for o in listed] == [
        (9, md5_hex(b"avatars/1")),
        (9, md5_hex(b"avatars/2")),
    ]
    assert all(not o.is_dir and o.last_modified is not None for o in listed)


@pytest.mark.parametrize("use_api_v1", [False, True], ids=["v2", "v1"])
async def test_list_objects_in_small_pages(mc: Client, use_api_v1: bool) -> None:
    """minio follows NextContinuationToken (v2) and NextMarker or the last key
    (v1) page after page; pages that end on a common prefix included."""
    keys = [f"p/{a}/{b}" for a in "abcd" for b in "xy"] + ["p/e", "p/f", "p/g/z"]
    for key in keys:
        await mc(mc.minio.put_object, BUCKET, key, io.BytesIO(b""), 0)

    def pages(max_keys: int, delimiter: str | None) -> list[str]:
        objects = mc.minio._list_objects(
            BUCKET,
            prefix="p/",
            delimiter=delimiter,
            max_keys=max_keys,
            use_api_v1=use_api_v1,
            encoding_type="url",
        )
        return [str(o.object_name) for o in objects]

    for max_keys in (1, 2, 3):
        assert await mc(pages, max_keys, None) == sorted(keys)
        # Each page gives its objects before its common prefixes.
        rolled = await mc(pages, max_keys, "/")
        assert sorted(rolled) == ["p/a/", "p/b/", "p/c/", "p/d/", "p/e", "p/f", "p/g/"]
        assert len(rolled) == 7


async def test_remove_objects(mc: Client) -> None:
    for key in ("a", "b/c", "b/d", "e"):
        await mc(mc.minio.put_object, BUCKET, key, io.BytesIO(b"x" * 100), 100)

    def remove(names: list[str]) -> list[Any]:
        # Lazy: nothing is sent until the errors are iterated.
        return list(mc.minio.remove_objects(BUCKET, [DeleteObject(name) for name in names]))

    errors = await mc(remove, ["a", "b/c", "b/d", "missing"])
    assert errors == []
    assert await mc.keys(recursive=True) == ["e"]
    error = await mc.error(lambda: list(mc.minio.remove_objects("nobucket", [DeleteObject("e")])))
    assert error.code == "NoSuchBucket"


async def test_copy_object_is_metadata_only(mc: Client) -> None:
    body = data(4 * CHUNK + 3, seed=4)
    await mc(
        mc.minio.put_object,
        BUCKET,
        "src",
        io.BytesIO(body),
        len(body),
        content_type="text/plain",
        metadata={"owner": "gitea"},
    )
    before = mc.messages()

    copied = await mc(mc.minio.copy_object, BUCKET, "dst", CopySource(BUCKET, "src"))
    replaced = await mc(
        mc.minio.copy_object,
        BUCKET,
        "dst2",
        CopySource(BUCKET, "src"),
        metadata={"owner": "someone else", "Content-Type": "application/json"},
        metadata_directive="REPLACE",
    )

    assert mc.messages() == before
    assert copied.etag == md5_hex(body)
    assert replaced.etag == md5_hex(body)
    stat = await mc(mc.minio.stat_object, BUCKET, "dst")
    assert (stat.content_type, stat.metadata["x-amz-meta-owner"]) == ("text/plain", "gitea")
    stat2 = await mc(mc.minio.stat_object, BUCKET, "dst2")
    assert stat2.metadata["x-amz-meta-owner"] == "someone else"
    assert stat2.content_type == "application/json"
    await mc(mc.minio.remove_object, BUCKET, "src")
    assert await mc.read("dst") == body
    assert await mc.read("dst2") == body
    error = await mc.error(mc.minio.copy_object, BUCKET, "x", CopySource(BUCKET, "missing"))
    assert error.code == "NoSuchKey"


async def test_presigned_get_with_response_headers(mc: Client) -> None:
    """Gitea's SERVE_DIRECT: a presigned GET (5 minutes) that names the download."""
    body = data(2 * CHUNK + 1, seed=5)
    await mc(mc.minio.put_object, BUCKET, "repo-archive/1.zip", io.BytesIO(body), len(body))
    url = await mc(
        mc.minio.presigned_get_object,
        BUCKET,
        "repo-archive/1.zip",
        expires=timedelta(minutes=5),
        response_headers={
            "response-content-disposition": 'attachment; filename="v1.0.zip"',
            "response-content-type": "application/zip",
        },
    )
    async with httpx.AsyncClient(timeout=30) as http:
        got = await http.get(url)
        ranged = await http.get(url, headers={"Range": "bytes=10-19"})
        tampered = await http.get(url.replace("1.zip", "2.zip"))
        expired_url = await mc(
            mc.minio.presigned_get_object,
            BUCKET,
            "repo-archive/1.zip",
            expires=timedelta(seconds=1),
            request_date=datetime.now(UTC) - timedelta(minutes=1),
        )
        expired = await http.get(expired_url)
        presigned_put = await mc(mc.minio.presigned_put_object, BUCKET, "uploaded-by-browser")
        put = await http.put(presigned_put, content=b"from a browser")
    assert got.status_code == 200, got.text
    assert got.content == body
    assert got.headers["content-disposition"] == 'attachment; filename="v1.0.zip"'
    assert got.headers["content-type"] == "application/zip"
    assert got.headers["etag"] == f'"{md5_hex(body)}"'
    assert ranged.status_code == 206
    assert ranged.content == body[10:20]
    assert tampered.status_code == 403
    assert b"<Code>SignatureDoesNotMatch</Code>" in tampered.content
    assert expired.status_code == 403
    assert b"<Code>AccessDenied</Code>" in expired.content
    assert put.status_code == 200
    assert await mc.read("uploaded-by-browser") == b"from a browser"


async def test_wrong_secret_and_missing_bucket(mc: Client) -> None:
    wrong = Minio(
        urlsplit(mc.service.url).netloc,
        access_key=ACCESS_KEY,
        secret_key="not-the-secret-0123456789",
        secure=False,
        region="us-east-1",
    )
    error = await mc.error(wrong.list_buckets)
    assert error.code == "SignatureDoesNotMatch"
    assert SECRET not in str(error)
    error = await mc.error(mc.minio.put_object, "nobucket", "k", io.BytesIO(b"x"), 1)
    assert error.code == "NoSuchBucket"
    error = await mc.error(lambda: list(mc.minio.list_objects("nobucket")))
    assert error.code == "NoSuchBucket"
