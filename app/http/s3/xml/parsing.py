"""Request bodies: parsed with defusedxml, checked, turned into values.

Parsers take the request body (at most :data:`MAX_XML_BYTES`), parse it with
defusedxml (DTDs, entities and external references refused) and raise
``S3Error("MalformedXML")`` on anything unexpected. Element names are matched
without their namespace: clients send the S3 namespace or none.
"""

from __future__ import annotations

from typing import Final, NamedTuple
from xml.etree.ElementTree import Element, ParseError

import defusedxml.ElementTree as DefusedET
from defusedxml import DefusedXmlException

from app.http.s3.errors import S3Error
from app.http.shared.parsing import parse_decimal
from app.store.limits import MAX_PART_NUMBER

#: Largest request XML body accepted (DeleteObjects with 1000 long keys fits).
MAX_XML_BYTES: Final = 2 * 1024 * 1024
MAX_DELETE_KEYS: Final = 1000


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def parse_xml(body: bytes, root: str) -> Element:
    """Parse a request body with defusedxml and check its root element name.

    Raises ``MalformedXML`` for anything over :data:`MAX_XML_BYTES`, not
    well-formed, carrying a DTD or entity declarations, or with another root;
    ``MissingRequestBodyError`` for an empty body.
    """
    if not body.strip():
        raise S3Error("MissingRequestBodyError")
    if len(body) > MAX_XML_BYTES:
        raise S3Error("MalformedXML", f"The XML body is larger than {MAX_XML_BYTES} bytes.")
    try:
        element = DefusedET.fromstring(body, forbid_dtd=True)
    # LookupError and UnicodeError: a declared encoding Python does not know,
    # or bytes not in the one declared.
    except (ParseError, DefusedXmlException, ValueError, LookupError, UnicodeError):
        raise S3Error("MalformedXML") from None
    if _local(element.tag) != root:
        raise S3Error("MalformedXML", f"The root element must be {root}.")
    return element


def _children(element: Element, name: str) -> list[Element]:
    return [child for child in element if _local(child.tag) == name]


def _child_text(element: Element, name: str) -> str | None:
    found = _children(element, name)
    if len(found) > 1:
        raise S3Error("MalformedXML", f"{name} is given twice.")
    if not found:
        return None
    return found[0].text or ""


def parse_versioning_configuration(body: bytes) -> str:
    """``<VersioningConfiguration><Status>Enabled|Suspended</Status>``: the status."""
    root = parse_xml(body, "VersioningConfiguration")
    status = (_child_text(root, "Status") or "").strip()
    if status not in ("Enabled", "Suspended"):
        raise S3Error("MalformedXML", "Status must be Enabled or Suspended.")
    return status


class DeleteRequest(NamedTuple):
    quiet: bool
    keys: list[str]


def parse_delete_objects(body: bytes) -> DeleteRequest:
    """``<Delete><Quiet>?</Quiet><Object><Key>k</Key></Object>...</Delete>``.

    Keys are returned exactly (whitespace kept), in order; ``VersionId`` is
    ignored (no versioning). 1 to :data:`MAX_DELETE_KEYS` objects, else
    ``MalformedXML``.
    """
    root = parse_xml(body, "Delete")
    quiet_text = _child_text(root, "Quiet")
    quiet = False
    if quiet_text is not None:
        normalized = quiet_text.strip().lower()
        if normalized not in ("true", "false"):
            raise S3Error("MalformedXML", "Quiet must be true or false.")
        quiet = normalized == "true"
    objects = _children(root, "Object")
    if not objects:
        raise S3Error("MalformedXML", "Delete must list at least one Object.")
    if len(objects) > MAX_DELETE_KEYS:
        raise S3Error("MalformedXML", f"Delete may list at most {MAX_DELETE_KEYS} objects.")
    keys: list[str] = []
    for obj in objects:
        key = _child_text(obj, "Key")
        if key is None:
            raise S3Error("MalformedXML", "Every Object needs a Key.")
        keys.append(key)
    return DeleteRequest(quiet, keys)


class CompletedPart(NamedTuple):
    part_number: int
    #: The ETag without quotes or surrounding blanks.
    etag: str


def parse_complete_multipart(body: bytes) -> list[CompletedPart]:
    """``<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"x"</ETag></Part>...``.

    Returns the parts in the order given, ETags unquoted. No part at all is
    accepted (AWS refuses it, but Docker's registry 2.8 completes an empty
    blob that way; it makes an empty object); part numbers 1-10000
    (``InvalidArgument`` otherwise) in strictly ascending order
    (``InvalidPartOrder`` otherwise); checksum elements are ignored.
    """
    root = parse_xml(body, "CompleteMultipartUpload")
    elements = _children(root, "Part")
    if len(elements) > MAX_PART_NUMBER:
        raise S3Error("MalformedXML", f"At most {MAX_PART_NUMBER} parts can be completed.")
    parts: list[CompletedPart] = []
    for element in elements:
        number_text = _child_text(element, "PartNumber")
        etag = _child_text(element, "ETag")
        if number_text is None or etag is None:
            raise S3Error("MalformedXML", "Every Part needs a PartNumber and an ETag.")
        number_text = number_text.strip()
        number = parse_decimal(number_text, max_digits=9)
        if number is None:
            raise S3Error("MalformedXML", "PartNumber must be an integer.")
        if not 1 <= number <= MAX_PART_NUMBER:
            raise S3Error(
                "InvalidArgument",
                f"Part number must be an integer between 1 and {MAX_PART_NUMBER}, inclusive",
                details={"ArgumentName": "PartNumber", "ArgumentValue": number_text},
            )
        if parts and number <= parts[-1].part_number:
            raise S3Error("InvalidPartOrder")
        parts.append(CompletedPart(number, etag.strip().strip('"')))
    return parts


def parse_complete_part_checksums(body: bytes) -> dict[int, tuple[str, str]]:
    """The ``Checksum<ALGORITHM>`` a CompleteMultipartUpload body gives for
    its parts: part number -> (algorithm lowercase, base64 value). Call after
    :func:`parse_complete_multipart`, which checks the rest."""
    root = parse_xml(body, "CompleteMultipartUpload")
    found: dict[int, tuple[str, str]] = {}
    for element in _children(root, "Part"):
        number = parse_decimal((_child_text(element, "PartNumber") or "").strip(), max_digits=9)
        for child in element:
            name = _local(child.tag)
            if name.startswith("Checksum") and name != "ChecksumType" and number is not None:
                found[number] = (name.removeprefix("Checksum").lower(), (child.text or "").strip())
    return found


def parse_create_bucket_configuration(body: bytes) -> str | None:
    """The ``LocationConstraint`` of a CreateBucket body (``None`` for no body or none given)."""
    if not body.strip():
        return None
    root = parse_xml(body, "CreateBucketConfiguration")
    location = _child_text(root, "LocationConstraint")
    return location.strip() or None if location is not None else None
