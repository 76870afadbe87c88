"""Setting names no longer read: the renamed ones stop the start with a line
naming their replacement, the retired timers (app/config/tuning.py) are ignored
with a warning."""

from __future__ import annotations

import os
from pathlib import Path

#: Names read once and no longer: old name -> the setting that replaced it.
#: One set without its replacement stops the start (its value would be lost
#: in silence); beside its replacement it is left alone.
RENAMED_SETTINGS: dict[str, str] = {
    "BOT_TOKEN": "BOT_TOKENS",
    "ADDITIONAL_BOT_TOKENS": "BOT_TOKENS",
    "STORAGE_CHANNEL_ID": "STORAGE_CHAT_ID",
    "TELEGRAM_CHUNK_SIZE_BYTES": "CHUNK_SIZE",
    "BASE_URL": "PUBLIC_BASE_URL",
    "S3_ACCESS_KEY_ID": "S3_CREDENTIALS",
    "S3_SECRET_ACCESS_KEY": "S3_CREDENTIALS",
}
#: Timers that only tests had a use for: now fixed (app/config/tuning.py). Set,
#: they are ignored with a warning at start.
RETIRED_SETTINGS: tuple[str, ...] = (
    "BOT_LEASE_SECONDS",
    "TUS_CLEANUP_INTERVAL_SECONDS",
    "REFUSED_KEY_CACHE_SECONDS",
    "S3_MIN_PART_SIZE",
)


def renamed_problem(names: set[str]) -> str | None:
    """The line for an old name set without its new one, if any."""
    for old, new in RENAMED_SETTINGS.items():
        if old in names and new not in names:
            example = "ACCESS_KEY:SECRET" if new == "S3_CREDENTIALS" else "its value"
            return (
                f"{old} is no longer read: set {new} instead ({example}; see the README's "
                "configuration table)"
            )
    return None


def names_given(env_file: str | None = ".env") -> set[str]:
    """The variable names of the environment and of the .env file."""
    names = {name.upper() for name in os.environ}
    if env_file is not None and Path(env_file).is_file():
        from dotenv import dotenv_values

        names |= {name.upper() for name in dotenv_values(env_file)}
    return names


def retired_settings() -> list[str]:
    """The retired names this process was given (the service warns of them)."""
    names = names_given()
    return [name for name in RETIRED_SETTINGS if name in names]
