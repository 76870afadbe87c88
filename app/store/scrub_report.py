"""What a scrub pass found and did (app/store/scrub.py): a round's or a
full pass's counts, and a full pass run on request with its times, as
`GET /api/admin/scrub` and `teleuploader scrub` show them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime


@dataclass
class PassReport:
    """What one pass (a round, or a full pass asked for) found and did."""

    checked: int = 0
    missing: int = 0
    corrupt: int = 0
    # Copies Telegram could not serve this time (counted, asked again).
    unavailable: int = 0
    repaired: int = 0
    # Whole copies read and checked (deep), and their bytes.
    read: int = 0
    read_bytes: int = 0
    degraded_objects: int = 0
    lost_objects: int = 0
    # Copies a full pass left unchecked: their bots are held by other
    # instances (one call per token across the fleet), which check them in
    # their own rounds or passes. Not 0: the pass did not check everything.
    skipped: int = 0

    def add(self, other: PassReport) -> None:
        for name in (
            "checked",
            "missing",
            "corrupt",
            "unavailable",
            "repaired",
            "read",
            "read_bytes",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class FullPass:
    """A full pass run on request (`teleuploader scrub`)."""

    deep: bool
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    finished_at: datetime | None = None
    report: PassReport = field(default_factory=PassReport)
    error: str | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "running": self.finished_at is None,
            "deep": self.deep,
            "started_at": self.started_at.isoformat(),
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "error": self.error,
            **asdict(self.report),
        }
