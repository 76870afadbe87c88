"""WebDAV's request bodies: PROPFIND, PROPPATCH and LOCK (RFC 4918 section
14), parsed with defusedxml (no DTD, no entity, no external reference: no XML
bomb) and turned into values. Anything that is not what the RFC describes is
a 400, never a 500.

Elements are matched by namespace and name. Elements the RFC does not name
are ignored where it says to ignore them (an extended `<propfind>`). A dead
property's value is kept as XML that stands on its own: each element in it
declares its namespace, so it can be written back into any document.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal
from xml.etree.ElementTree import Element, ParseError

import defusedxml.ElementTree as DefusedET
from defusedxml import DefusedXmlException

from app.http.dav.errors import DavError, bad_request
from app.http.dav.xml_out import DAV, escape
from app.store.limits import MAX_PROPERTY_NAME_LENGTH, MAX_PROPERTY_NAMESPACE_LENGTH

#: The largest PROPFIND, PROPPATCH or LOCK body read.
MAX_XML_BODY_BYTES: Final = 1024 * 1024
#: The largest value of one dead property, as XML.
MAX_PROPERTY_VALUE_BYTES: Final = 64 * 1024
#: Properties one PROPFIND may name, and one PROPPATCH may change.
MAX_PROPERTIES_PER_REQUEST: Final = 1000
#: The largest `<D:owner>` of a LOCK, as XML.
MAX_LOCK_OWNER_BYTES: Final = 4096

PropertyName = tuple[str, str]  # (namespace, name)


def split_tag(tag: str) -> PropertyName:
    """An ElementTree tag "{namespace}name" as (namespace, name)."""
    if tag.startswith("{"):
        namespace, _, name = tag[1:].partition("}")
        return namespace, name
    return "", tag


def parse(body: bytes, root: str) -> Element:
    """The document `body`, whose root must be the DAV: element `root`."""
    if len(body) > MAX_XML_BODY_BYTES:
        raise DavError(413, f"the XML body is larger than {MAX_XML_BODY_BYTES} bytes")
    try:
        element = DefusedET.fromstring(body, forbid_dtd=True)
    except (ParseError, DefusedXmlException, ValueError, LookupError, UnicodeError):
        raise bad_request("the body is not well-formed XML") from None
    if not isinstance(element.tag, str) or split_tag(element.tag) != (DAV, root):
        raise bad_request(f"the body's root element must be DAV:{root}")
    return element


def _children(element: Element, name: str) -> list[Element]:
    return [
        child
        for child in element
        if isinstance(child.tag, str) and split_tag(child.tag) == (DAV, name)
    ]


def _names(prop: Element) -> list[PropertyName]:
    names = []
    for child in prop:
        if not isinstance(child.tag, str):
            continue
        names.append(_checked_name(split_tag(child.tag)))
    return names


def _checked_name(name: PropertyName) -> PropertyName:
    namespace, local = name
    if len(namespace) > MAX_PROPERTY_NAMESPACE_LENGTH:
        raise bad_request(
            f"a property's namespace is longer than {MAX_PROPERTY_NAMESPACE_LENGTH} characters"
        )
    if len(local) > MAX_PROPERTY_NAME_LENGTH:
        raise bad_request(f"a property's name is longer than {MAX_PROPERTY_NAME_LENGTH} characters")
    return name


# --- PROPFIND -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PropfindRequest:
    """What a PROPFIND asks for: every property (`allprop`, with the
    `include`d ones), only their names (`propname`), or the `names` listed."""

    kind: Literal["allprop", "propname", "prop"]
    names: list[PropertyName] = field(default_factory=list)


ALLPROP = PropfindRequest("allprop")


def parse_propfind(body: bytes) -> PropfindRequest:
    """An empty body is `allprop` (RFC 4918 section 9.1)."""
    if not body.strip():
        return ALLPROP
    root = parse(body, "propfind")
    props = _children(root, "prop")
    if props:
        names = [name for prop in props for name in _names(prop)]
        if len(names) > MAX_PROPERTIES_PER_REQUEST:
            raise bad_request(
                f"a PROPFIND may name at most {MAX_PROPERTIES_PER_REQUEST} properties"
            )
        return PropfindRequest("prop", names)
    if _children(root, "propname"):
        return PropfindRequest("propname")
    if _children(root, "allprop"):
        included = [name for include in _children(root, "include") for name in _names(include)]
        return PropfindRequest("allprop", included)
    raise bad_request("a PROPFIND names <prop>, <propname> or <allprop>")


# --- PROPPATCH ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PropertyUpdate:
    """One property set (to `value`, the XML inside its element) or, with
    None, removed; in document order (RFC 4918 section 9.2)."""

    name: PropertyName
    value: str | None
    # The element itself, for the live properties that read its text.
    text: str = ""


def parse_proppatch(body: bytes) -> list[PropertyUpdate]:
    root = parse(body, "propertyupdate")
    updates = []
    for child in root:
        if not isinstance(child.tag, str):
            continue
        kind = split_tag(child.tag)
        if kind not in ((DAV, "set"), (DAV, "remove")):
            continue
        for prop in _children(child, "prop"):
            for element in prop:
                if not isinstance(element.tag, str):
                    continue
                name = _checked_name(split_tag(element.tag))
                if kind == (DAV, "remove"):
                    updates.append(PropertyUpdate(name, None))
                    continue
                value = inner_xml(element)
                if len(value.encode()) > MAX_PROPERTY_VALUE_BYTES:
                    raise DavError(
                        413,
                        f"a property's value is larger than {MAX_PROPERTY_VALUE_BYTES} bytes",
                    )
                updates.append(PropertyUpdate(name, value, "".join(element.itertext())))
    if not updates:
        raise bad_request("the PROPPATCH sets or removes no property")
    if len(updates) > MAX_PROPERTIES_PER_REQUEST:
        raise bad_request(f"a PROPPATCH may change at most {MAX_PROPERTIES_PER_REQUEST} properties")
    return updates


# --- LOCK ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LockRequest:
    exclusive: bool
    # The <D:owner> element as XML, "" when none was sent.
    owner: str


def parse_lockinfo(body: bytes) -> LockRequest | None:
    """A new lock's terms; None for an empty body (a refresh)."""
    if not body.strip():
        return None
    root = parse(body, "lockinfo")
    scopes = _children(root, "lockscope")
    types = _children(root, "locktype")
    if len(scopes) != 1 or len(types) != 1:
        raise bad_request("a LOCK names one <lockscope> and one <locktype>")
    scope = [split_tag(child.tag) for child in scopes[0] if isinstance(child.tag, str)]
    if scope not in ([(DAV, "exclusive")], [(DAV, "shared")]):
        raise bad_request("the lock scope is <exclusive/> or <shared/>")
    kind = [split_tag(child.tag) for child in types[0] if isinstance(child.tag, str)]
    if kind != [(DAV, "write")]:
        raise DavError(422, "only write locks exist")
    owners = _children(root, "owner")
    owner = element_xml(owners[0]) if owners else ""
    if len(owner.encode()) > MAX_LOCK_OWNER_BYTES:
        raise bad_request(f"the lock's owner is larger than {MAX_LOCK_OWNER_BYTES} bytes")
    return LockRequest(exclusive=scope == [(DAV, "exclusive")], owner=owner)


# --- XML that stands on its own -------------------------------------------------


def inner_xml(element: Element) -> str:
    """What is inside `element`, as XML whose every element declares its
    own namespace."""
    parts = [escape(element.text or "")]
    for child in element:
        if isinstance(child.tag, str):
            parts.append(element_xml(child))
        parts.append(escape(child.tail or ""))
    return "".join(parts)


def element_xml(element: Element) -> str:
    namespace, name = split_tag(element.tag)
    attributes = [f' xmlns="{escape(namespace)}"']
    declared: dict[str, str] = {}
    for key, value in element.attrib.items():
        attribute_namespace, attribute_name = split_tag(key)
        if not attribute_namespace:
            attributes.append(f' {attribute_name}="{escape(value)}"')
            continue
        if attribute_namespace == "http://www.w3.org/XML/1998/namespace":
            attributes.append(f' xml:{attribute_name}="{escape(value)}"')
            continue
        prefix = declared.setdefault(attribute_namespace, f"a{len(declared)}")
        attributes.append(f' {prefix}:{attribute_name}="{escape(value)}"')
    for uri, prefix in declared.items():
        attributes.append(f' xmlns:{prefix}="{escape(uri)}"')
    inside = inner_xml(element)
    opening = f"<{name}{''.join(attributes)}"
    return f"{opening}>{inside}</{name}>" if inside else f"{opening}/>"
