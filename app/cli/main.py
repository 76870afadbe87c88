"""The `teleuploader` command.

Every failure a user can cause ends in one line on stderr (`teleuploader:
error: ...`) and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, NoReturn, TypeVar

from app import __version__
from app.cli.database import CliError, database_problems
from app.config.settings import Settings, SettingsError, load_settings
from app.kit.bidi import escape_controls

if TYPE_CHECKING:
    from app.config.tuning import Tuning

EXIT_USAGE = 2
DEFAULT_SERVICE_URL = "http://127.0.0.1:4000"
T = TypeVar("T")


def run() -> NoReturn:
    """The `teleuploader` program: `main`, then out (see `leave`)."""
    leave(main())


def leave(status: int) -> NoReturn:
    """End the process with `status`, once a command has returned, without
    the interpreter's teardown: its final garbage collections walk every
    object of a thousand imported modules, 0.3 s of CPU after `migrate` and
    0.5 s after `serve`, which a restart waits for. Nothing is left for it to
    do: each command closes its own files, connections and threads before it
    returns, and the output is flushed here. (A command that raises, argparse's
    exits included, ends the usual way.)"""
    logging.shutdown()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        # As Python's own exit would: output that could not be written fails the run.
        status = status or 120
    os._exit(status)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        _hint_dashed_ids(sys.argv[1:] if argv is None else argv, exit_)
        raise

    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return EXIT_USAGE
    return run_command(lambda: handler(args))


# A public id of 24 URL-safe characters; ids made before new_public_id
# stopped drawing a leading "-" may start with one.
_DASHED_ID = re.compile(r"-[A-Za-z0-9_-]{23}")


def _hint_dashed_ids(argv: Sequence[str], exit_: SystemExit) -> None:
    """After argparse's own error: an id that starts with "-" was read as an
    option; say how to give it."""
    if exit_.code != EXIT_USAGE:
        return
    at = next((i for i, arg in enumerate(argv) if _DASHED_ID.fullmatch(arg)), None)
    if at is not None:
        example = " ".join([*argv[:at], "--", argv[at]])
        print(
            "teleuploader: a public id that starts with '-' goes after '--', as in: "
            f"teleuploader {escape_controls(example)}",
            file=sys.stderr,
        )


def run_command(command: Callable[[], int]) -> int:
    """Run a command: an error a user can fix is one line on stderr (exit 2)."""
    try:
        return command()
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        message = _one_line(exc)
        if message is None:
            raise
        # It may quote the service or a file name: nothing in it may act on the terminal.
        print(f"teleuploader: error: {escape_controls(message)}", file=sys.stderr)
        return EXIT_USAGE


def _one_line(exc: Exception) -> str | None:
    """The message of an error a user can fix, or None for a bug (traceback)."""
    from app.db.migrations import SchemaOutOfDate
    from app.kit.serving import CannotListen
    from app.runtime.startup import StartupError

    one_line: tuple[type[Exception], ...] = (
        CliError,
        SettingsError,
        StartupError,
        SchemaOutOfDate,
        CannotListen,
    )
    # Only the client commands raise ClientError, and they have loaded its
    # module; importing it here would bring rich into `serve` (_NOT_FOR_SERVE).
    client_cli = sys.modules.get("app.cli.client")
    if client_cli is not None:
        one_line = (*one_line, client_cli.ClientError)
    if isinstance(exc, one_line):
        return str(exc)
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc} ({getattr(exc, 'filename', '') or ''})".strip()
    return None


def build_parser() -> argparse.ArgumentParser:
    from app.cli.check import add_check_command
    from app.cli.keys import add_key_commands
    from app.cli.simulator import add_simulator_command
    from app.cli.trash import add_trash_commands

    parser = argparse.ArgumentParser(
        prog="teleuploader",
        description="Store files in a private Telegram channel through a pool of bots.",
    )
    parser.add_argument("--version", action="version", version=f"teleuploader {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    serve = commands.add_parser(
        "serve", help="run the HTTP service (settings come from the environment / .env)"
    )
    serve.set_defaults(handler=cmd_serve)

    migrate = commands.add_parser(
        "migrate",
        help="bring the database schema up to date (uses MIGRATION_DATABASE_URL if set)",
    )
    migrate.set_defaults(handler=cmd_migrate)

    demo = commands.add_parser(
        "demo",
        help="run the service against an in-process Telegram simulator (no tokens needed)",
    )
    demo.add_argument("--port", type=int, default=4000, help="port of the service (4000)")
    demo.add_argument("--bots", type=int, default=4, help="simulated bots (4)")
    demo.add_argument(
        "--data-dir",
        default=None,
        help="keep the demo's database, keys and simulated chat here across restarts "
        "(default: a temporary directory, removed when the demo stops)",
    )
    demo.set_defaults(handler=cmd_demo)

    scrub = commands.add_parser(
        "scrub",
        help="ask the running service for a full scrub pass (an admin key): every chunk "
        "copy checked, every short one repaired",
    )
    scrub.add_argument("--wait", action="store_true", help="follow the pass until it ends")
    scrub.add_argument("--json", action="store_true", help="print the report as one JSON object")
    scrub.add_argument(
        "--shallow",
        action="store_true",
        help="only ask Telegram whether it still holds each copy (no bytes read)",
    )
    _client_options(scrub)
    scrub.set_defaults(handler=cmd_scrub)

    up = commands.add_parser(
        "upload",
        help="upload files to a running TeleUploader; prints each file's link on stdout",
    )
    up.add_argument("files", nargs="+", metavar="FILE")
    up.add_argument(
        "-r",
        "--recursive",
        action="store_true",
        help="upload every file under a directory (each keeps its own name, not its path)",
    )
    up.add_argument(
        "--json", action="store_true", help="print each stored file as a JSON line instead"
    )
    _client_options(up)
    up.set_defaults(handler=cmd_upload)

    down = commands.add_parser("download", help="download a file by public id or URL")
    down.add_argument("public_id", metavar="PUBLIC_ID")
    down.add_argument("-o", "--output", help="where to save (default: the file's name)")
    down.add_argument("--force", action="store_true", help="overwrite an existing file")
    down.add_argument(
        "--json", action="store_true", help="print what was saved as a JSON line instead"
    )
    _client_options(down)
    down.set_defaults(handler=cmd_download)

    add_simulator_command(commands)
    add_check_command(commands)
    add_key_commands(commands, _usage)
    from app.cli.encryption import add_commands as add_encryption_commands

    add_encryption_commands(commands, _usage, _client_options)
    add_trash_commands(commands, _client_options)
    from app.cli.shares import add_share_commands

    add_share_commands(commands, _client_options)
    from app.cli.snapshot import add_snapshot_commands

    add_snapshot_commands(commands, _client_options)
    return parser


def _client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        default=os.environ.get("TELEUPLOADER_URL", DEFAULT_SERVICE_URL),
        help=f"the service (env TELEUPLOADER_URL; default {DEFAULT_SERVICE_URL})",
    )
    parser.add_argument(
        "--key",
        default=os.environ.get("TELEUPLOADER_KEY"),
        help="API key (env TELEUPLOADER_KEY)",
    )


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return EXIT_USAGE


# --- serve / migrate ----------------------------------------------------------------

#: Libraries the server never uses, which others import only because they are
#: installed: structlog (rich tracebacks for its console renderer), httpx
#: (its own command-line client, with rich and pygments), uvicorn
#: (watchfiles, for --reload) and FastAPI (pydantic.v1, to refuse models of
#: pydantic 1: there are none). rich is installed for the client commands,
#: pygments comes with it, watchfiles with uvicorn's extras. Kept out, they
#: are ~11 MiB less of an idle server's memory (bench/README.md,
#: idle_rss_bench.py); a traceback on a terminal is then structlog's plain one.
_NOT_FOR_SERVE = ("rich", "pygments", "watchfiles", "pydantic.v1")


def _keep_out_of_serve() -> None:
    """Make importing _NOT_FOR_SERVE fail as if they were not installed (a
    None in sys.modules), so that their importers take their fallbacks.
    One already imported (a test calling serve() in its own process) stays."""
    for name in _NOT_FOR_SERVE:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]


def cmd_serve(args: argparse.Namespace) -> int:
    return serve()


def serve(tuning: Tuning | None = None) -> int:
    """`teleuploader serve`; tests and benchmarks pass a Tuning of their own
    (tests/serve_tuned.py)."""
    _keep_out_of_serve()
    import structlog

    from app.config.settings import retired_settings
    from app.kit.logging import configure_logging
    from app.kit.serving import bind_listener, run_server
    from app.runtime.main import create_app, shutdown_delay

    settings = load_settings()
    asyncio.run(_precheck(settings))
    # Before the services start: they take bot leases and call Telegram.
    sock = bind_listener(settings.host, settings.port)
    configure_logging(settings.log_level, settings.log_format)
    for name in retired_settings():
        structlog.get_logger("app.cli").warning(
            "setting_retired", setting=name, detail="no longer read: remove it from the env file"
        )
    app = create_app(settings, tuning)
    run_server(
        app,
        host=settings.host,
        port=settings.port,
        grace_seconds=settings.shutdown_grace_seconds,
        delay_seconds=lambda: shutdown_delay(app),
        sock=sock,
    )
    return 0


async def _precheck(settings: Settings) -> None:
    """What can be checked before the server starts, so it fails in one line."""
    from app.db.engine import create_engine, create_sessionmaker
    from app.db.migrations import check_schema
    from app.runtime.startup import StartupError, refuse_unreadable_chunks

    if not settings.bot_tokens:
        raise StartupError("BOT_TOKENS is not set: give at least one bot token")
    if not settings.chat_ids:
        raise StartupError(
            "STORAGE_CHAT_ID (or STORAGE_CHAT_IDS) is not set: give the id of the storage channel"
        )
    with database_problems("DATABASE_URL", settings.database_url):
        engine = create_engine(settings.database_url)
        try:
            await check_schema(engine)
            await refuse_unreadable_chunks(settings, create_sessionmaker(engine))
        finally:
            await engine.dispose()


def cmd_migrate(args: argparse.Namespace) -> int:
    from app.db.migrations import upgrade

    settings = load_settings()
    setting = "MIGRATION_DATABASE_URL" if settings.migration_database_url else "DATABASE_URL"
    url = settings.migration_database_url or settings.database_url
    with database_problems(setting, url):
        upgrade(url)
    print("database schema is up to date")
    return 0


# --- client commands and checks ------------------------------------------------------


def cmd_upload(args: argparse.Namespace) -> int:
    """Links (or JSON lines) on stdout, one per file as it is stored, so that
    `URL=$(teleuploader upload f)` works; progress and errors on stderr."""
    import json

    from rich.console import Console

    from app.cli.client import files_to_upload, upload

    paths = files_to_upload(args.files, recursive=args.recursive)
    for stored in upload(paths, url=args.url, key=args.key, console=Console(stderr=True)):
        if args.json:
            print(json.dumps({"path": str(stored.path), **stored.file}), flush=True)
        else:
            print(stored.link, flush=True)
    return 0


def cmd_download(args: argparse.Namespace) -> int:
    import json

    from rich.console import Console

    from app.cli.client import download

    saved = download(
        args.public_id,
        url=args.url,
        key=args.key,
        output=args.output,
        force=args.force,
        console=Console(stderr=True),
    )
    if args.json:
        print(
            json.dumps(
                {
                    "path": str(saved.path),
                    "public_id": saved.public_id,
                    "size_bytes": saved.size,
                    "sha256": saved.sha256,
                    "verified": saved.verified,
                }
            )
        )
    else:
        print(escape_controls(str(saved.path)))  # a name the service chose
    return 0


def cmd_scrub(args: argparse.Namespace) -> int:
    """Exit 0 only when no object is lost (1 when one is) and, with --wait,
    the pass checked every copy (3: copies of bots other instances hold
    were left to them)."""
    import json

    from rich.console import Console

    from app.cli.durability import run_scrub

    report = run_scrub(
        url=args.url,
        key=args.key,
        deep=not args.shallow,
        wait=args.wait,
        console=Console(stderr=True),
    )
    if args.json:
        print(json.dumps(report))
    else:
        for name, value in report.items():
            print(f"{name}: {value}")
    if report["lost_objects"]:
        return 1
    if args.wait and report["skipped"]:
        print(
            f"scrub: {report['skipped']} copies were not checked: other instances hold "
            "their bots (one call per token across the fleet); run the pass on each "
            "instance (--url of each) to check them all",
            file=sys.stderr,
        )
        return 3
    return 0


# --- simulator / demo -------------------------------------------------------------------


def cmd_demo(args: argparse.Namespace) -> int:
    from app.cli.demo import demo_directory, run_demo

    # Ctrl-C and SIGTERM both stop the demo, and its temporary directory is
    # removed on the way out.
    with demo_directory(args.data_dir) as directory:
        with suppress(KeyboardInterrupt):  # Ctrl-C: the normal way to stop
            asyncio.run(
                run_demo(
                    port=args.port,
                    bots=args.bots,
                    directory=directory,
                    kept=args.data_dir is not None,
                )
            )
        print("demo stopped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run()
