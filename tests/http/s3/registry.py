"""A real Docker registry (CNCF distribution, Debian's `docker-registry`) on the
S3 API, pushed to and pulled from with `skopeo`: helpers shared by
tests/http/s3/test_docker_registry.py and bench/s3_push_bench.py.

- `build_oci_image` writes an OCI image layout with random gzip layers (no
  Docker daemon needed); `read_oci_image` reads one back.
- `start_stack` runs `teleuploader telegram-sim` and `teleuploader serve`
  (SQLite or a given database, S3 on) as subprocesses, with getFile capped
  at the service's CHUNK_SIZE; `start_registry` runs `docker-registry serve`
  with the `s3` storage driver pointed at the service.
- `skopeo_copy` pushes or pulls.

Every process goes through `tests.deploy.conftest.Processes`, so the caller's
`stop_all()` ends all of them (SIGTERM, then SIGKILL), also on failure.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import random
import shutil
import subprocess
import tarfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import httpx
from botocore.config import Config

from tests.deploy.conftest import (
    TELEUPLOADER,
    Proc,
    Processes,
    base_env,
    free_port,
    port_open,
    run_cli,
    sqlite_url,
    wait_for,
)

MiB = 1024 * 1024
REGISTRY = shutil.which("docker-registry")
SKOPEO = shutil.which("skopeo")
ACCESS_KEY = "AKIDREGISTRYTEST"
SECRET = "registry-test-secret-0123456789abcdef"
REGION = "us-east-1"
CHAT_ID = -1002
START_TIMEOUT = 30.0

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"


def missing_tools() -> str | None:
    """Why the registry tests cannot run here, or None."""
    missing = [
        name for name, path in (("docker-registry", REGISTRY), ("skopeo", SKOPEO)) if not path
    ]
    if not missing:
        return None
    return (
        f"{' and '.join(missing)} not installed: scripts/test installs Debian's "
        "docker-registry and skopeo packages (apt-get install docker-registry skopeo)"
    )


# --- OCI image layouts ------------------------------------------------------------------


@dataclass(frozen=True)
class Blob:
    digest: str
    size: int
    media_type: str

    def descriptor(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


@dataclass(frozen=True)
class Image:
    manifest: bytes
    manifest_digest: str
    config: Blob
    layers: list[Blob]

    @property
    def layer_bytes(self) -> int:
        return sum(layer.size for layer in self.layers)


def _write_blob(directory: Path, data: bytes, media_type: str) -> Blob:
    digest = hashlib.sha256(data).hexdigest()
    path = directory / "blobs" / "sha256" / digest
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return Blob(f"sha256:{digest}", len(data), media_type)


def _layer(size: int, rng: random.Random, index: int) -> tuple[bytes, str]:
    """A gzip'd tar holding one file of random bytes, about `size` bytes in all,
    and the tar's own digest (the diff_id). gzip level 0 (stored blocks): random
    bytes do not compress, and a layer skopeo sees as compressed is pushed as is."""
    content = rng.randbytes(size)
    tar_buffer = io.BytesIO()
    with tarfile.open(fileobj=tar_buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        member = tarfile.TarInfo(f"layer{index}/random.bin")
        member.size = len(content)
        member.mtime = 1_700_000_000
        tar.addfile(member, io.BytesIO(content))
    tar_bytes = tar_buffer.getvalue()
    diff_id = "sha256:" + hashlib.sha256(tar_bytes).hexdigest()
    return gzip.compress(tar_bytes, compresslevel=0, mtime=0), diff_id


def build_oci_image(
    directory: Path, layer_sizes: Sequence[int], *, tag: str, seed: int = 1
) -> Image:
    """An OCI image layout (oci-layout, index.json, blobs/sha256/...) with one
    image: a config blob and random gzip layers of about `layer_sizes` bytes."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    rng = random.Random(seed)
    layers: list[Blob] = []
    diff_ids: list[str] = []
    for index, size in enumerate(layer_sizes):
        data, diff_id = _layer(size, rng, index)
        layers.append(_write_blob(directory, data, OCI_LAYER_GZIP))
        diff_ids.append(diff_id)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Cmd": ["/bin/true"]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [{"created_by": f"layer {i}"} for i in range(len(layers))],
    }
    config_blob = _write_blob(directory, json.dumps(config).encode(), OCI_CONFIG)
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": config_blob.descriptor(),
            "layers": [layer.descriptor() for layer in layers],
        }
    ).encode()
    manifest_blob = _write_blob(directory, manifest, OCI_MANIFEST)
    image_index = {
        "schemaVersion": 2,
        "manifests": [
            {
                **manifest_blob.descriptor(),
                "annotations": {"org.opencontainers.image.ref.name": tag},
            }
        ],
    }
    (directory / "index.json").write_text(json.dumps(image_index))
    return Image(manifest, manifest_blob.digest, config_blob, layers)


def read_oci_image(directory: Path, tag: str) -> Image:
    """The image tagged `tag` in a layout, every blob checked against its digest."""
    index = json.loads((directory / "index.json").read_text())
    entries = [
        m
        for m in index["manifests"]
        if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag
    ]
    assert len(entries) == 1, index
    manifest_digest = entries[0]["digest"]
    manifest = _read_blob(directory, manifest_digest)
    parsed = json.loads(manifest)

    def blob(descriptor: dict[str, Any]) -> Blob:
        data = _read_blob(directory, descriptor["digest"])
        assert len(data) == descriptor["size"], descriptor
        return Blob(descriptor["digest"], len(data), descriptor["mediaType"])

    return Image(
        manifest, manifest_digest, blob(parsed["config"]), [blob(d) for d in parsed["layers"]]
    )


def _read_blob(directory: Path, digest: str) -> bytes:
    algorithm, hex_digest = digest.split(":", 1)
    data = (directory / "blobs" / algorithm / hex_digest).read_bytes()
    assert hashlib.sha256(data).hexdigest() == hex_digest, f"{digest} does not match its bytes"
    return data


# --- the simulator and the service --------------------------------------------------------


@dataclass
class Stack:
    sim: Proc
    sim_url: str
    service: Proc
    service_url: str
    service_port: int
    chunk_size: int
    env: dict[str, str] = field(default_factory=dict)

    def s3(self) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.service_url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET,
            region_name=REGION,
            config=Config(
                signature_version="s3v4",
                s3={"addressing_style": "path"},
                retries={"max_attempts": 1, "mode": "standard"},
            ),
        )

    def sim_stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = httpx.get(f"{self.sim_url}/_sim/stats", timeout=10).json()
        return stats

    def reset_sim_stats(self) -> None:
        httpx.post(f"{self.sim_url}/_sim/reset-stats", timeout=10).raise_for_status()


@dataclass(frozen=True)
class TelegramCounts:
    messages: int  # messages ever posted in the storage chat
    send_calls: int  # sendDocument calls, 429'd ones included
    rate_limited: int  # 429s the simulator gave
    bytes_received: int  # request bodies of Bot API calls (uploads)
    downloads: int  # file downloads (reading chunks back)
    bytes_sent: int  # file bytes downloaded

    @staticmethod
    def of(stats: Mapping[str, Any]) -> TelegramCounts:
        bots = stats["bots"].values()
        return TelegramCounts(
            messages=stats["chats"][str(CHAT_ID)]["messages"],
            send_calls=sum(bot["calls"].get("sendDocument", 0) for bot in bots),
            rate_limited=sum(bot["rate_limited"] for bot in bots),
            bytes_received=sum(bot["bytes_received"] for bot in bots),
            downloads=sum(bot["downloads"] for bot in bots),
            bytes_sent=sum(bot["bytes_sent"] for bot in bots),
        )

    def __sub__(self, other: TelegramCounts) -> TelegramCounts:
        return TelegramCounts(
            self.messages - other.messages,
            self.send_calls - other.send_calls,
            self.rate_limited - other.rate_limited,
            self.bytes_received - other.bytes_received,
            self.downloads - other.downloads,
            self.bytes_sent - other.bytes_sent,
        )


def start_stack(
    processes: Processes,
    directory: Path,
    *,
    bots: int = 3,
    chunk_size: int,
    sim_args: Sequence[str] = (),
    service_env: Mapping[str, str] | None = None,
    bucket: str | None = "registry",
    database_url: str | None = None,
) -> Stack:
    """The simulator and `teleuploader serve` (S3 on), and the bucket, created
    with boto3. `database_url`: a migrated, empty database; by default a fresh
    SQLite database, migrated here. The simulator's getFile refuses files over
    `chunk_size`: no chunk may be larger."""
    directory.mkdir(parents=True, exist_ok=True)
    sim_port = free_port()
    tokens_file = directory / "tokens.txt"
    sim = processes.start(
        "telegram-sim",
        [
            TELEUPLOADER,
            "telegram-sim",
            "--port",
            str(sim_port),
            "--bots",
            str(bots),
            "--chat-id",
            str(CHAT_ID),
            "--tokens-file",
            tokens_file,
            *sim_args,
        ],
        env=base_env(directory),
    )
    wait_for(
        lambda: port_open(sim_port) and tokens_file.is_file() and bool(tokens_file.read_text()),
        within=START_TIMEOUT,
        what="the Telegram simulator",
        proc=sim,
    )
    tokens = tokens_file.read_text().split()
    sim_url = f"http://127.0.0.1:{sim_port}"
    httpx.post(
        f"{sim_url}/_sim/config", json={"max_getfile_bytes": chunk_size}, timeout=10
    ).raise_for_status()
    port = free_port()
    env = base_env(
        directory,
        BOT_TOKENS=",".join(tokens),
        STORAGE_CHAT_ID=str(CHAT_ID),
        TELEGRAM_API_BASE=sim_url,
        DATABASE_URL=database_url or sqlite_url(directory / "teleuploader.db"),
        HOST="127.0.0.1",
        PORT=str(port),
        CHUNK_SIZE=str(chunk_size),
        SENDS_PER_MINUTE="0",
        SHUTDOWN_GRACE_SECONDS="5",
        S3_CREDENTIALS=f"{ACCESS_KEY}:{SECRET}",
        LOG_FORMAT="json",
        LOG_LEVEL="INFO",
    )
    env.update(service_env or {})
    if database_url is None:
        run_cli(["migrate"], env=env, cwd=directory)
    service = processes.start("teleuploader-serve", [TELEUPLOADER, "serve"], env=env)
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: _answers(f"{url}/ready"), within=START_TIMEOUT, what="/ready", proc=service)
    stack = Stack(sim, sim_url, service, url, port, chunk_size, env)
    if bucket is not None:
        stack.s3().create_bucket(Bucket=bucket)
    return stack


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


# --- the registry ---------------------------------------------------------------------------


@dataclass
class Registry:
    proc: Proc
    port: int
    config_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"


def registry_config(
    *,
    port: int,
    endpoint: str,
    bucket: str,
    redirect: bool,
    chunk_size: int = 5 * MiB,
    root: str = "/docker",
    copy_threshold: int | None = None,
    copy_chunk_size: int | None = None,
    log_level: str = "debug",
) -> dict[str, Any]:
    """A registry config (JSON is YAML) with the s3 storage driver on our service.

    `copy_threshold`/`copy_chunk_size`: the driver moves a finished upload into
    place with CopyObject up to `multipartcopythresholdsize` (32 MiB), above it
    with UploadPartCopy of `multipartcopychunksize` (32 MiB) ranges, up to 100
    at once."""
    storage: dict[str, Any] = {
        "s3": {
            "accesskey": ACCESS_KEY,
            "secretkey": SECRET,
            "region": REGION,
            "regionendpoint": endpoint,
            "bucket": bucket,
            "secure": False,
            "v4auth": True,
            "chunksize": chunk_size,
            "rootdirectory": root,
        },
        "delete": {"enabled": True},
        "maintenance": {"uploadpurging": {"enabled": False}},
    }
    if copy_threshold is not None:
        storage["s3"]["multipartcopythresholdsize"] = copy_threshold
    if copy_chunk_size is not None:
        storage["s3"]["multipartcopychunksize"] = copy_chunk_size
    if not redirect:
        storage["redirect"] = {"disable": True}
    return {
        "version": "0.1",
        "log": {"level": log_level, "formatter": "text", "accesslog": {"disabled": False}},
        "storage": storage,
        "http": {"addr": f"127.0.0.1:{port}", "secret": "registry-http-secret"},
        "health": {"storagedriver": {"enabled": False}},
    }


def start_registry(
    processes: Processes,
    directory: Path,
    stack: Stack,
    *,
    redirect: bool,
    bucket: str = "registry",
    chunk_size: int = 5 * MiB,
    copy_threshold: int | None = None,
    copy_chunk_size: int | None = None,
    log_level: str = "debug",
) -> Registry:
    """`env -u AWS_CA_BUNDLE docker-registry serve config.yml` on a free port:
    aws-sdk-go in the registry panics on a CA bundle it cannot parse, and some
    machines set one (deploy-pitfalls.md)."""
    assert REGISTRY is not None, missing_tools()
    port = free_port()
    config = registry_config(
        port=port,
        endpoint=stack.service_url,
        bucket=bucket,
        redirect=redirect,
        chunk_size=chunk_size,
        copy_threshold=copy_threshold,
        copy_chunk_size=copy_chunk_size,
        log_level=log_level,
    )
    config_path = directory / "registry-config.yml"
    config_path.write_text(json.dumps(config, indent=2))
    proc = processes.start(
        "docker-registry",
        ["env", "-u", "AWS_CA_BUNDLE", REGISTRY, "serve", config_path],
        env=base_env(directory),
    )
    registry = Registry(proc, port, config_path)
    wait_for(
        lambda: _answers(f"{registry.url}/v2/"),
        within=START_TIMEOUT,
        what="docker-registry to answer /v2/",
        proc=proc,
    )
    return registry


# --- skopeo ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Copied:
    seconds: float
    output: str


def skopeo_copy(source: str, destination: str, *, directory: Path, timeout: float = 600) -> Copied:
    """`skopeo copy` without TLS verification towards the registry, with no
    policy file needed and no credentials looked up."""
    assert SKOPEO is not None, missing_tools()
    argv = [SKOPEO, "--insecure-policy", "copy", "--retry-times", "0"]
    if source.startswith("docker://"):
        argv += ["--src-tls-verify=false", "--src-no-creds"]
    if destination.startswith("docker://"):
        argv += ["--dest-tls-verify=false", "--dest-no-creds"]
    argv += [source, destination]
    env = base_env(directory, XDG_RUNTIME_DIR=str(directory), TMPDIR=str(directory))
    started = time.monotonic()
    result = subprocess.run(
        argv,
        env=env,
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    seconds = time.monotonic() - started
    output = result.stdout + result.stderr
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {result.returncode}\n{output}")
    return Copied(seconds, output)


def process_logs(processes: Processes, limit: int = 4000) -> str:
    """Every started process's output tails, for assertion messages."""
    return "\n".join(proc.output(limit) for proc in processes.started)
