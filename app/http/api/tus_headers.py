"""Parsing tus request headers: every malformed value is a 400 that names it."""

from __future__ import annotations

import base64
import binascii

from app.http.api.errors import ApiError
from app.http.shared.parsing import MAX_DECIMAL_DIGITS, parse_decimal
from app.store.resumable_protocol import Checksum

TUS_VERSION = "1.0.0"
CHECKSUM_ALGORITHMS = ("sha1", "sha256", "md5")
# Partial uploads one final upload may name (tus-js-client makes one per
# `parallelUploads`).
MAX_PARTIALS = 100
MAX_METADATA_LENGTH = 4096
MAX_ID_LENGTH = 64


def tus_error(
    status: int, error: str, detail: str, extra: dict[str, str] | None = None
) -> ApiError:
    return ApiError(status, error, detail, {"Tus-Resumable": TUS_VERSION, **(extra or {})})


def parse_metadata(header: str | None) -> tuple[str, dict[str, str]]:
    """The raw header (kept to echo on HEAD) and its decoded pairs."""
    raw = (header or "").strip()
    if len(raw) > MAX_METADATA_LENGTH:
        raise tus_error(
            400, "bad_request", f"Upload-Metadata is longer than {MAX_METADATA_LENGTH} characters"
        )
    pairs: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        key, _, value = item.partition(" ")
        if not key or " " in value.strip() or key in pairs:
            raise tus_error(400, "bad_request", f"Upload-Metadata has a malformed pair {item!r}")
        try:
            pairs[key] = base64.b64decode(value.strip(), validate=True).decode("utf-8", "replace")
        except (binascii.Error, ValueError):
            raise tus_error(
                400, "bad_request", f"Upload-Metadata: the value of {key!r} is not base64"
            ) from None
    return raw, pairs


def parse_length(value: str | None, header: str) -> int | None:
    """A length or offset header: ASCII digits (app.http.shared.parsing), else a 400."""
    if value is None:
        return None
    parsed = parse_decimal(value)
    if parsed is None:
        raise tus_error(
            400,
            "bad_request",
            f"{header} must be a non-negative integer of at most {MAX_DECIMAL_DIGITS} digits",
        )
    return parsed


def parse_checksum(header: str | None) -> Checksum | None:
    if header is None:
        return None
    algorithm, _, encoded = header.strip().partition(" ")
    if algorithm not in CHECKSUM_ALGORITHMS:
        raise tus_error(
            400,
            "bad_request",
            f"Upload-Checksum algorithm {algorithm[:32]!r} is not supported; "
            f"use one of {', '.join(CHECKSUM_ALGORITHMS)}",
        )
    try:
        return Checksum(algorithm, base64.b64decode(encoded.strip(), validate=True))
    except (binascii.Error, ValueError):
        raise tus_error(400, "bad_request", "Upload-Checksum's digest is not base64") from None


def partial_ids(header: str) -> list[str]:
    """The upload ids of `final;<url> <url> ...` (URLs or paths)."""
    urls = header.removeprefix("final;").split()
    if not urls:
        raise tus_error(400, "bad_request", "Upload-Concat: final names no partial uploads")
    if len(urls) > MAX_PARTIALS:
        raise tus_error(
            400, "bad_request", f"Upload-Concat: more than {MAX_PARTIALS} partial uploads"
        )
    ids = [url.rstrip("/").rsplit("/", 1)[-1] for url in urls]
    for upload_id in ids:
        if not upload_id or len(upload_id) > MAX_ID_LENGTH:
            raise tus_error(400, "bad_request", "Upload-Concat names a malformed upload URL")
    return ids
