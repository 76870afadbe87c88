"""All SQL of TeleUploader lives behind these repositories, one per table group.

Each takes an AsyncSession and works inside the caller's transaction; the
caller commits (see app.db.session.session_scope).
"""

from app.db.api_keys import ApiKeyNameTaken, ApiKeyRepository
from app.db.chunks import ChunkRepository, ChunksMissing
from app.db.gc import GcRepository
from app.db.objects import ObjectRepository, ObjectSpec, PieceSpec, prefix_upper_bound

__all__ = [
    "ApiKeyNameTaken",
    "ApiKeyRepository",
    "ChunkRepository",
    "ChunksMissing",
    "GcRepository",
    "ObjectRepository",
    "ObjectSpec",
    "PieceSpec",
    "prefix_upper_bound",
]
