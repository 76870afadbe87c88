"""What Telegram's Bot API server lets the settings ask for: chunk sizes
getFile can give back, and a local Bot API server only where it can be one
(docs/telegram.md has each rule's source)."""

from __future__ import annotations

from urllib.parse import urlsplit

MiB = 1024 * 1024

# getFile refuses files over 20 MB, and it is not certain whether Telegram means
# 20 * 10**6 or 20 * 2**20 bytes. 19 MiB is below both; a chunk that uploads but
# cannot be fetched back is data loss.
MAX_CHUNK_SIZE = 19 * MiB  # 19,922,944 bytes
# The getFile limits a sealed chunk (its frames' tags included) must stay
# within: Telegram's, taken as the smaller reading (10**6), and a local Bot
# API server's 2000 MB.
GETFILE_LIMIT = 20 * 10**6
LOCAL_GETFILE_LIMIT = 2000 * 10**6
# The cloud's getFile cap as the server's source has it (telegram-bot-api,
# Client.h: MAX_DOWNLOAD_FILE_SIZE = 20 << 20): a chunk stored through a local
# server above it can never be read from api.telegram.org.
CLOUD_GETFILE_CAP = 20 << 20
# The host of Telegram's own Bot API server, which runs without --local.
CLOUD_API_HOST = "api.telegram.org"


def is_cloud(api_base: str) -> bool:
    """Whether a TELEGRAM_API_BASE is Telegram's own server."""
    return urlsplit(api_base).hostname == CLOUD_API_HOST


def check_local_server(*, local: bool, api_base: str, path_map: object) -> None:
    """A local server is one's own: api.telegram.org runs without --local,
    answers getFile with paths to download, and caps them at 20 MiB."""
    if local and is_cloud(api_base):
        raise ValueError(
            f"TELEGRAM_LOCAL_SERVER=true needs TELEGRAM_API_BASE to be your own Bot API "
            f"server started with --local, not {CLOUD_API_HOST} (its getFile caps "
            "downloads at 20 MiB): set TELEGRAM_API_BASE, or TELEGRAM_LOCAL_SERVER=false"
        )
    if path_map is not None and not local:
        raise ValueError(
            "TELEGRAM_LOCAL_PATH_MAP is for a local Bot API server: set "
            "TELEGRAM_LOCAL_SERVER=true too, or remove it"
        )


def check_chunk_size(chunk_size: int, *, local: bool) -> None:
    """A chunk must come back through getFile, sealed too (its frames' tags
    included). Checked with or without master keys: an S3 client's own key
    (SSE-C) seals chunks on any service."""
    if chunk_size > MAX_CHUNK_SIZE and not local:
        raise ValueError(
            f"CHUNK_SIZE={chunk_size} is above {MAX_CHUNK_SIZE} bytes (19 MiB): "
            "Telegram's getFile refuses files over 20 MB, so such chunks could never be "
            "downloaded; lower it, or set TELEGRAM_LOCAL_SERVER=true for a local Bot API server"
        )
    from app.sealing.layout import largest_plaintext, sealed_size

    limit = LOCAL_GETFILE_LIMIT if local else GETFILE_LIMIT
    if sealed_size(chunk_size) > limit:
        raise ValueError(
            f"CHUNK_SIZE={chunk_size} sealed is {sealed_size(chunk_size)} bytes, "
            f"above getFile's {limit}: chunks are sealed (encryption at rest, S3 SSE-C), "
            f"so CHUNK_SIZE is at most {largest_plaintext(limit)}"
        )
