"""Real WebDAV clients, as Debian ships them, against a running service:
litmus (the WebDAV conformance suite), rclone's webdav backend and cadaver.

davfs2 is not run: on this kernel its FUSE readdir answers EINVAL against
any server (rclone's own `serve webdav` included), although it mounts and
reads, writes and renames files. cadaver opens, writes, renames and reads
back instead. scripts/test installs the packages.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.http.dav.conftest import DavService
from tests.running_service import payload

pytestmark = pytest.mark.asyncio(loop_scope="module")

DEBIAN_BIN = Path("/usr/bin")
#: Each command's own limit: a hung client fails the test instead of the run.
COMMAND_TIMEOUT = 180
#: rclone's tree: small files (in the database) and a few in Telegram.
SMALL_FILES = 240
LARGE_FILES = 4


def _tool(name: str) -> str:
    path = DEBIAN_BIN / name
    assert path.exists(), f"{path} is missing: scripts/test installs Debian's {name}"
    return str(path)


class Ran(NamedTuple):
    out: str
    err: str

    @property
    def text(self) -> str:
        """Both: rclone writes its log (and check's verdict) to standard error."""
        return self.out + self.err


async def _run(*argv: str, env: dict[str, str], cwd: Path, check: bool = True) -> Ran:
    """Run a client to its end (failing the test if it fails, with `check`)."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), COMMAND_TIMEOUT)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(f"{argv[0]} did not finish in {COMMAND_TIMEOUT} s") from None
    ran = Ran(out.decode(errors="replace"), err.decode(errors="replace"))
    if check:
        assert process.returncode == 0, f"{argv[0]} exited {process.returncode}:\n{ran.text}"
    return ran


def _env(home: Path, **extra: str) -> dict[str, str]:
    """What a fresh login has: no proxies, a HOME without any configuration."""
    home.mkdir(exist_ok=True)
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", **extra}


async def test_litmus_passes_all_five_suites(dav_service: DavService, tmp_path: Path) -> None:
    ran = await _run(
        _tool("litmus"),
        f"{dav_service.url}/dav/",
        "litmus",
        dav_service.service.key,
        env=_env(tmp_path / "home", TESTS="basic copymove props locks http"),
        cwd=tmp_path,
        check=False,
    )
    out = ran.text
    summaries = re.findall(
        r"summary for `(\w+)': of (\d+) tests run: (\d+) passed, (\d+) failed", out
    )
    assert [suite for suite, *_ in summaries] == ["basic", "copymove", "props", "locks", "http"], (
        out
    )
    assert all(failed == "0" for *_, failed in summaries), out
    warnings = re.findall(r"WARNING: (.*)", out)
    # The one warning allowed: a URI fragment, which no ASGI server passes on.
    assert warnings == [
        "DELETE removed collection resource with Request-URI including fragment; unsafe"
    ], out


def _tree(root: Path) -> dict[str, bytes]:
    files = {}
    for n in range(SMALL_FILES):
        files[f"d{n % 6}/e{n % 4}/small-{n}.txt"] = payload(n * 3 % 900, seed=n)
    for n in range(LARGE_FILES):
        files[f"large/big {n}.bin"] = payload(150_000 + n, seed=1000 + n)
    for name, body in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
        # Whole seconds, as rclone keeps them over WebDAV.
        os.utime(path, (1_600_000_000 + len(name), 1_600_000_000 + len(name) * 7))
    return files


async def test_rclone_syncs_checks_and_keeps_modtimes(
    dav_service: DavService, tmp_path: Path
) -> None:
    source = tmp_path / "src"
    files = _tree(source)
    rclone = _tool("rclone")
    env = _env(tmp_path / "home")
    obscured = (await _run(rclone, "obscure", dav_service.write_key, env=env, cwd=tmp_path)).out
    env.update(
        RCLONE_CONFIG_DAV_TYPE="webdav",
        RCLONE_CONFIG_DAV_URL=f"{dav_service.url}/dav/",
        RCLONE_CONFIG_DAV_VENDOR="owncloud",
        RCLONE_CONFIG_DAV_USER="rclone",
        RCLONE_CONFIG_DAV_PASS=obscured.strip(),
    )
    common = ["--transfers", "8", "--checkers", "8", "--retries", "1"]

    await _run(rclone, "sync", str(source), "dav:synced", *common, env=env, cwd=tmp_path)
    checked = (
        await _run(rclone, "check", str(source), "dav:synced", *common, env=env, cwd=tmp_path)
    ).text
    assert f"{len(files)} matching files" in checked and "0 differences found" in checked

    again = (
        await _run(rclone, "sync", str(source), "dav:synced", "-v", *common, env=env, cwd=tmp_path)
    ).text
    assert "There was nothing to transfer" in again, again

    listed = await _run(rclone, "lsjson", "-R", "--files-only", "dav:synced", env=env, cwd=tmp_path)
    remote = {
        entry["Path"]: datetime.fromisoformat(entry["ModTime"]) for entry in json.loads(listed.out)
    }
    local = {name: (source / name).stat().st_mtime for name in files}
    assert {name: moment.timestamp() for name, moment in remote.items()} == local


async def test_cadaver_opens_writes_renames_and_reads_back(
    dav_service: DavService, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    env = _env(home)
    host = dav_service.url.removeprefix("http://").split(":")[0]
    netrc = home / ".netrc"
    netrc.write_text(f"machine {host}\nlogin cadaver\npassword {dav_service.write_key}\n")
    netrc.chmod(0o600)
    (tmp_path / "note.txt").write_text("written through cadaver\n")
    script = "\n".join(
        [
            "mkcol cad",
            "cd cad",
            "put note.txt",
            "move note.txt renamed.txt",
            "get renamed.txt back.txt",
            "lock renamed.txt",
            "unlock renamed.txt",
            "quit",
        ]
    )
    process = await asyncio.create_subprocess_exec(
        _tool("cadaver"),
        f"{dav_service.url}/dav/",
        env=env,
        cwd=tmp_path,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(script.encode()), COMMAND_TIMEOUT)
    text = out.decode(errors="replace")
    assert text.count("succeeded") >= 6 and "failed" not in text, text
    assert (tmp_path / "back.txt").read_text() == "written through cadaver\n"
    async with dav_service.client() as http:
        assert (await http.get("/dav/cad/note.txt")).status_code == 404
        assert (await http.get("/dav/cad/renamed.txt")).text == "written through cadaver\n"
