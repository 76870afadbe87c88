"""Idle memory of `teleuploader serve`: its RSS once it is ready and idle, and
where that memory comes from, import by import.

Everything runs as separate processes, as in production: the Telegram Bot API
simulator (``teleuploader telegram-sim``, ``--bots`` tokens) and the service
(``teleuploader serve``, through ``common.served``: migrate, an API key, serve
until ``/ready`` answers 200) on a fresh SQLite database, with its defaults
apart from ``LOG_LEVEL=WARNING``.

1. **Idle RSS.** ``--idle`` seconds after ``/ready`` first answers 200, the
   service's ``VmRSS`` from ``/proc/<pid>/status`` (with ``RssAnon``, the
   process's own memory, and ``RssFile``, mapped libraries and files), and its
   thread count; then it is stopped. ``--repeat`` fresh starts, median and
   range. Two ways to run Python's code, each its own row:

   - *bytecode* (as deployed: deploy/README.md compiles the code and the
     virtualenv's packages): every module's bytecode is cached beforehand in a
     cache of the bench's own (``PYTHONPYCACHEPREFIX``; a discarded start
     fills it), so no start compiles anything;
   - *this environment*: as the calling shell runs it. With
     ``PYTHONDONTWRITEBYTECODE=1`` and a virtualenv without cached bytecode
     (a development install here), every start compiles the packages and
     ``app`` from source, and the compiler's leftovers stay in the process.

2. **Start-up imports** (bytecode row only). One more process runs ``serve``
   exactly as above up to the moment uvicorn would start serving (its loop
   and protocols loaded, ``uvicorn.Server.run`` replaced), and records every
   module it loads on the main thread: the growth of its RSS and the time
   while the module's own code ran, without the modules it imported
   (CPython's ``importlib._bootstrap._load_unlocked`` wrapped). Summed by
   top-level package (``app`` by subpackage), largest first. Page-grained and
   shared by whatever ran meanwhile, so a package's number is good to about
   0.5 MiB; the total is exact. It also says which notable modules were
   loaded, and what loading ``awscrt`` costs at its first use.

3. **The stack alone.** ``bench/stack_app.py``, an empty FastAPI app on the
   design card's stack (uvicorn with uvloop and httptools, pydantic-settings,
   structlog, an httpx client with its TLS roots, SQLite), measured as in 1
   from its own bytecode cache: once with aiosqlite alone, once with
   SQLAlchemy's asyncio extension (an engine, one statement). What no
   change to our code can take off.

``--baseline REF`` first measures the code at git ref REF (``git archive``
into the work dir, alone on ``PYTHONPATH``), then the checkout, with the same
simulator and virtualenv, in one run. ``--variant NAME=VALUE`` adds a row of
the checkout with that environment for the service (e.g.
``MALLOC_ARENA_MAX=2``; repeatable, one row each).

    .venv/bin/python bench/idle_rss_bench.py --baseline main    # ~3 min
    .venv/bin/python bench/idle_rss_bench.py --small            # ~40 s

Target (printed, never the exit status): idle RSS <= 80 MiB. Exit status 1
only if something broke (a process did not start or died).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from common import (
    CHAT_ID,
    REPO,
    Broken,
    MiB,
    bench_app_command,
    extract,
    free_port,
    proc_status,
    run_main,
    running,
    served,
    simulator_process,
    wait_until,
)

TARGET_MIB = 80.0
# Loaded by a server only if something pulls them in; the breakdown says which.
NOTABLE = (
    "alembic",
    "mako",
    "rich",
    "pygments",
    "awscrt",
    "websockets",
    "watchfiles",
    "click",
    "uvloop",
    "httptools",
    "app.http.s3.gateway",
    "app.http.api.tus",
    "hypothesis",
    "boto3",
)

# Run in the child that imports what serve imports. It wraps the loader step
# every fresh module goes through, stops serve where uvicorn would start
# serving, and prints one JSON line. Standard library only.
_STARTUP_PROBE = r"""
import json, os, sys, threading, time
import _frozen_importlib as bootstrap

PAGE = os.sysconf("SC_PAGE_SIZE")
NOTABLE = json.loads(sys.argv[1])
def rss():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE
start_rss = rss()
packages = {}
stack = []
load = bootstrap._load_unlocked

def package(name):
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "app" and len(parts) > 1 else parts[0]

def measured_load(spec):
    if threading.current_thread() is not threading.main_thread():
        return load(spec)
    stack.append([0, 0.0])
    before, began = rss(), time.perf_counter()
    try:
        return load(spec)
    finally:
        if spec.name == "uvicorn.server" and spec.name in sys.modules:
            # Patched once loaded, not imported here: serve decides what
            # uvicorn may import (app/cli/main.py, _NOT_FOR_SERVE).
            sys.modules[spec.name].Server.run = report
        grown, took = rss() - before, time.perf_counter() - began
        child_rss, child_time = stack.pop()
        entry = packages.setdefault(package(spec.name), [0, 0.0, 0])
        entry[0] += grown - child_rss
        entry[1] += took - child_time
        entry[2] += 1
        if stack:
            stack[-1][0] += grown
            stack[-1][1] += took

def report(server, sockets=None):
    server.config.get_loop_factory()
    server.config.load()
    bootstrap._load_unlocked = load
    loaded_rss = rss()
    # A None entry is a module kept out (an import of it fails).
    loaded = {name: sys.modules.get(name) is not None for name in NOTABLE}
    modules = sum(module is not None for module in sys.modules.values())
    began = time.perf_counter()
    import awscrt.checksums
    awscrt_ms = (time.perf_counter() - began) * 1000
    print(json.dumps({
        "interpreter_rss": start_rss,
        "rss": loaded_rss,
        "modules": modules,
        "packages": packages,
        "notable": loaded,
        "awscrt_first_use": {"ms": awscrt_ms, "rss": rss() - loaded_rss},
    }), flush=True)
    os._exit(0)

bootstrap._load_unlocked = measured_load
from app.cli.main import main
sys.exit(main(["serve"]))
"""


@dataclass(frozen=True)
class Config:
    bots: int
    idle: float
    repeat: int
    baseline: str | None
    variants: tuple[tuple[str, str], ...]
    workdir: Path | None


@dataclass
class Row:
    contender: str
    mode: str
    vm_rss: list[int] = field(default_factory=list)
    rss_anon: list[int] = field(default_factory=list)
    rss_file: list[int] = field(default_factory=list)
    threads: list[int] = field(default_factory=list)


@dataclass
class Contender:
    name: str
    code: Path | None
    rows: list[Row] = field(default_factory=list)
    startup: dict[str, Any] | None = None


def parse_args(argv: list[str] | None) -> tuple[Config, Path | None]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bots", type=int, default=3, help="bot tokens (3)")
    parser.add_argument("--idle", type=float, help="seconds idle after /ready (5)")
    parser.add_argument("--repeat", type=int, help="starts per row (3)")
    parser.add_argument("--baseline", metavar="REF", help="also measure the code at this git ref")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a row of the checkout with this environment too (repeatable)",
    )
    parser.add_argument("--small", action="store_true", help="CI: one start per row, 2 s idle")
    parser.add_argument("--workdir", type=Path, help="keep databases, caches and logs here")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the numbers here")
    args = parser.parse_args(argv)
    variants = []
    for item in args.variant:
        name, sep, value = item.partition("=")
        if not sep or not name:
            parser.error(f"--variant wants NAME=VALUE, not {item!r}")
        variants.append((name, value))
    config = Config(
        bots=args.bots,
        idle=args.idle if args.idle is not None else (2.0 if args.small else 5.0),
        repeat=args.repeat or (1 if args.small else 3),
        baseline=args.baseline,
        variants=tuple(variants),
        workdir=args.workdir,
    )
    if config.bots < 1 or config.repeat < 1 or config.idle < 0:
        parser.error("bots and repeat must be positive, idle not negative")
    return config, args.json


# --- the service ------------------------------------------------------------------------------


def _settings_names() -> set[str]:
    """Every setting deploy/env.example names: none may leak in from the shell."""
    names = {"BOT_TOKENS", "BOT_TOKEN", "ADDITIONAL_BOT_TOKENS", "STORAGE_CHANNEL_ID"}
    for line in (REPO / "deploy" / "env.example").read_text().splitlines():
        match = re.match(r"^#?([A-Z][A-Z0-9_]*)=", line)
        if match:
            names.add(match.group(1))
    return names


def service_env(tokens: list[str], telegram_url: str, database: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _settings_names()}
    env.update(
        {
            "BOT_TOKENS": ",".join(tokens),
            "STORAGE_CHAT_ID": str(CHAT_ID),
            "TELEGRAM_API_BASE": telegram_url,
            "DATABASE_URL": f"sqlite+aiosqlite:///{database}",
            "HOST": "127.0.0.1",
            "PORT": str(free_port()),
            "LOG_LEVEL": "WARNING",
        }
    )
    return env


def bytecode_env(env: dict[str, str], cache: Path) -> dict[str, str]:
    """Bytecode read from (and written to) the bench's own cache."""
    env = dict(env)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    return env


def idle_reading(
    env: dict[str, str], workdir: Path, code: Path | None, idle: float
) -> dict[str, int]:
    """One fresh start on a fresh database: its status after `idle` seconds."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "teleuploader.db").unlink(missing_ok=True)
    with served(env, workdir, code=code) as service:
        time.sleep(idle)  # the quantity measured: memory after this long idle
        if service.process.poll() is not None:
            raise Broken(f"the service exited with {service.process.returncode}")
        return proc_status(service.process.pid)


def startup_imports(env: dict[str, str], workdir: Path, code: Path | None) -> dict[str, Any]:
    """The start-up probe (see _STARTUP_PROBE) against the database in `workdir`."""
    env = dict(env)
    env.pop("PYTHONPATH", None)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    env["PORT"] = str(free_port())
    done = subprocess.run(
        [sys.executable, "-c", _STARTUP_PROBE, json.dumps(NOTABLE)],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise Broken(f"the start-up probe failed ({done.returncode}): {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def measure(
    contender: Contender,
    config: Config,
    tokens: list[str],
    telegram_url: str,
    workdir: Path,
    variants: tuple[tuple[str, str], ...] = (),
) -> None:
    print(f"\n== {contender.name}", flush=True)
    base = service_env(tokens, telegram_url, workdir / "teleuploader.db")
    cache = workdir / "pycache"
    deployed = bytecode_env(base, cache)
    # A variant gets a cache of its own: some variables change the bytecode
    # without changing its file name (PYTHONNODEBUGRANGES drops the column
    # tables), so a shared cache would measure the default's bytecode.
    variant_envs = [
        (
            f"bytecode, {name}={value}",
            {**bytecode_env(base, cache / f"{name}={value}"), name: value},
        )
        for name, value in variants
    ]
    modes: list[tuple[str, dict[str, str]]] = [
        ("bytecode", deployed),
        ("this environment", base),
        *variant_envs,
    ]
    # Fills the caches: the bytecode rows then compile nothing.
    for env in [deployed, *(env for _, env in variant_envs)]:
        idle_reading(env, workdir, contender.code, 0)
    for mode, env in modes:
        contender.rows.append(
            repeated_row(
                contender.name,
                mode,
                config.repeat,
                lambda env=env: idle_reading(env, workdir, contender.code, config.idle),
            )
        )
    contender.startup = startup_imports(deployed, workdir, contender.code)


def stack_reading(env: dict[str, str], workdir: Path, idle: float) -> dict[str, int]:
    """One fresh start of bench/stack_app.py: its status after `idle` seconds."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "stack.db").unlink(missing_ok=True)
    port = free_port()
    command = bench_app_command("stack_app:app", port, "--log-level", "warning")
    log_path = workdir / "stack.log"
    with running(command, log_path, env=env, cwd=workdir) as process:
        wait_until(process, f"http://127.0.0.1:{port}/ready", log_path, "the stack app")
        time.sleep(idle)  # the quantity measured: memory after this long idle
        return proc_status(process.pid)


def measure_stack(config: Config, workdir: Path) -> Contender:
    """The design card's stack alone, an empty app (bench/stack_app.py), as
    deployed (bytecode): without SQLAlchemy, and with its asyncio extension."""
    print("\n== the stack alone", flush=True)
    contender = Contender("the stack alone (an empty app)", None)
    env = bytecode_env(dict(os.environ), workdir / "pycache")
    env.pop("PYTHONPATH", None)
    for mode, with_sqlalchemy in [
        ("bytecode, aiosqlite alone", "0"),
        ("bytecode, SQLAlchemy's asyncio extension", "1"),
    ]:
        row_env = {**env, "STACK_WITH_SQLALCHEMY": with_sqlalchemy}
        stack_reading(row_env, workdir, 0)  # fills the cache
        contender.rows.append(
            repeated_row(
                contender.name,
                mode,
                config.repeat,
                lambda row_env=row_env: stack_reading(row_env, workdir, config.idle),
            )
        )
    return contender


def repeated_row(contender: str, mode: str, repeat: int, read: Callable[[], dict[str, int]]) -> Row:
    """One row of the idle table: `repeat` fresh starts, each measured by `read`."""
    row = Row(contender=contender, mode=mode)
    for number in range(repeat):
        reading = read()
        row.vm_rss.append(reading["VmRSS"])
        row.rss_anon.append(reading["RssAnon"])
        row.rss_file.append(reading["RssFile"])
        row.threads.append(reading["Threads"])
        print(f"{mode}, start {number + 1}: VmRSS {reading['VmRSS'] / MiB:.1f} MiB", flush=True)
    return row


# --- report -------------------------------------------------------------------------------------


def _mib(values: list[int]) -> str:
    median = statistics.median(values) / MiB
    if len(values) == 1:
        return f"{median:.1f}"
    return f"{median:.1f} ({min(values) / MiB:.1f}-{max(values) / MiB:.1f})"


def idle_table(contenders: list[Contender]) -> str:
    lines = [
        "| code | how Python's code is run | idle VmRSS MiB | RssAnon MiB | RssFile MiB"
        f" | threads | target <= {TARGET_MIB:.0f} MiB |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for contender in contenders:
        for row in contender.rows:
            met = statistics.median(row.vm_rss) / MiB <= TARGET_MIB
            lines.append(
                f"| {contender.name} | {row.mode} | {_mib(row.vm_rss)} | {_mib(row.rss_anon)}"
                f" | {_mib(row.rss_file)} | {statistics.median(row.threads):.0f}"
                f" | {'met' if met else 'NOT met'} |"
            )
    return "\n".join(lines)


def startup_table(contenders: list[Contender], top: int = 18) -> str:
    probed = [c for c in contenders if c.startup is not None]
    if not probed:
        return ""
    names = [c.name for c in probed]
    lines = [
        "Start-up imports (bytecode; RSS MiB / ms while each package's own code ran):",
        "",
        "| package | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    shown: list[str] = []
    for contender in probed:
        assert contender.startup is not None
        ranked = sorted(contender.startup["packages"].items(), key=lambda item: -item[1][0])
        shown += [name for name, _ in ranked[:top] if name not in shown]

    def cell(startup: dict[str, Any], name: str) -> str:
        entry = startup["packages"].get(name)
        return "-" if entry is None else f"{entry[0] / MiB:.1f} / {entry[1] * 1000:.0f}"

    for name in shown:
        lines.append(
            f"| {name} | " + " | ".join(cell(c.startup or {}, name) for c in probed) + " |"
        )
    for label, value in [
        ("the rest", lambda s: _rest(s, shown)),
        ("all imports", lambda s: f"{(s['rss'] - s['interpreter_rss']) / MiB:.1f}"),
        ("RSS when uvicorn would serve", lambda s: f"{s['rss'] / MiB:.1f}"),
        ("modules loaded", lambda s: str(s["modules"])),
        (
            "awscrt at its first use",
            lambda s: (
                f"{s['awscrt_first_use']['rss'] / MiB:.1f} / {s['awscrt_first_use']['ms']:.0f}"
            ),
        ),
    ]:
        lines.append(f"| *{label}* | " + " | ".join(value(c.startup or {}) for c in probed) + " |")
    lines += [
        "",
        "| loaded at start-up | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for module in NOTABLE:
        lines.append(
            f"| {module} | "
            + " | ".join("yes" if (c.startup or {})["notable"][module] else "no" for c in probed)
            + " |"
        )
    return "\n".join(lines)


def _rest(startup: dict[str, Any], shown: list[str]) -> str:
    rest = sum(entry[0] for name, entry in startup["packages"].items() if name not in shown)
    took = sum(entry[1] for name, entry in startup["packages"].items() if name not in shown)
    return f"{rest / MiB:.1f} / {took * 1000:.0f}"


def describe(config: Config) -> str:
    cpus = os.cpu_count()
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    site = Path(sys.executable).resolve().parents[1]
    # One package every server imports stands for the rest.
    cached = any((REPO / ".venv" / "lib").glob("python3*/site-packages/sqlalchemy/__pycache__"))
    return (
        f"idle RSS of teleuploader serve: {config.bots} bots, SQLite, {config.idle:g} s idle "
        f"after /ready, {config.repeat} start(s) per row; machine: {cpus} CPUs, "
        f"{memory:.0f} GiB, Python {sys.version.split()[0]} ({site}); this environment: "
        f"PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r}, "
        f"the virtualenv's packages {'have' if cached else 'have no'} cached bytecode"
    )


def main(argv: list[str] | None = None) -> int:
    config, json_path = parse_args(argv)
    print(describe(config), flush=True)
    contenders: list[Contender] = []
    broken: list[str] = []
    with contextlib.ExitStack() as stack:
        workdir = config.workdir or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="idle-rss-"))
        )
        workdir.mkdir(parents=True, exist_ok=True)
        try:
            sim = stack.enter_context(simulator_process(workdir, bots=config.bots, cwd=workdir))
            if config.baseline is not None:
                code = extract(config.baseline, workdir / "baseline-code")
                contenders.append(Contender(f"before ({config.baseline})", code))
            contenders.append(Contender("after (this checkout)", None))
            for contender in contenders:
                directory = workdir / ("before" if contender.code else "after")
                variants = config.variants if contender.code is None else ()
                measure(contender, config, sim.tokens, sim.url, directory, variants)
            contenders.append(measure_stack(config, workdir / "stack"))
        except Broken as exc:
            broken.append(str(exc))
        except KeyboardInterrupt:
            broken.append("interrupted")
    if contenders:
        print()
        print(describe(config))
        print()
        print(idle_table(contenders))
        print()
        print(startup_table(contenders))
    for problem in broken:
        print(f"BROKEN: {problem}", file=sys.stderr)
    if json_path is not None:
        document = {
            "config": asdict(config),
            "contenders": [asdict(contender) for contender in contenders],
        }
        json_path.write_text(json.dumps(document, indent=2, default=str) + "\n")
    return 1 if broken else 0


if __name__ == "__main__":
    run_main(main)
