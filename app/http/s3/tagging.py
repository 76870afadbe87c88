"""S3 object tags: the `x-amz-tagging` header, the `<Tagging>` document, and
AWS's limits on both.

A tag set is a mapping of unique keys to values. AWS's limits: at most
MAX_TAGS tags, keys of 1 to MAX_TAG_KEY_LENGTH and values of at most
MAX_TAG_VALUE_LENGTH Unicode characters, no key twice. Anything else is
`InvalidTag`, before the body of a PUT is read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final
from urllib.parse import unquote

from app.http.s3.errors import S3Error
from app.http.s3.xml.parsing import parse_xml
from app.http.s3.xml.writer import S3_NAMESPACE, XML_DECLARATION, escape

MAX_TAGS: Final = 10
MAX_TAG_KEY_LENGTH: Final = 128
MAX_TAG_VALUE_LENGTH: Final = 256
#: Control characters: the Postgres JSON column cannot hold NUL, and a header
#: or an XML answer cannot carry the others literally.
_CONTROL: Final = re.compile("[\x00-\x1f\x7f]")


def _invalid(message: str) -> S3Error:
    return S3Error("InvalidTag", message)


def _checked(pairs: list[tuple[str, str]]) -> dict[str, str]:
    if len(pairs) > MAX_TAGS:
        raise _invalid(f"Object tags cannot be greater than {MAX_TAGS}.")
    tags: dict[str, str] = {}
    for key, value in pairs:
        if not 1 <= len(key) <= MAX_TAG_KEY_LENGTH:
            raise _invalid(f"The TagKey must be 1 to {MAX_TAG_KEY_LENGTH} characters long.")
        if len(value) > MAX_TAG_VALUE_LENGTH:
            raise _invalid(f"The TagValue must be at most {MAX_TAG_VALUE_LENGTH} characters long.")
        if _CONTROL.search(key) or _CONTROL.search(value):
            raise _invalid("Tags cannot contain control characters.")
        if key in tags:
            raise _invalid("Cannot provide multiple Tags with the same key.")
        tags[key] = value
    return tags


def parse_header(value: str | None) -> dict[str, str] | None:
    """The tags of an `x-amz-tagging` header (`k1=v1&k2`, URL-encoded); None
    when there is no header."""
    if value is None:
        return None
    # Starlette gives header bytes as Latin-1 text; the query form is ASCII,
    # and anything beyond it was sent as UTF-8.
    try:
        raw = value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        raise _invalid("The x-amz-tagging header is not valid UTF-8.") from None
    pairs: list[tuple[str, str]] = []
    for field in raw.split("&"):
        if not field:
            continue
        key, _, tag_value = field.partition("=")
        try:
            pairs.append(
                (
                    unquote(key.replace("+", " "), errors="strict"),
                    unquote(tag_value.replace("+", " "), errors="strict"),
                )
            )
        except UnicodeDecodeError:
            raise _invalid("The x-amz-tagging header is not valid UTF-8.") from None
    return _checked(pairs)


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def parse_document(body: bytes) -> dict[str, str]:
    """The tags of a PutObjectTagging body:
    `<Tagging><TagSet><Tag><Key>k</Key><Value>v</Value></Tag>...</TagSet></Tagging>`."""
    root = parse_xml(body, "Tagging")
    tag_sets = [child for child in root if _local(child.tag) == "TagSet"]
    if len(tag_sets) != 1:
        raise S3Error("MalformedXML", "Tagging must hold one TagSet.")
    pairs: list[tuple[str, str]] = []
    for tag in tag_sets[0]:
        if _local(tag.tag) != "Tag":
            raise S3Error("MalformedXML", "A TagSet holds only Tag elements.")
        fields: dict[str, list[str]] = {}
        for child in tag:
            fields.setdefault(_local(child.tag), []).append(child.text or "")
        keys, values = fields.get("Key", []), fields.get("Value", [])
        if len(keys) != 1 or len(values) > 1:
            raise S3Error("MalformedXML", "Every Tag needs one Key and at most one Value.")
        pairs.append((keys[0], values[0] if values else ""))
    return _checked(pairs)


def tagging_xml(tags: Mapping[str, str]) -> bytes:
    """`<Tagging>` with the tags in key order (AWS keeps no order of its own)."""
    items = "".join(
        f"<Tag><Key>{escape(key)}</Key><Value>{escape(tags[key])}</Value></Tag>"
        for key in sorted(tags)
    )
    document = f'<Tagging xmlns="{S3_NAMESPACE}"><TagSet>{items}</TagSet></Tagging>'
    return XML_DECLARATION + document.encode("utf-8")


def count_header(tags: Mapping[str, str]) -> dict[str, str]:
    """`x-amz-tagging-count` for GET/HEAD, only when the object has tags (as AWS)."""
    return {"x-amz-tagging-count": str(len(tags))} if tags else {}
