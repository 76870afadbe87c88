"""A real Docker push and pull through the S3 API.

Debian's `docker-registry` (CNCF distribution 2.8) runs with the `s3` storage
driver pointed at `teleuploader serve` (S3 on; SQLite, and Postgres through
pgbouncer) in front of the Telegram simulator, all of them subprocesses.
`skopeo` pushes an OCI image layout built here (random gzip layers of tens of
MiB; no Docker daemon) and pulls it back; every blob and the manifest must
come back byte for byte. Once with
`storage.redirect.disable: true` (the registry streams blobs itself), on
SQLite, and once with presigned redirects (blob GETs are answered with
presigned URLs to the service, which skopeo follows), on Postgres. The
multipart reseeding runs on both; the empty blob and the garbage collection
on SQLite (their SQL is tested on both under tests/db/).

The registry also writes many tiny objects (link files, `startedat`, hash
states): those stay in the database, so the Telegram messages a push sends are
about the layer bytes / CHUNK_SIZE, not one per registry file.

The simulator's getFile refuses anything over CHUNK_SIZE, and at the end of
each test no bot token may have had two Bot API calls in flight at once.

scripts/test installs both tools; without them these tests fail (not skip).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import random
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from app.db.engine import create_engine
from app.db.models import GcEntry
from tests.conftest import BACKENDS, empty_tables, run_async
from tests.db.helpers import Database
from tests.deploy.conftest import Processes, base_env, check_one_call_per_lane, wait_for
from tests.http.s3.registry import (
    CHAT_ID,
    REGISTRY,
    Image,
    MiB,
    Stack,
    TelegramCounts,
    build_oci_image,
    missing_tools,
    process_logs,
    read_oci_image,
    skopeo_copy,
    start_registry,
    start_stack,
)

CHUNK_SIZE = 4 * MiB
REGISTRY_PART = 5 * MiB  # the registry's `chunksize`: the S3 part size it uploads
LAYER_SIZES = [12 * MiB, 20 * MiB, 28 * MiB]
TAG = "v1"
BUCKET = "registry"


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Image]:
    directory = tmp_path_factory.mktemp("oci-image") / "layout"
    return directory, build_oci_image(directory, LAYER_SIZES, tag=TAG, seed=7)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    """Every process a test starts; all stopped at teardown, failed test or not."""
    problem = missing_tools()
    if problem is not None:
        pytest.fail(problem)
    group = Processes(tmp_path)
    try:
        yield group
    finally:
        group.stop_all()


@pytest.fixture
def stack(request: pytest.FixtureRequest, processes: Processes, tmp_path: Path) -> Iterator[Stack]:
    """The simulator and the service, on a fresh SQLite database or on the
    session's Postgres database (emptied) through pgbouncer. At teardown, once
    everything but the simulator has stopped: no token had two calls at once."""
    backend, service_env = (
        request.param if isinstance(request.param, tuple) else (request.param, None)
    )
    database_url = None
    if backend == "postgres":
        database: Database = request.getfixturevalue("postgres_database")
        empty_tables(database)
        database_url = database.url
    with logs_on_failure(processes):
        started = start_stack(
            processes,
            tmp_path / "stack",
            chunk_size=CHUNK_SIZE,
            bucket=BUCKET,
            database_url=database_url,
            service_env=service_env,
        )
    yield started
    for proc in reversed(processes.started):
        if proc is not started.sim:
            proc.stop()
    check_one_call_per_lane(started.sim_url)


@contextlib.contextmanager
def logs_on_failure(processes: Processes) -> Iterator[None]:
    try:
        yield
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{process_logs(processes)}") from None


def blob_sha256(response: httpx.Response) -> str:
    return "sha256:" + hashlib.sha256(response.content).hexdigest()


# Each mode once, each on one backend: the S3 answers do not depend on the
# database, and each backend still serves a whole push and pull.
@pytest.mark.parametrize(
    ("stack", "redirect"),
    [("sqlite", False), (pytest.param("postgres", True, marks=pytest.mark.postgres))],
    ids=["sqlite-redirect-disabled", "postgres-presigned-redirects"],
    indirect=["stack"],
)
def test_docker_push_and_pull(
    redirect: bool, image: tuple[Path, Image], stack: Stack, processes: Processes, tmp_path: Path
) -> None:
    layout, pushed_image = image
    with logs_on_failure(processes):
        registry = start_registry(
            processes,
            tmp_path,
            stack,
            redirect=redirect,
            bucket=BUCKET,
            chunk_size=REGISTRY_PART,
            # Without redirects, finished uploads above 8 MiB are moved into
            # place with UploadPartCopy of 6 MiB ranges (in parallel, cutting
            # through chunks and parts); with redirects, by CopyObject (the
            # driver's default below 32 MiB).
            copy_threshold=None if redirect else 8 * MiB,
            copy_chunk_size=None if redirect else 6 * MiB,
        )
        reference = f"docker://{registry.host}/test/image:{TAG}"
        before = TelegramCounts.of(stack.sim_stats())

        skopeo_copy(f"oci:{layout}:{TAG}", reference, directory=tmp_path)
        push = TelegramCounts.of(stack.sim_stats()) - before
        skopeo_copy(reference, f"oci:{tmp_path / 'pulled'}:{TAG}", directory=tmp_path)

        # Every blob and the manifest came back as pushed (digests checked on read).
        pulled = read_oci_image(tmp_path / "pulled", TAG)
        assert pulled.manifest_digest == pushed_image.manifest_digest
        assert pulled.manifest == pushed_image.manifest
        assert pulled.config == pushed_image.config
        assert pulled.layers == pushed_image.layers

        # The registry's files in the bucket: the blobs at full size, and the
        # small bookkeeping files beside them.
        objects = stack.s3().list_objects_v2(Bucket=BUCKET)["Contents"]
        sizes = {
            o["Key"].rsplit("/", 2)[-2]: o["Size"] for o in objects if o["Key"].endswith("/data")
        }
        for blob in [pushed_image.config, *pushed_image.layers]:
            assert sizes[blob.digest.split(":")[1]] == blob.size
        links = [o for o in objects if o["Key"].endswith("/link")]
        assert len(links) >= len(pushed_image.layers) + 2, [o["Key"] for o in objects]
        assert not [o["Key"] for o in objects if "/_uploads/" in o["Key"]]

        # Small registry files did not reach Telegram: the messages are the
        # layers cut into chunks. The registry uploads parts of REGISTRY_PART
        # (its last part up to twice that) and each part is cut into chunks of
        # its own, so a part boundary can cost one more, shorter chunk.
        fewest = sum(math.ceil(layer.size / CHUNK_SIZE) for layer in pushed_image.layers)
        most = sum(
            math.ceil(layer.size / CHUNK_SIZE) + math.ceil(layer.size / REGISTRY_PART)
            for layer in pushed_image.layers
        )
        config_blob = 1  # a multipart upload of one tiny part; parts always go to Telegram
        assert fewest <= push.messages <= most + config_blob, (push, fewest, most)
        assert push.rate_limited == 0
        assert push.downloads == 0, "the push read chunks back from Telegram"
        assert push.bytes_received >= pushed_image.layer_bytes

        # The registry API directly: blobs by digest, with and without redirects.
        access_log = registry.proc.stdout()
        redirected = [line for line in access_log.splitlines() if '" 307 ' in line]
        with httpx.Client(timeout=60, follow_redirects=False) as http:
            manifest = http.get(
                f"{registry.url}/v2/test/image/manifests/{TAG}",
                headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
            )
            assert manifest.status_code == 200, manifest.text
            assert manifest.content == pushed_image.manifest
            layer = pushed_image.layers[0]
            blob_url = f"{registry.url}/v2/test/image/blobs/{layer.digest}"
            got = http.get(blob_url)
            head = http.head(blob_url)
            if redirect:
                assert len(redirected) >= len(pushed_image.layers) + 1, access_log
                assert got.status_code == 307, got.text
                location = got.headers["location"]
                assert location.startswith(f"{stack.service_url}/{BUCKET}/"), location
                assert "X-Amz-Signature=" in location
                got = http.get(location)
                assert head.status_code == 307
                head = http.head(head.headers["location"])
            else:
                assert redirected == [], redirected
            assert got.status_code == 200, got.text
            assert blob_sha256(got) == layer.digest
            assert head.status_code == 200
            assert int(head.headers["content-length"]) == layer.size


def _upload_in_pieces(http: httpx.Client, registry_url: str, data: bytes, pieces: list[int]) -> str:
    """A blob upload in several PATCH requests (Content-Range), as resumable
    clients send it; returns the digest the registry accepted."""
    assert sum(pieces) == len(data)
    started = http.post(f"{registry_url}/v2/test/chunked/blobs/uploads/")
    assert started.status_code == 202, started.text
    location = started.headers["location"]
    offset = 0
    for size in pieces:
        piece = data[offset : offset + size]
        patched = http.patch(
            httpx.URL(registry_url).join(location),
            content=piece,
            headers={
                "Content-Type": "application/octet-stream",
                "Content-Range": f"{offset}-{offset + size - 1}",
            },
        )
        assert patched.status_code == 202, patched.text
        offset += size
        assert patched.headers["range"] == f"0-{offset - 1}"
        location = patched.headers["location"]
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    done = http.put(httpx.URL(registry_url).join(location).copy_merge_params({"digest": digest}))
    assert done.status_code == 201, done.text
    return digest


@pytest.mark.parametrize("stack", BACKENDS, indirect=True)
def test_blob_uploaded_in_pieces_reseeds_multipart_uploads(
    stack: Stack, processes: Processes, tmp_path: Path
) -> None:
    """Each PATCH reopens the driver's multipart upload (ListMultipartUploads,
    ListParts). When its last part is under 5 MiB the driver completes the
    upload and starts a new one, seeded with UploadPartCopy of the whole object
    (or, under 5 MiB in all, by reading it back): the parts of the new upload
    point into the chunks of the object they replace."""
    with logs_on_failure(processes):
        registry = start_registry(
            processes, tmp_path, stack, redirect=False, bucket=BUCKET, chunk_size=REGISTRY_PART
        )
        rng = random.Random(11)
        # 3 MiB, then more: the whole upload is under 5 MiB at the first reopen
        # (read back), then 6 MiB + 1 MiB: the last part is short (re-seeded by
        # UploadPartCopy), then 2 MiB more and a short tail.
        cases = {
            "small-first": [3 * MiB, 1 * MiB, 2 * MiB + 17],
            "short-last-part": [6 * MiB, 1 * MiB, 2 * MiB, 5 * MiB + 3],
            # One part of exactly the driver's chunk size, twice.
            "whole-parts": [REGISTRY_PART, REGISTRY_PART],
        }
        blobs: dict[str, tuple[str, TelegramCounts]] = {}
        with httpx.Client(timeout=120) as http:
            for name, pieces in cases.items():
                data = rng.randbytes(sum(pieces))
                before = TelegramCounts.of(stack.sim_stats())
                digest = _upload_in_pieces(http, registry.url, data, pieces)
                blobs[name] = digest, TelegramCounts.of(stack.sim_stats()) - before
                got = http.get(f"{registry.url}/v2/test/chunked/blobs/{digest}")
                assert got.status_code == 200, (name, got.text)
                assert len(got.content) == len(data), name
                assert blob_sha256(got) == digest, name
                # A ranged read through the registry (GetObject with Range).
                last = len(data) - 1
                ranged = http.get(
                    f"{registry.url}/v2/test/chunked/blobs/{digest}",
                    headers={"Range": f"bytes={last - 99}-{last}"},
                )
                assert ranged.status_code == 206, (name, ranged.text)
                assert ranged.content == data[-100:], name
        # Re-seeding by UploadPartCopy is metadata only: nothing was read
        # back, and no byte was sent to Telegram twice.
        counts = blobs["short-last-part"][1]
        assert counts.downloads == 0, counts
        assert counts.bytes_received < sum(cases["short-last-part"]) * 1.01, counts
        # Once the service's GC has deleted what the registry replaced and
        # removed (its _uploads folder), the blobs still read back whole.
        _wait_for_gc(stack)
        for name, (digest, _) in blobs.items():
            key = f"docker/docker/registry/v2/blobs/sha256/{digest[7:9]}/{digest[7:]}/data"
            body = stack.s3().get_object(Bucket=BUCKET, Key=key)["Body"].read()
            assert hashlib.sha256(body).hexdigest() == digest[7:], name
        uploads = stack.s3().list_multipart_uploads(Bucket=BUCKET)
        assert uploads.get("Uploads", []) == [], uploads


@pytest.mark.parametrize("stack", ["sqlite"], indirect=True)
def test_empty_blob(stack: Stack, processes: Processes, tmp_path: Path) -> None:
    """An empty blob (PUT ?digest with no PATCH): Debian's registry 2.8.2
    writes it as a multipart upload with no part at all and completes that
    with an empty part list (newer drivers upload one zero-byte part first)."""
    with logs_on_failure(processes):
        registry = start_registry(
            processes, tmp_path, stack, redirect=False, bucket=BUCKET, chunk_size=REGISTRY_PART
        )
        with httpx.Client(timeout=60) as http:
            digest = _upload_in_pieces(http, registry.url, b"", [])
            got = http.get(f"{registry.url}/v2/test/chunked/blobs/{digest}")
        assert got.status_code == 200, got.text
        assert got.content == b""


def _live_messages(stack: Stack) -> int:
    live: int = stack.sim_stats()["chats"][str(CHAT_ID)]["live_messages"]
    return live


def _gc_backlog(stack: Stack) -> int:
    """Messages the service's GC still has to delete: the rows of its ledger."""

    async def count() -> int:
        engine = create_engine(stack.env["DATABASE_URL"])
        try:
            async with engine.connect() as connection:
                rows = await connection.scalar(select(func.count()).select_from(GcEntry))
        finally:
            await engine.dispose()
        return int(rows or 0)

    return run_async(count)


def _wait_for_gc(stack: Stack, *, within: float = 30) -> int:
    """Wait until the service's GC has deleted every chunk that was replaced or
    removed (its ledger is empty; an entry goes once its message is deleted);
    the live messages left."""
    wait_for(
        lambda: _gc_backlog(stack) == 0,
        within=within,
        what="the service's GC to empty its ledger",
        proc=stack.service,
    )
    return _live_messages(stack)


# Deletes final (no trash, whose retention would keep the messages for a day):
# the registry's deletes must free them now. The trash's own expiry is
# tested in tests/http/api/test_trash.py.
@pytest.mark.parametrize(
    "stack", [("sqlite", {"TRASH_RETENTION_SECONDS": "0"})], ids=["sqlite"], indirect=True
)
def test_garbage_collect_frees_telegram_messages(
    image: tuple[Path, Image], stack: Stack, processes: Processes, tmp_path: Path
) -> None:
    """Delete the manifest, run `docker-registry garbage-collect` (it walks the
    bucket with listings and deletes unreferenced blobs with DeleteObjects):
    the blobs leave the bucket and their Telegram messages are deleted."""
    layout, pushed_image = image
    with logs_on_failure(processes):
        registry = start_registry(
            processes, tmp_path, stack, redirect=False, bucket=BUCKET, chunk_size=REGISTRY_PART
        )
        reference = f"docker://{registry.host}/test/image:{TAG}"
        skopeo_copy(f"oci:{layout}:{TAG}", reference, directory=tmp_path)
        assert _wait_for_gc(stack) > 0
        deleted = httpx.delete(
            f"{registry.url}/v2/test/image/manifests/{pushed_image.manifest_digest}", timeout=30
        )
        assert deleted.status_code == 202, deleted.text

        collected = subprocess.run(
            [
                "env",
                "-u",
                "AWS_CA_BUNDLE",
                str(REGISTRY),
                "garbage-collect",
                "--delete-untagged",
                str(registry.config_path),
            ],
            env=base_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert collected.returncode == 0, collected.stdout + collected.stderr

        objects = stack.s3().list_objects_v2(Bucket=BUCKET).get("Contents", [])
        left = [o["Key"] for o in objects if "/blobs/" in o["Key"]]
        assert left == [], left
        assert _wait_for_gc(stack) == 0
