"""Access control lists, as MinIO has them: there is one owner, who has
FULL_CONTROL of every bucket and object, and nothing else can be granted.

GetBucketAcl and GetObjectAcl answer that grant. A PutBucketAcl or
PutObjectAcl is accepted when it asks for exactly that: the canned ACL
`private` or `bucket-owner-full-control` (the bucket's owner is every
object's owner here, so it grants nothing more; tools send it when they copy
objects), or a policy whose one grant is FULL_CONTROL to the owner.
Anything else (public-read, grants to others, the `x-amz-grant-*` headers)
would promise access that is never given, so it is refused with
NotImplemented, saying what is supported.

`x-amz-acl` and `x-amz-grant-*` on PutObject, CopyObject and
CreateMultipartUpload are ignored, as MinIO ignores them: many clients send
one with every upload, the object stays private whatever they ask, and
GetObjectAcl says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final
from xml.etree.ElementTree import Element

from app.http.s3.errors import S3Error
from app.http.s3.xml.parsing import parse_xml
from app.http.s3.xml.writer import S3_NAMESPACE, XML_DECLARATION, Owner, escape

CANNED_PRIVATE: Final = "private"
#: Canned ACLs that grant only the owner's FULL_CONTROL in a single-owner store.
OWNER_ONLY_CANNED: Final = frozenset({CANNED_PRIVATE, "bucket-owner-full-control"})
FULL_CONTROL: Final = "FULL_CONTROL"
_XSI: Final = "http://www.w3.org/2001/XMLSchema-instance"
_GRANT_HEADERS: Final = (
    "x-amz-grant-read",
    "x-amz-grant-write",
    "x-amz-grant-read-acp",
    "x-amz-grant-write-acp",
    "x-amz-grant-full-control",
)
_ONLY_PRIVATE: Final = (
    "Only the owner's FULL_CONTROL (the canned ACL 'private', or "
    "'bucket-owner-full-control', the same here) is supported: "
    "nothing can be granted to anyone else."
)


def _refused() -> S3Error:
    return S3Error("NotImplemented", _ONLY_PRIVATE)


def check_request_headers(headers: Mapping[str, str]) -> None:
    """`x-amz-acl` and `x-amz-grant-*` of a Put*Acl: only an owner-only
    canned ACL, or nothing."""
    canned = headers.get("x-amz-acl")
    if canned is not None and canned.strip() not in OWNER_ONLY_CANNED:
        raise _refused()
    if any(name in headers for name in _GRANT_HEADERS):
        raise _refused()


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def _only(element: Element, name: str) -> Element | None:
    found = [child for child in element if _local(child.tag) == name]
    if len(found) > 1:
        raise S3Error("MalformedACLError", f"{name} is given twice.")
    return found[0] if found else None


def _text(element: Element | None, name: str) -> str | None:
    if element is None:
        return None
    child = _only(element, name)
    return None if child is None else (child.text or "").strip()


def check_policy(body: bytes, owner: Owner) -> None:
    """An `<AccessControlPolicy>` body: accepted only if it grants exactly
    FULL_CONTROL to `owner`."""
    root = parse_xml(body, "AccessControlPolicy")
    owner_id = _text(_only(root, "Owner"), "ID")
    if owner_id is not None and owner_id != owner.id:
        raise _refused()
    grant_list = _only(root, "AccessControlList")
    grants = [] if grant_list is None else list(grant_list)
    if len(grants) != 1 or _local(grants[0].tag) != "Grant":
        raise _refused()
    grantee = _only(grants[0], "Grantee")
    if grantee is None:
        raise S3Error("MalformedACLError", "A Grant needs a Grantee.")
    kind = grantee.get(f"{{{_XSI}}}type", "CanonicalUser")
    if (
        kind != "CanonicalUser"
        or _text(grantee, "ID") != owner.id
        or _text(grants[0], "Permission") != FULL_CONTROL
    ):
        raise _refused()


def policy_xml(owner: Owner) -> bytes:
    """The `<AccessControlPolicy>` of every bucket and object."""
    person = f"<ID>{escape(owner.id)}</ID><DisplayName>{escape(owner.display_name)}</DisplayName>"
    document = (
        f'<AccessControlPolicy xmlns="{S3_NAMESPACE}">'
        f"<Owner>{person}</Owner>"
        "<AccessControlList><Grant>"
        f'<Grantee xmlns:xsi="{_XSI}" xsi:type="CanonicalUser">{person}</Grantee>'
        f"<Permission>{FULL_CONTROL}</Permission>"
        "</Grant></AccessControlList></AccessControlPolicy>"
    )
    return XML_DECLARATION + document.encode("utf-8")
