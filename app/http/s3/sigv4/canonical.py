"""The canonical request of SigV4, rebuilt from what the client sent (see the
package's docstring for the rules): path, query, headers and payload hash.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Final
from urllib.parse import quote_from_bytes, unquote_to_bytes

from app.http.s3.sigv4.signing import ALGORITHM

_BLANKS_RE: Final = re.compile(rb"[ \t]+")
# A path of bytes that URI encoding leaves as they are.
_UNRESERVED_PATH: Final = re.compile(rb"[A-Za-z0-9\-._~/]*")


def as_bytes(value: bytes | str) -> bytes:
    if isinstance(value, bytes):
        return value
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        return value.encode("utf-8")


def _decode_component(raw: bytes) -> bytes:
    """Percent-decode one query name or value, ``+`` meaning a space."""
    return unquote_to_bytes(raw.replace(b"+", b" "))


def query_pairs(query: bytes | str) -> list[tuple[bytes, bytes]]:
    pairs: list[tuple[bytes, bytes]] = []
    for piece in as_bytes(query).split(b"&"):
        if not piece:
            continue
        name, _, value = piece.partition(b"=")
        pairs.append((_decode_component(name), _decode_component(value)))
    return pairs


def parse_query(query: bytes | str) -> list[tuple[str, str]]:
    """Decode a raw query string into ``(name, value)`` pairs, in order.

    ``+`` is a space, ``?uploads`` gives ``("uploads", "")``, empty pieces are
    skipped, invalid UTF-8 is replaced with U+FFFD. This is the interpretation
    the signature is checked against (and the one Starlette's
    ``request.query_params`` uses).
    """
    return [
        (n.decode("utf-8", "replace"), v.decode("utf-8", "replace")) for n, v in query_pairs(query)
    ]


def _uri_encode(raw: bytes, *, keep_slash: bool) -> str:
    return quote_from_bytes(raw, safe="/" if keep_slash else "")


def canonical_uri(raw_path: bytes | str) -> str:
    """The canonical URI of a path as received: decoded once, encoded once."""
    raw = as_bytes(raw_path) or b"/"
    return _uri_encode(unquote_to_bytes(raw), keep_slash=True)


def uri_candidates(raw_path: bytes | str) -> list[str]:
    raw = as_bytes(raw_path) or b"/"
    if _UNRESERVED_PATH.fullmatch(raw):
        # Nothing to decode or encode (most keys): the path is its own
        # canonical form, and the only candidate.
        return [raw.decode("ascii")]
    canonical = canonical_uri(raw)
    candidates = [canonical]
    try:
        as_sent = raw.decode("ascii")
    except UnicodeDecodeError:
        return candidates
    if as_sent != canonical:
        candidates.append(as_sent)
    return candidates


def canonical_query_string(query: bytes | str, *, exclude: Iterable[str] = ()) -> str:
    """The canonical query string of a raw query (``exclude``: names to drop)."""
    excluded = {name.encode() for name in exclude}
    encoded = sorted(
        (_uri_encode(name, keep_slash=False), _uri_encode(value, keep_slash=False))
        for name, value in query_pairs(query)
        if name not in excluded
    )
    return "&".join(f"{name}={value}" for name, value in encoded)


def collect_headers(headers: Mapping[str, str]) -> dict[str, list[str]]:
    # Starlette's Headers.items() yields repeated headers separately; a plain
    # dict simply has one value per name.
    collected: dict[str, list[str]] = {}
    raw: list[tuple[bytes, bytes]] | None = getattr(headers, "raw", None)
    if raw is not None:
        # Starlette's own pairs: items() would build a decoded list first.
        for raw_name, raw_value in raw:
            name = raw_name.decode("latin-1").lower()
            collected.setdefault(name, []).append(raw_value.decode("latin-1"))
        return collected
    for name, value in headers.items():
        collected.setdefault(name.lower(), []).append(value)
    return collected


def first_header(collected: Mapping[str, list[str]], name: str) -> str | None:
    values = collected.get(name)
    return values[0] if values else None


def _canonical_header_value(values: list[str]) -> bytes:
    if len(values) == 1:  # a header sent once, as nearly all are
        return _trimmed(as_bytes(values[0]))
    return b",".join(_trimmed(as_bytes(v)) for v in values)


def _trimmed(value: bytes) -> bytes:
    """A header value with its runs of blanks folded to one space and its ends
    trimmed; most values have no run to fold (the regex is skipped)."""
    if b"  " in value or b"\t" in value:
        value = _BLANKS_RE.sub(b" ", value)
    return value.strip(b" \t")


def query_candidates(query: bytes | str, *, exclude: tuple[str, ...] = ()) -> list[bytes]:
    """The canonical query string, then the query as sent with its pairs sorted.

    botocore (and minio-py) sign the query pieces as they are in the URL, sorted
    but not re-encoded; they only ever send canonical encodings, but a query
    spelt differently (``%7E`` for ``~``) is signed that way. As for paths, the
    as-sent candidate covers the same bytes the routes will read.
    """
    if not query:
        return [b""]  # most GETs, HEADs and PUTs of objects
    canonical = canonical_query_string(query, exclude=exclude)
    excluded = {name.encode() for name in exclude}
    raw = as_bytes(query)
    pairs = sorted(
        (name, value)
        for name, _, value in (piece.partition(b"=") for piece in raw.split(b"&"))
        if raw and name not in excluded
    )
    as_sent = b"&".join(name + b"=" + value for name, value in pairs)
    candidates = [canonical.encode("ascii")]
    if as_sent != candidates[0]:
        candidates.append(as_sent)
    return candidates


def canonical_requests(
    method: str,
    raw_path: bytes,
    query_candidates: list[bytes],
    collected: Mapping[str, list[str]],
    signed_headers: tuple[str, ...],
    payload_hash: str,
) -> list[bytes]:
    prefixes, signed_list = _signed_header_parts(signed_headers)
    lines = [b"\n"]
    for name, prefix in zip(signed_headers, prefixes, strict=True):
        lines += (prefix, _canonical_header_value(collected.get(name, [])), b"\n")
    lines += (b"\n", signed_list, b"\n", as_bytes(payload_hash))
    tail = b"".join(lines)
    head = method.upper().encode("ascii") + b"\n"
    return [
        head + uri.encode("ascii") + b"\n" + query + tail
        for uri in uri_candidates(raw_path)
        for query in query_candidates
    ]


@functools.lru_cache(maxsize=256)
def _signed_header_parts(signed_headers: tuple[str, ...]) -> tuple[tuple[bytes, ...], bytes]:
    """Each signed header's line start (``name:``) and the list line, encoded
    once per distinct list: a client signs the same set request after request."""
    prefixes = tuple(name.encode("ascii") + b":" for name in signed_headers)
    return prefixes, ";".join(signed_headers).encode("ascii")


def string_to_sign(amz_date: str, scope: str, canonical_request: bytes) -> str:
    digest = hashlib.sha256(canonical_request).hexdigest()
    return f"{ALGORITHM}\n{amz_date}\n{scope}\n{digest}"
