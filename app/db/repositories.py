"""All SQL of TeleUploader lives behind these repositories, one per table group.

Each takes an AsyncSession and works inside the caller's transaction; the
caller commits (see app.db.session.session_scope).
"""

from app.db.api_keys import ApiKeyNameTaken, ApiKeyRepository
from app.db.buckets import BucketNotEmpty, BucketRepository
from app.db.chunks import ChunkRepository, ChunksMissing
from app.db.gc import GcRepository
from app.db.key_ranges import prefix_upper_bound
from app.db.multipart import MultipartRepository
from app.db.multipart_errors import InvalidPart, InvalidPartOrder, UploadMissing
from app.db.multipart_etag import multipart_etag
from app.db.object_rows import ObjectSpec, PieceSpec
from app.db.objects import NotOwner, ObjectRepository

__all__ = [
    "ApiKeyNameTaken",
    "ApiKeyRepository",
    "BucketNotEmpty",
    "BucketRepository",
    "ChunkRepository",
    "ChunksMissing",
    "GcRepository",
    "InvalidPart",
    "InvalidPartOrder",
    "MultipartRepository",
    "NotOwner",
    "ObjectRepository",
    "ObjectSpec",
    "PieceSpec",
    "UploadMissing",
    "multipart_etag",
    "prefix_upper_bound",
]
