"""Timers and sizes an operator has no reason to change, which tests and
benchmarks shorten: constructor parameters (`create_app(settings, tuning)`),
never environment variables. The README's configuration table lists only
what an operator would set.
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1024 * 1024
# See Tuning.instance_stale_seconds and Tuning.unnamed_spool_file_age_seconds.
INSTANCE_STALE_SECONDS = 30.0
UNNAMED_SPOOL_FILE_AGE_SECONDS = 3600.0
# See Tuning.abandoned_call_hold_seconds.
ABANDONED_CALL_HOLD_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class Tuning:
    # How long an instance holds a bot's lease without renewing it: with
    # several instances, a dead one's bots move within this time.
    bot_lease_seconds: float = 15.0
    # How often an instance says it is alive; every 12th beat it also takes
    # over what dead instances left (app/store/instance.py).
    heartbeat_seconds: float = 5.0
    # An instance that has not beaten for this long is taken for dead, and
    # another one takes over its work (app/store/instance.py).
    instance_stale_seconds: float = INSTANCE_STALE_SECONDS
    # How old a spool file no row names must be before the instance that
    # took over a dead one's work deletes it (app/store/spool.py: the other
    # may only be stalled, its row still to come).
    unnamed_spool_file_age_seconds: float = UNNAMED_SPOOL_FILE_AGE_SECONDS
    # How long a token stays out of use after a call on it was abandoned (cut
    # by a timeout, a lease's end or a stop): Telegram may still be storing
    # the upload (it gets the server allowance of the budget, 30 s) and
    # answers a second call meanwhile with a 30-60 s wait. The hold goes with
    # the lease to the next holder. Tests whose simulator ends such calls at
    # once shorten it.
    abandoned_call_hold_seconds: float = ABANDONED_CALL_HOLD_SECONDS
    # How often expired tus uploads are looked for and deleted.
    tus_cleanup_interval_seconds: float = 60.0
    # How long an unknown or revoked API key is refused from memory, without
    # a database query (0: ask every time).
    refused_key_cache_seconds: float = 5.0
    # The smallest multipart part but the last (EntityTooSmall): S3's rule.
    s3_min_part_size: int = 5 * MiB
    # The first pause before a read asks Telegram again (getFile's
    # failed-download answer, a dropped download); doubled each time.
    read_retry_seconds: float = 0.5
    # When a copy Telegram keeps failing to serve counts as missing
    # (app/store/copy_failures.py): this many failures, each at least the
    # spacing after the last, the first and the last the span apart.
    copy_missing_failures: int = 3
    copy_missing_span_seconds: float = 3600.0
    copy_failure_spacing_seconds: float = 600.0

    def __post_init__(self) -> None:
        if not 3.0 <= self.bot_lease_seconds <= 300.0:
            raise ValueError("bot_lease_seconds is 3-300")
        if not 0.1 <= self.heartbeat_seconds <= 60.0:
            raise ValueError("heartbeat_seconds is 0.1-60")
        if not 2 * self.heartbeat_seconds <= self.instance_stale_seconds <= 600.0:
            raise ValueError("instance_stale_seconds is twice heartbeat_seconds to 600")
        if self.unnamed_spool_file_age_seconds < 0:
            raise ValueError("unnamed_spool_file_age_seconds must not be negative")
        if not 0.0 <= self.abandoned_call_hold_seconds <= 600.0:
            raise ValueError("abandoned_call_hold_seconds is 0-600")
        if self.tus_cleanup_interval_seconds <= 0:
            raise ValueError("tus_cleanup_interval_seconds must be positive")
        if not 0.0 <= self.refused_key_cache_seconds <= 60.0:
            raise ValueError("refused_key_cache_seconds is 0-60")
        if self.s3_min_part_size < 0:
            raise ValueError("s3_min_part_size must not be negative")
        if not 0.0 < self.read_retry_seconds <= 10.0:
            raise ValueError("read_retry_seconds is above 0, at most 10")
        if self.copy_missing_failures < 1:
            raise ValueError("copy_missing_failures is at least 1")
        if self.copy_missing_span_seconds < 0 or self.copy_failure_spacing_seconds < 0:
            raise ValueError("copy_missing_span_seconds and copy_failure_spacing_seconds are >= 0")
