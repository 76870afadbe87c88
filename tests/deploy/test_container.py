"""The container image (Containerfile), run with podman as an operator runs
it: `scripts/test-image` builds it and runs this file (the suite leaves it
out: tests/conftest.py's collect_ignore).

The container gets its settings from an env file like the unit's, its data
from a named volume at /data, and host networking to reach the Telegram
simulator, which runs on this machine. It migrates and serves; a file goes up
and comes back byte-exact; `podman stop` drains an upload that is still
running (held at the simulator) and the container exits 0; a new container on
the same volume serves both files. The service runs as a user other than
root, the image's HEALTHCHECK passes, and no bot token appears in the logs.
"""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.deploy.conftest import (
    START_TIMEOUT,
    Simulator,
    free_port,
    sim_process,
    wait_for,
)
from tests.running_service import payload

IMAGE = os.environ.get("TELEUPLOADER_IMAGE", "")
CHUNK = 64 * 1024
#: The size to stay under (uncompressed, as `podman images` shows it).
MAX_IMAGE_BYTES = 200_000_000
UID = 10001  # the image's `teleuploader` user


def podman(*args: str, check: bool = True, timeout: float = 120) -> str:
    result = subprocess.run(
        ["podman", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"podman {' '.join(args)} exited {result.returncode}\n{result.stdout}{result.stderr}"
        )
    return result.stdout


def logs(container: str) -> str:
    """What the container wrote, stdout and stderr both (podman keeps them apart)."""
    result = subprocess.run(
        ["podman", "logs", container], capture_output=True, text=True, timeout=60, check=True
    )
    return result.stdout + result.stderr


@pytest.fixture
def telegram(tmp_path: Path) -> Iterator[Simulator]:
    directory = tmp_path / "telegram"
    directory.mkdir()
    with sim_process(directory, bots=2, chat_id=-1001) as sim:
        yield sim


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[str]:
    name = f"teleuploader-test-{tmp_path.name}"[:60]
    podman("volume", "create", name)
    yield name
    podman("rm", "--all", "--force", check=False)
    podman("volume", "rm", "--force", name, check=False)


def test_the_image_is_small() -> None:
    size = int(podman("image", "inspect", "--format", "{{.Size}}", IMAGE))
    assert size < MAX_IMAGE_BYTES, f"the image is {size / 1e6:.0f} MB"


def test_the_image_migrates_serves_drains_and_keeps_its_data(
    telegram: Simulator, volume: str, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # What the unit reads from /etc/teleuploader/env, in the same format.
    env_file = tmp_path / "env"
    env_file.write_text(
        f"BOT_TOKENS={','.join(telegram.tokens)}\n"
        f"STORAGE_CHAT_ID={telegram.chat_id}\n"
        f"TELEGRAM_API_BASE={telegram.url}\n"
        # Host networking: loopback is this machine's.
        "HOST=127.0.0.1\n"
        f"PORT={port}\n"
        f"CHUNK_SIZE={CHUNK}\n"
        "SENDS_PER_MINUTE=0\n"
        "SHUTDOWN_GRACE_SECONDS=20\n"
    )

    def run(name: str) -> None:
        podman(
            "run", "--detach", "--pull=never", "--name", name, "--network=host",
            f"--env-file={env_file}", f"--volume={volume}:/data", "--stop-timeout=90", IMAGE,
        )  # fmt: skip
        wait_for(lambda: _ready(url), within=2 * START_TIMEOUT, what=f"{name} to be ready")

    run("first")
    assert podman("exec", "first", "id", "-u").strip() == str(UID)
    pid = podman("inspect", "--format", "{{.State.Pid}}", "first").strip()
    uids = next(
        line.split()[1:]
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("Uid:")
    )
    assert uids == [str(UID)] * 4, "the service itself runs as the image's user"
    podman("healthcheck", "run", "first")  # the image's HEALTHCHECK: /health answers

    key = podman("exec", "first", "teleuploader", "keys", "create", "ops").strip()
    auth = {"Authorization": f"Bearer {key}"}
    first_body = payload(3 * CHUNK + 7, seed=1)
    with httpx.Client(base_url=url, headers=auth, timeout=60) as http:
        stored = http.put("/api/files/first.bin", content=first_body)
        assert stored.status_code == 201, stored.text
        first_id = stored.json()["public_id"]
        assert http.get(f"/f/{first_id}").content == first_body

    # SIGTERM while an upload runs: the upload finishes, then the process exits 0.
    drained_body = payload(2 * CHUNK, seed=2)
    httpx.post(f"{telegram.url}/_sim/hold/sendDocument", timeout=5).raise_for_status()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        upload = pool.submit(
            httpx.put, f"{url}/api/files/drained.bin", content=drained_body, headers=auth,
            timeout=60,
        )  # fmt: skip
        wait_for(lambda: _held(telegram) >= 1, within=START_TIMEOUT, what="the upload's send")
        stop = pool.submit(podman, "stop", "--time=90", "first")
        wait_for(lambda: _stopping(url), within=START_TIMEOUT, what="the drain to begin")
        httpx.post(f"{telegram.url}/_sim/release/sendDocument", timeout=5).raise_for_status()
        answered = upload.result(timeout=60)
        stop.result(timeout=120)
    assert answered.status_code == 201, answered.text
    assert podman("inspect", "--format", "{{.State.ExitCode}}", "first").strip() == "0"
    first_log = logs("first")

    # A new container on the same volume: the database, the key and the files are there.
    run("second")
    with httpx.Client(base_url=url, headers=auth, timeout=60) as http:
        assert http.get(f"/f/{first_id}").content == first_body
        listed = http.get("/api/files").json()
        drained = next(item for item in listed["items"] if item["file_name"] == "drained.bin")
        assert http.get(f"/f/{drained['public_id']}").content == drained_body
    second_log = logs("second")

    assert "database schema is up to date" in first_log
    assert "Finished server process" in first_log
    for token in telegram.tokens:
        secret = token.split(":", 1)[1]
        assert secret not in first_log and secret not in second_log
    data = Path(podman("volume", "inspect", "--format", "{{.Mountpoint}}", volume).strip())
    assert (data / "teleuploader.db").stat().st_uid == UID
    assert (data / "spool").is_dir()


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _stopping(url: str) -> bool:
    """Told to stop: /ready says 503, or the listener is already closed."""
    try:
        return httpx.get(f"{url}/ready", timeout=2).status_code == 503
    except httpx.HTTPError:
        return True


def _held(telegram: Simulator) -> int:
    answer = httpx.get(f"{telegram.url}/_sim/hold/sendDocument", timeout=5).json()
    held: int = answer["held"]
    return held
