"""Real command-line clients, as Debian ships them (aws cli, rclone, s3cmd),
against a running service with the Telegram simulator behind it (SQLite and
Postgres through pgbouncer). Each runs in its default configuration apart
from the endpoint and the credentials, in a clean environment with a HOME
of its own, and each test checks what its user would: the files arrive
byte-exact, listings match, and the bucket is gone after rb/purge.

scripts/test installs the packages; the clients are taken from /usr/bin (an
aws cli in a virtualenv or pyenv shim earlier on PATH is another program).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.http.s3.test_api_boto3 import ACCESS_KEY, S3, SECRET, code
from tests.running_service import Service, ServiceFactory
from tests.running_service import payload as data

DEBIAN_BIN = Path("/usr/bin")
MiB = 1024 * 1024
#: Over aws cli's 8 MiB multipart threshold: it goes up in two parts.
BIG = 9 * MiB
#: Each command's own limit: a hung client fails the test instead of the run.
COMMAND_TIMEOUT = 120


def _tool(name: str) -> str:
    path = DEBIAN_BIN / name
    assert path.exists(), f"{path} is missing: scripts/test installs Debian's {name}"
    return str(path)


@pytest.fixture
async def service(start_service: ServiceFactory) -> Service:
    # Chunks of 1 MiB keep the 9 MiB file to a few Telegram messages; the
    # clients' multipart uploads need parts of 5 MiB and more.
    return await start_service(
        s3_credentials={ACCESS_KEY: SECRET},
        chunk_size=MiB,
        max_upload_size=64 * MiB,
    )


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """Only what a fresh login has: no AWS_* (AWS_CA_BUNDLE breaks rclone), no
    proxies, and a HOME without any client configuration."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
    env.update(extra)
    return env


async def run(*argv: str, env: dict[str, str], cwd: Path | None = None) -> str:
    """Run a client; fail with its output if it fails."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), COMMAND_TIMEOUT)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(f"{argv} did not finish in {COMMAND_TIMEOUT} s") from None
    assert process.returncode == 0, (
        f"{argv} exited {process.returncode}\nstdout: {out.decode()}\nstderr: {err.decode()}"
    )
    return out.decode()


def make_tree(root: Path) -> dict[str, bytes]:
    """Small files in folders, a key with a space, and one big file."""
    files = {
        "a.txt": b"alpha\n",
        "docs/readme.md": data(3000, seed=1),
        "docs/with space.bin": data(70_000, seed=2),
        "deep/er/empty": b"",
        "big.bin": data(BIG, seed=3),
    }
    for name, body in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
    return files


def read_tree(root: Path) -> dict[str, bytes]:
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


async def stored(s3: S3, bucket: str) -> dict[str, int]:
    listed = await s3("list_objects_v2", Bucket=bucket)
    return {entry["Key"]: entry["Size"] for entry in listed.get("Contents", [])}


async def assert_bucket_gone(s3: S3, bucket: str) -> None:
    assert code(await s3.error("head_bucket", Bucket=bucket)) == "404"
    assert bucket not in [b["Name"] for b in (await s3("list_buckets"))["Buckets"]]


# --------------------------------------------------------------------------- aws cli


async def test_aws_cli_sync_cp_versions_and_rb_force(
    service: Service, home: Path, tmp_path: Path
) -> None:
    env = clean_env(
        home,
        AWS_ACCESS_KEY_ID=ACCESS_KEY,
        AWS_SECRET_ACCESS_KEY=SECRET,
        AWS_DEFAULT_REGION="us-east-1",
    )
    aws = (_tool("aws"), "--endpoint-url", service.url)
    s3 = S3(service)
    up, down = tmp_path / "up", tmp_path / "down"
    files = make_tree(up)

    await run(*aws, "s3", "mb", "s3://tree", env=env)
    await run(*aws, "s3", "sync", str(up), "s3://tree", env=env)
    assert await stored(s3, "tree") == {name: len(body) for name, body in files.items()}
    again = await run(*aws, "s3", "sync", str(up), "s3://tree", env=env)
    assert again.strip() == "", f"a second sync sent files again: {again}"

    await run(*aws, "s3", "sync", "s3://tree", str(down), env=env)
    assert read_tree(down) == files

    # cp both ways, the big file as a multipart upload (over the 8 MiB threshold).
    await run(*aws, "s3", "cp", str(up / "big.bin"), "s3://tree/copy/big.bin", env=env)
    head = await s3("head_object", Bucket="tree", Key="copy/big.bin")
    assert head["ETag"].strip('"').endswith("-2"), "aws cli did not upload in parts"
    await run(*aws, "s3", "cp", "s3://tree/copy/big.bin", str(tmp_path / "big.back"), env=env)
    assert (tmp_path / "big.back").read_bytes() == files["big.bin"]

    listed = json.loads(
        await run(*aws, "s3api", "list-object-versions", "--bucket", "tree", env=env)
    )
    versions = {v["Key"]: (v["VersionId"], v["IsLatest"], v["Size"]) for v in listed["Versions"]}
    expected = {name: ("null", True, len(body)) for name, body in files.items()}
    expected["copy/big.bin"] = ("null", True, BIG)
    assert versions == expected

    # rb --force empties the bucket, an unfinished multipart upload included.
    await s3("create_multipart_upload", Bucket="tree", Key="unfinished")
    await run(*aws, "s3", "rb", "--force", "s3://tree", env=env)
    await assert_bucket_gone(s3, "tree")


# --------------------------------------------------------------------------- rclone


def rclone_config(home: Path, service: Service) -> Path:
    config = home / "rclone.conf"
    config.write_text(
        "[tu]\n"
        "type = s3\n"
        "provider = Other\n"
        f"access_key_id = {ACCESS_KEY}\n"
        f"secret_access_key = {SECRET}\n"
        f"endpoint = {service.url}\n"
    )
    return config


async def test_rclone_sync_check_and_purge(service: Service, home: Path, tmp_path: Path) -> None:
    rclone = (_tool("rclone"), "--config", str(rclone_config(home, service)))
    env = clean_env(home)
    s3 = S3(service)
    up, down = tmp_path / "up", tmp_path / "down"
    files = make_tree(up)
    await s3("create_bucket", Bucket="mirror")

    await run(*rclone, "sync", str(up), "tu:mirror", env=env)
    assert await stored(s3, "mirror") == {name: len(body) for name, body in files.items()}
    await run(*rclone, "check", str(up), "tu:mirror", env=env)  # exits 1 on a difference

    # A change and a delete reach the bucket on the next sync.
    (up / "a.txt").write_bytes(b"alpha, changed\n")
    (up / "docs" / "readme.md").unlink()
    await run(*rclone, "sync", str(up), "tu:mirror", env=env)
    await run(*rclone, "check", str(up), "tu:mirror", env=env)
    await run(*rclone, "sync", "tu:mirror", str(down), env=env)
    assert read_tree(down) == read_tree(up)
    listed = await run(*rclone, "lsf", "-R", "--files-only", "tu:mirror", env=env)
    assert sorted(line for line in listed.splitlines()) == sorted(read_tree(up))

    await run(*rclone, "purge", "tu:mirror", env=env)
    await assert_bucket_gone(s3, "mirror")


# --------------------------------------------------------------------------- s3cmd


def s3cmd_config(home: Path, service: Service) -> Path:
    host = service.url.removeprefix("http://")
    config = home / ".s3cfg"
    config.write_text(
        "[default]\n"
        f"access_key = {ACCESS_KEY}\n"
        f"secret_key = {SECRET}\n"
        f"host_base = {host}\n"
        f"host_bucket = {host}\n"
        "use_https = False\n"
    )
    return config


async def test_s3cmd_sync_both_ways(service: Service, home: Path, tmp_path: Path) -> None:
    s3cmd = (_tool("s3cmd"), "--config", str(s3cmd_config(home, service)))
    env = clean_env(home)
    s3 = S3(service)
    up, down = tmp_path / "up", tmp_path / "down"
    files = make_tree(up)

    await run(*s3cmd, "mb", "s3://pair", env=env)
    await run(*s3cmd, "sync", f"{up}/", "s3://pair/", env=env)
    assert await stored(s3, "pair") == {name: len(body) for name, body in files.items()}
    again = await run(*s3cmd, "sync", "--stats", f"{up}/", "s3://pair/", env=env)
    assert "upload: " not in again, f"a second sync sent files again: {again}"

    down.mkdir()
    await run(*s3cmd, "sync", "s3://pair/", f"{down}/", env=env)
    assert read_tree(down) == files

    # A file changed in the bucket comes back down on the next sync.
    await s3("put_object", Bucket="pair", Key="a.txt", Body=b"alpha, from elsewhere\n")
    await run(*s3cmd, "sync", "s3://pair/", f"{down}/", env=env)
    assert (down / "a.txt").read_bytes() == b"alpha, from elsewhere\n"
    assert read_tree(down) == {**files, "a.txt": b"alpha, from elsewhere\n"}
