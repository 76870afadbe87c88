"""Why a database cannot be used, in one line, for the commands and start-up.

The line names what the operator can fix: the host and port that refused,
the SQLite file's missing directory, or what Postgres said (a role or
database that does not exist, a password it refused). The URL is shown
with its password masked.
"""

from __future__ import annotations

import os
import socket
import sqlite3
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError

# A password with one of these must be percent-encoded in a URL.
_ENCODING_HINT = (
    "; a password with @ : / % # ? or a space must be percent-encoded in the URL "
    "(@ as %40, : as %3A, / as %2F, % as %25)"
)


def shown_url(url: str) -> str:
    """`url` with its password masked, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<not a URL>"


def problem_before_connecting(url: str) -> str | None:
    """What can be told without connecting: an SQLite file whose directory
    is missing or not writable (WAL mode writes beside the file, even to
    read). Found before a connection is tried, because aiosqlite's thread
    for a connection that failed to open outlives the event loop and prints
    a traceback of its own."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    directory = Path(parsed.database).resolve().parent
    if not directory.is_dir() or not os.access(directory, os.W_OK):
        return _sqlite_problem(parsed.database, "unable to open database file")
    return None


def explain(exc: BaseException, url: str) -> str | None:
    """What went wrong reaching the database at `url`, or None when `exc` is
    not about reaching it (a bug, shown with its traceback)."""
    parsed = make_url(url)
    where = f"{parsed.host or 'localhost'}:{parsed.port or 5432}"
    inner = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    if isinstance(inner, sqlite3.OperationalError) and parsed.get_backend_name() == "sqlite":
        return _sqlite_problem(parsed.database or "", str(inner))
    if isinstance(inner, ConnectionRefusedError):
        return (
            f"cannot connect to {where}: connection refused "
            "(is Postgres running and listening there?)"
        )
    if isinstance(inner, socket.gaierror):
        return f"cannot find the host {parsed.host!r} ({inner.strerror})"
    if isinstance(inner, TimeoutError):
        return f"{where} did not answer in time (a firewall, or the wrong host?)"
    if isinstance(inner, OSError):
        return f"cannot connect to {where}: {inner.strerror or inner}"
    if isinstance(exc, DBAPIError):
        message = (str(inner).strip().splitlines() or ["the database refused"])[0]
        if "password authentication failed" in message:
            message += _ENCODING_HINT
        return message
    return None


def _sqlite_problem(database: str, error: str) -> str:
    path = Path(database)
    directory = path.resolve().parent
    if "unable to open database file" in error:
        if not directory.is_dir():
            return (
                f"cannot open the SQLite database {path}: its directory {directory} does not exist"
            )
        if not os.access(directory, os.W_OK):
            return (
                f"cannot open the SQLite database {path}: its directory {directory} "
                "is not writable by this user"
            )
    return f"cannot use the SQLite database {path}: {error}"
