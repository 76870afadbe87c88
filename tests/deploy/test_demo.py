"""`teleuploader demo`, run as a newcomer runs it: a second start on the same
--data-dir serves the files of the first, a plain run leaves nothing in the
temporary directory, and the banner's own upload command reaches the bots."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest

from tests.deploy.conftest import (
    START_TIMEOUT,
    TELEUPLOADER,
    Proc,
    Processes,
    base_env,
    free_port,
    wait_for,
)


def _start(
    processes: Processes, env: dict[str, str], *args: str, prefix: Sequence[str] = ()
) -> tuple[Proc, str]:
    port = free_port()
    command = [*prefix, TELEUPLOADER, "demo", "--port", str(port), *args]
    demo = processes.start("demo", command, env=env)
    base = f"http://127.0.0.1:{port}"
    wait_for(
        lambda: "Press Ctrl-C" in demo.stdout(), within=START_TIMEOUT, what="the banner", proc=demo
    )
    wait_for(lambda: _ready(base), within=START_TIMEOUT, what="/ready", proc=demo)
    return demo, base


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _key(banner: str) -> str:
    match = re.search(r"API key:\s+(tu_\S+)", banner)
    assert match, banner
    return match.group(1)


def _stop(demo: Proc, sig: int = signal.SIGINT) -> None:
    demo.signal(sig)
    assert demo.wait(START_TIMEOUT) == 0, demo.output()


def test_a_demo_with_a_data_dir_restarts_and_still_serves_its_files(
    tmp_path: Path, processes: Processes
) -> None:
    data = tmp_path / "demo-data"
    env = base_env(tmp_path)
    body = os.urandom(9 * 1024 * 1024)  # three of the demo's 4 MiB chunks

    demo, base = _start(processes, env, "--data-dir", str(data))
    key = _key(demo.stdout())
    stored = httpx.put(
        f"{base}/api/files/photos.tar",
        content=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )
    assert stored.status_code == 201, stored.text
    _stop(demo)

    again, base = _start(processes, env, "--data-dir", str(data))
    assert _key(again.stdout()) == key  # the same key: scripts and sign-ins go on working
    copy = httpx.get(f"{base}/f/{stored.json()['public_id']}", timeout=60)
    assert copy.status_code == 200
    assert copy.content == body
    listing = httpx.get(f"{base}/api/files", headers={"Authorization": f"Bearer {key}"})
    assert [f["file_name"] for f in listing.json()["items"]] == ["photos.tar"]
    _stop(again)


@pytest.mark.parametrize(
    ("sig", "background"),
    [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGTERM, True)],
    ids=["ctrl-c", "sigterm", "sigterm-started-in-the-background"],
)
def test_a_plain_demo_leaves_nothing_behind(
    tmp_path: Path, processes: Processes, sig: int, background: bool
) -> None:
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = base_env(tmp_path, TMPDIR=str(temporary))

    # A shell starts a background job with SIGINT ignored; `trap "" INT`
    # then exec gives the demo the same start.
    prefix = ["/bin/sh", "-c", 'trap "" INT; exec "$@"', "sh"] if background else []
    demo, _base = _start(processes, env, prefix=prefix)
    assert list(temporary.iterdir())  # its database and spool live there meanwhile
    _stop(demo, sig)

    assert list(temporary.iterdir()) == []


def test_the_banner_says_where_everything_is_and_its_upload_reaches_the_bots(
    tmp_path: Path, processes: Processes
) -> None:
    work = tmp_path / "empty"  # no README.md or anything else to upload here
    work.mkdir()
    demo, base = _start(processes, base_env(tmp_path))
    banner = demo.stdout()
    assert f"{base}/docs" in banner
    assert f"Web page:  {base}/" in banner
    assert "S3_CREDENTIALS" in banner and "aws --endpoint-url" in banner

    command = next(line for line in banner.splitlines() if "Upload (multipart)" in line)
    result = subprocess.run(
        shlex.split(command.split(":", 1)[1]),
        cwd=work,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert '"size_bytes":' in result.stdout
    size = int(re.search(r'"size_bytes":(\d+)', result.stdout).group(1))  # type: ignore[union-attr]
    key = _key(banner)
    status = httpx.get(f"{base}/api/status", headers={"Authorization": f"Bearer {key}"}).json()
    assert size > 4 * 1024 * 1024  # more than a chunk: it went to the bots, not the database
    assert sum(bot["total_sends"] for bot in status["bots"]) >= 2
