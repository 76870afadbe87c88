"""What multipart uploads refuse (app.db.multipart), one exception each.

In a module of their own so that the store and the spool can name them
without the repository, and so that the repository reads as its queries.
"""

from __future__ import annotations

from collections.abc import Iterable


class UploadMissing(Exception):
    """No such multipart upload (completed, aborted, never created, or another bucket/key's)."""

    def __init__(self, upload_id: str) -> None:
        self.upload_id = upload_id
        super().__init__(f"no multipart upload {upload_id!r}")


class InvalidPart(Exception):
    """A part listed for completion was never uploaded, or its ETag differs."""

    def __init__(self, part_number: int, reason: str) -> None:
        self.part_number = part_number
        super().__init__(f"part {part_number}: {reason}")


class PartsNotStored(Exception):
    """Parts listed for completion are still in the staging spool: their bytes
    are not in Telegram yet. Wait for the flusher and try again."""

    def __init__(self, part_numbers: Iterable[int]) -> None:
        self.part_numbers = sorted(part_numbers)
        super().__init__(f"parts still in the spool: {self.part_numbers}")


class PartTooSmall(Exception):
    """A part listed for completion, other than the last, is under the minimum size."""

    def __init__(self, part_number: int, size: int, minimum: int) -> None:
        self.part_number = part_number
        self.size = size
        self.minimum = minimum
        super().__init__(f"part {part_number} is {size} bytes, under {minimum}")


class InvalidPartOrder(Exception):
    """The part numbers listed for completion are not strictly ascending."""

    def __init__(self, part_number: int, after: int) -> None:
        self.part_number = part_number
        super().__init__(f"part {part_number} listed after part {after}")
