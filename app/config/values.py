"""How the settings' list values are read from the environment: comma-separated
text, each entry checked, each problem one line naming what is wrong (see
`app.config.settings.load_settings`)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import SecretStr

_ACCESS_KEY_RE = re.compile(r"^[A-Za-z0-9_.-]{3,128}$")
MIN_S3_SECRET_LENGTH = 16


def split_csv(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, (list, tuple)):
        return [str(part).strip() for part in value if str(part).strip()]
    raise ValueError("expected a comma-separated list")


def s3_credentials(value: Any) -> dict[str, SecretStr]:
    """`ACCESS_KEY:SECRET,...` (or a mapping) as secrets by access key."""
    if isinstance(value, dict):
        return {
            str(k): v if isinstance(v, SecretStr) else SecretStr(str(v)) for k, v in value.items()
        }
    pairs: dict[str, SecretStr] = {}
    for entry in split_csv(value):
        access_key, sep, secret = entry.partition(":")
        _check_s3_pair(access_key.strip(), secret.strip() if sep else "")
        pairs[access_key.strip()] = SecretStr(secret.strip())
    return pairs


def chat_ids(value: Any) -> list[int]:
    """`ID,ID,...`: integers, none given twice."""
    chats: list[int] = []
    for text in split_csv(value):
        try:
            chat_id = int(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a chat id (an integer)") from None
        if chat_id in chats:
            raise ValueError(f"chat {chat_id} is given twice")
        chats.append(chat_id)
    return chats


def database_url(value: str | None) -> str | None:
    """A URL SQLAlchemy can use, checked here rather than at the first
    connection: one line naming the setting."""
    from sqlalchemy.exc import ArgumentError

    from app.config.database_url import normalize_url

    if value is None:
        return None
    try:
        normalize_url(value)
    except ArgumentError:
        raise ValueError(
            "not a database URL: give postgresql://USER:PASSWORD@HOST:PORT/DATABASE "
            "or sqlite:///PATH"
        ) from None
    return value


def _check_s3_pair(access_key: str, secret: str) -> None:
    """An S3 credential pair must be real: the predecessor verified signatures
    made with an empty secret."""
    if not _ACCESS_KEY_RE.match(access_key):
        raise ValueError(
            "an S3 access key id must be 3-128 characters of letters, digits, '_', '.', '-'"
        )
    if len(secret) < MIN_S3_SECRET_LENGTH:
        raise ValueError(
            f"the S3 secret of access key {access_key} is shorter than "
            f"{MIN_S3_SECRET_LENGTH} characters"
        )


def local_path_map(value: Any) -> tuple[str, str] | None:
    """`SERVER_DIR:LOCAL_DIR`: where this service sees a local Bot API
    server's working directory (its `--dir`), when not at the same path (a
    container's volume). Both absolute; no trailing slash kept."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, tuple | list) and len(value) == 2:
        server, local = (str(part) for part in value)
    else:
        server, sep, local = str(value).strip().partition(":")
        if not sep:
            raise ValueError("expected SERVER_DIR:LOCAL_DIR (the server's --dir, then ours)")
    server, local = server.strip(), local.strip()
    if not server.startswith("/") or not local.startswith("/"):
        raise ValueError("SERVER_DIR and LOCAL_DIR must both be absolute paths")
    return server.rstrip("/") or "/", local.rstrip("/") or "/"
