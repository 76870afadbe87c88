"""Timers and sizes an operator has no reason to change, which tests and
benchmarks shorten: constructor parameters (`create_app(settings, tuning)`),
never environment variables. The README's configuration table lists only
what an operator would set.
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Tuning:
    # How long an instance holds a bot's lease without renewing it: with
    # several instances, a dead one's bots move within this time.
    bot_lease_seconds: float = 15.0
    # How often an instance says it is alive; every 12th beat it also takes
    # over what dead instances left (app/store/instance.py).
    heartbeat_seconds: float = 5.0
    # How often expired tus uploads are looked for and deleted.
    tus_cleanup_interval_seconds: float = 60.0
    # How long an unknown or revoked API key is refused from memory, without
    # a database query (0: ask every time).
    refused_key_cache_seconds: float = 5.0
    # The smallest multipart part but the last (EntityTooSmall): S3's rule.
    s3_min_part_size: int = 5 * MiB

    def __post_init__(self) -> None:
        if not 3.0 <= self.bot_lease_seconds <= 300.0:
            raise ValueError("bot_lease_seconds is 3-300")
        if not 0.1 <= self.heartbeat_seconds <= 60.0:
            raise ValueError("heartbeat_seconds is 0.1-60")
        if self.tus_cleanup_interval_seconds <= 0:
            raise ValueError("tus_cleanup_interval_seconds must be positive")
        if not 0.0 <= self.refused_key_cache_seconds <= 60.0:
            raise ValueError("refused_key_cache_seconds is 0-60")
        if self.s3_min_part_size < 0:
            raise ValueError("s3_min_part_size must not be negative")
