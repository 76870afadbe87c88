"""S3 flexible checksums: the algorithms, and the checksums of a multipart
object made from its parts' checksums.

An algorithm's name is lowercase here (``crc32``, ``crc32c``, ``crc64nvme``,
``sha1``, ``sha256``); values are raw big-endian digests, base64 on the wire.
Two ways to checksum a multipart object, as S3 defines them:

- COMPOSITE (every algorithm): the checksum of the concatenated raw part
  checksums, written ``<base64>-<number of parts>``;
- FULL_OBJECT (CRC algorithms only): the CRC of the whole object's bytes,
  which the parts' CRCs and sizes give without reading the bytes again.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib
import zlib
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Final, Protocol

import google_crc32c

#: Checksum types of a multipart object: of the whole object's bytes, or of
#: its parts' checksums.
FULL_OBJECT: Final = "FULL_OBJECT"
COMPOSITE: Final = "COMPOSITE"


class Checksum(Protocol):
    """An incremental checksum (hashlib-like)."""

    def update(self, data: bytes, /) -> None: ...

    def digest(self) -> bytes: ...


class _Crc:
    """A CRC of `size` bytes computed by `extend(data, crc)`."""

    def __init__(self, extend: Callable[[bytes, int], int], size: int) -> None:
        self._extend = extend
        self._size = size
        self._crc = 0

    def update(self, data: bytes, /) -> None:
        self._crc = self._extend(data, self._crc)

    def digest(self) -> bytes:
        return self._crc.to_bytes(self._size, "big")


def _crc32(data: bytes, crc: int) -> int:
    return zlib.crc32(data, crc)


def _crc32c(data: bytes, crc: int) -> int:
    return int(google_crc32c.extend(crc, data))


@functools.cache
def _crt_checksums() -> ModuleType:
    """awscrt's checksums, loaded by the first use: the library is ~6 MiB of
    a process's memory, which a server that is never sent a CRC64NVME or a
    full-object multipart checksum need not hold (bench/README.md,
    idle_rss_bench.py). Loading it takes ~80-100 ms, once."""
    return importlib.import_module("awscrt.checksums")


def _crc64nvme(data: bytes, crc: int) -> int:
    return int(_crt_checksums().crc64nvme(data, crc))


#: Digest size in bytes of every flexible-checksum algorithm S3 defines.
CHECKSUM_SIZES: Final[Mapping[str, int]] = {
    "crc32": 4,
    "crc32c": 4,
    "crc64nvme": 8,
    "sha1": 20,
    "sha256": 32,
}
#: The algorithms verified here: all of them (``crc64nvme``, the default of
#: clients built on the AWS CRT, through awscrt's implementation).
SUPPORTED_CHECKSUMS: Final = frozenset(CHECKSUM_SIZES)

_CRC_EXTEND: Final[Mapping[str, Callable[[bytes, int], int]]] = {
    "crc32": _crc32,
    "crc32c": _crc32c,
    "crc64nvme": _crc64nvme,
}
#: crc(a + b) from crc(a), crc(b) and len(b): awscrt's function of this name.
_CRC_COMBINE: Final[Mapping[str, str]] = {
    "crc32": "combine_crc32",
    "crc32c": "combine_crc32c",
    "crc64nvme": "combine_crc64nvme",
}
#: The algorithms a FULL_OBJECT multipart checksum can use.
FULL_OBJECT_ALGORITHMS: Final = frozenset(_CRC_COMBINE)


def new_checksum(algorithm: str) -> Checksum | None:
    """A fresh checksum for ``algorithm`` (``crc32``...), ``None`` if unsupported."""
    algorithm = algorithm.lower()
    extend = _CRC_EXTEND.get(algorithm)
    if extend is not None:
        return _Crc(extend, CHECKSUM_SIZES[algorithm])
    if algorithm == "sha1":
        return hashlib.sha1(usedforsecurity=False)
    if algorithm == "sha256":
        return hashlib.sha256()
    return None


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def composite(algorithm: str, part_checksums: Sequence[str]) -> str:
    """``<base64>-<N>``: the checksum of the N parts' raw checksums, concatenated."""
    checksum = new_checksum(algorithm)
    if checksum is None:
        raise ValueError(f"unsupported checksum algorithm {algorithm!r}")
    for value in part_checksums:
        checksum.update(base64.b64decode(value))
    return f"{b64(checksum.digest())}-{len(part_checksums)}"


def full_object(algorithm: str, parts: Sequence[tuple[int, str]]) -> str:
    """The CRC of the whole object from its parts' (size, base64 CRC), in order."""
    name = _CRC_COMBINE.get(algorithm)
    if name is None:
        raise ValueError(f"{algorithm!r} has no full-object multipart checksum")
    combine: Callable[[int, int, int], int] = getattr(_crt_checksums(), name)
    crc = 0
    for size, value in parts:
        crc = int(combine(crc, int.from_bytes(base64.b64decode(value), "big"), size))
    return b64(crc.to_bytes(CHECKSUM_SIZES[algorithm], "big"))


def object_checksum(
    algorithm: str, checksum_type: str | None, parts: Sequence[tuple[int, str | None]]
) -> str | None:
    """A multipart object's checksum from its parts' (size, base64 checksum):
    FULL_OBJECT combines the CRCs, anything else is COMPOSITE. None when there
    are no parts or a part has no checksum."""
    if not parts or any(value is None for _, value in parts):
        return None
    known = [(size, value) for size, value in parts if value is not None]
    if checksum_type == FULL_OBJECT:
        return full_object(algorithm, known)
    return composite(algorithm, [value for _, value in known])
