"""S3 flexible checksums on the wire: what a request asks for, what a
response carries (``x-amz-checksum-<algorithm>`` and ``x-amz-checksum-type``
headers, ``Checksum<ALGORITHM>`` XML elements)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Final

from app.http.s3.errors import S3Error
from app.http.s3.payload_checks import BodyResult
from app.kit.checksums import FULL_OBJECT_ALGORITHMS, SUPPORTED_CHECKSUMS, b64, new_checksum
from app.store.service import COMPOSITE, FULL_OBJECT, StoredChecksum

ALGORITHM_HEADER: Final = "x-amz-checksum-algorithm"
TYPE_HEADER: Final = "x-amz-checksum-type"
MODE_HEADER: Final = "x-amz-checksum-mode"


def requested(headers: Mapping[str, str]) -> tuple[str | None, str | None]:
    """CreateMultipartUpload's algorithm (lowercase) and type, checked.

    The type defaults as in AWS: FULL_OBJECT for CRC64NVME (its only type),
    COMPOSITE for the others. A type without an algorithm, an unknown
    algorithm or FULL_OBJECT with a SHA are InvalidRequest.
    """
    algorithm = headers.get(ALGORITHM_HEADER)
    kind = headers.get(TYPE_HEADER)
    if algorithm is None:
        if kind is not None:
            raise S3Error(
                "InvalidRequest", f"{TYPE_HEADER} requires {ALGORITHM_HEADER} to be given."
            )
        return None, None
    algorithm = algorithm.strip().lower()
    if algorithm not in SUPPORTED_CHECKSUMS:
        raise S3Error(
            "InvalidRequest",
            "Checksum algorithm must be one of CRC32, CRC32C, CRC64NVME, SHA1 or SHA256.",
        )
    if kind is None:
        kind = FULL_OBJECT if algorithm == "crc64nvme" else COMPOSITE
    kind = kind.strip().upper()
    if kind not in (COMPOSITE, FULL_OBJECT):
        raise S3Error("InvalidRequest", "Checksum type must be COMPOSITE or FULL_OBJECT.")
    if kind == FULL_OBJECT and algorithm not in FULL_OBJECT_ALGORITHMS:
        raise S3Error(
            "InvalidRequest",
            f"The FULL_OBJECT checksum type cannot be used with the {algorithm.upper()} algorithm.",
        )
    if kind == COMPOSITE and algorithm == "crc64nvme":
        raise S3Error(
            "InvalidRequest",
            "The COMPOSITE checksum type cannot be used with the CRC64NVME algorithm.",
        )
    return algorithm, kind


def of_body(result: BodyResult) -> StoredChecksum | None:
    """The checksum a PutObject body was verified against (header or trailer)."""
    for algorithm, value in result.checksums.items():
        return StoredChecksum(algorithm, value, FULL_OBJECT)
    return None


def response_headers(checksum: StoredChecksum | None) -> dict[str, str]:
    if checksum is None:
        return {}
    return {f"x-amz-checksum-{checksum.algorithm}": checksum.value, TYPE_HEADER: checksum.type}


def wanted(headers: Mapping[str, str]) -> bool:
    """GetObject/HeadObject asked for the checksum (``x-amz-checksum-mode: ENABLED``)."""
    return headers.get(MODE_HEADER, "").strip().upper() == "ENABLED"


def part_checksum(
    body: AsyncIterator[bytes], algorithm: str, result: BodyResult, *, sent: bool
) -> tuple[AsyncIterator[bytes], Callable[[], str | None]]:
    """A part's checksum in its upload's algorithm: the one the client `sent`
    (header or trailer) and the body was verified against, or else computed
    here as it streams. The getter is valid once the stream ended."""
    if sent:
        return body, lambda: result.checksums.get(algorithm)
    checksum = new_checksum(algorithm)
    assert checksum is not None  # `requested` admits supported algorithms only

    async def computing() -> AsyncIterator[bytes]:
        async for piece in body:
            checksum.update(piece)
            yield piece

    return computing(), lambda: b64(checksum.digest())
