"""PROPFIND, PROPPATCH and LOCK bodies: what they parse to, what is refused
(with a 4xx), and that no body, however malformed or hostile, makes a parser
raise anything else; and that the XML a dead property keeps stands on its
own wherever it is written back."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from app.http.dav.errors import DavError
from app.http.dav.xml_bodies import (
    MAX_XML_BODY_BYTES,
    LockRequest,
    PropertyUpdate,
    parse_lockinfo,
    parse_propfind,
    parse_proppatch,
)
from app.http.dav.xml_out import DAV, ROOT_NAMESPACES, element, escape

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NS = "http://webdav.org/neon/litmus/"


def test_an_empty_propfind_asks_for_every_property() -> None:
    assert parse_propfind(b"").kind == "allprop"


def test_a_propfind_names_properties_in_any_namespace_none_included() -> None:
    body = (
        b'<D:propfind xmlns:D="DAV:"><D:prop><D:getetag/><x:a xmlns:x="urn:x"/>'
        b'<b xmlns=""/></D:prop></D:propfind>'
    )
    request = parse_propfind(body)
    assert request.kind == "prop"
    assert request.names == [(DAV, "getetag"), ("urn:x", "a"), ("", "b")]


def test_an_extended_propfind_ignores_what_it_does_not_know() -> None:
    request = parse_propfind(b'<propfind xmlns="DAV:"><foobar/><allprop/></propfind>')
    assert request.kind == "allprop"


@pytest.mark.parametrize(
    "body",
    [
        b"<foo>",
        # Undeclaring a prefix (litmus's propfind_invalid2): not namespace-well-formed.
        b'<D:propfind xmlns:D="DAV:"><D:prop><bar:foo xmlns:bar=""/></D:prop></D:propfind>',
        b'<propfind xmlns="urn:other"><allprop/></propfind>',
        b'<?xml version="1.0" encoding="bogus"?><propfind xmlns="DAV:"/>',
        b'<!DOCTYPE d [<!ENTITY e "x">]><propfind xmlns="DAV:">&e;</propfind>',
        b'<propfind xmlns="DAV:"/>',
    ],
)
def test_bodies_that_are_not_a_propfind_are_a_400(body: bytes) -> None:
    with pytest.raises(DavError) as refused:
        parse_propfind(body)
    assert refused.value.status == 400


def test_a_body_past_the_limit_is_a_413() -> None:
    body = b'<propfind xmlns="DAV:"><allprop/>' + b" " * MAX_XML_BODY_BYTES + b"</propfind>"
    with pytest.raises(DavError) as refused:
        parse_propfind(body)
    assert refused.value.status == 413


def test_a_proppatch_keeps_document_order_and_values_as_xml() -> None:
    body = (
        b"<propertyupdate xmlns='DAV:'>"
        b"<remove><prop><r xmlns='" + NS.encode() + b"'/></prop></remove>"
        b"<set><prop><r xmlns='" + NS.encode() + b"'>x &amp; &lt;y&gt;</r>"
        b"<t:v xmlns:t='" + NS.encode() + b"'><foo xmlns='bar' a='1'/>tail</t:v></prop></set>"
        b"</propertyupdate>"
    )
    assert parse_proppatch(body) == [
        PropertyUpdate((NS, "r"), None),
        PropertyUpdate((NS, "r"), "x &amp; &lt;y&gt;", "x & <y>"),
        PropertyUpdate((NS, "v"), '<foo xmlns="bar" a="1"/>tail', "tail"),
    ]


def test_a_lockinfo_gives_scope_and_owner() -> None:
    body = (
        b'<D:lockinfo xmlns:D="DAV:"><D:lockscope><D:shared/></D:lockscope>'
        b"<D:locktype><D:write/></D:locktype><D:owner><D:href>me</D:href></D:owner></D:lockinfo>"
    )
    assert parse_lockinfo(body) == LockRequest(
        exclusive=False, owner='<owner xmlns="DAV:"><href xmlns="DAV:">me</href></owner>'
    )
    assert parse_lockinfo(b"") is None


@pytest.mark.parametrize(
    "body",
    [
        b'<lockinfo xmlns="DAV:"><lockscope><exclusive/></lockscope></lockinfo>',
        b'<lockinfo xmlns="DAV:"><lockscope><exclusive/><shared/></lockscope>'
        b"<locktype><write/></locktype></lockinfo>",
        b'<lockinfo xmlns="DAV:"><lockscope><other/></lockscope><locktype><write/></locktype>'
        b"</lockinfo>",
    ],
)
def test_a_lockinfo_without_one_scope_and_type_is_a_400(body: bytes) -> None:
    with pytest.raises(DavError) as refused:
        parse_lockinfo(body)
    assert refused.value.status == 400


def _wrapped(value: str) -> str:
    """A dead property's value written back into a multistatus, as PROPFIND does."""
    return (
        f"<D:multistatus {ROOT_NAMESPACES}><D:prop>{element(NS, 'p', value)}</D:prop>"
        "</D:multistatus>"
    )


@FUZZ
@given(
    st.text(st.characters(exclude_categories=["Cs"]), max_size=20),
    st.sampled_from(["", "urn:a", "DAV:", NS]),
    st.text(st.characters(min_codepoint=0x61, max_codepoint=0x7A), min_size=1, max_size=6),
)
def test_a_dead_property_is_written_back_as_it_was_set(
    text: str, namespace: str, child: str
) -> None:
    inner = f'<{child} xmlns="{escape(namespace)}" k="{escape(text)}">{escape(text)}</{child}>'
    body = (
        f"<propertyupdate xmlns='DAV:'><set><prop><p xmlns='{NS}'>{escape(text)}{inner}"
        "</p></prop></set></propertyupdate>"
    ).encode()
    try:
        (update,) = parse_proppatch(body)
    except DavError as refused:
        # Characters XML 1.0 cannot carry are dropped by `escape`; nothing else is refused.
        pytest.fail(f"refused: {refused.message}")
    assert update.value is not None
    parsed = ET.fromstring(_wrapped(update.value))
    prop = parsed.find(f".//{{{NS}}}p")
    assert prop is not None
    again = ET.fromstring(_wrapped(update.value)).find(f".//{{{NS}}}p")
    assert again is not None and ET.tostring(prop) == ET.tostring(again)
    (kid,) = list(prop)
    assert kid.tag == (f"{{{namespace}}}{child}" if namespace else child)


xmlish = st.lists(
    st.one_of(
        st.sampled_from(
            [
                "<",
                ">",
                "/",
                "D:",
                'xmlns:D="DAV:"',
                'xmlns=""',
                "propfind",
                "propertyupdate",
                "lockinfo",
                "prop",
                "set",
                "remove",
                "allprop",
                "lockscope",
                "exclusive",
                "locktype",
                "write",
                "owner",
                "&amp;",
                "&#0;",
                "<!DOCTYPE x>",
                "<?xml version='1.0'?>",
                " ",
            ]
        ),
        st.text(max_size=5),
    ),
    max_size=40,
).map("".join)


@FUZZ
@given(st.one_of(xmlish.map(str.encode), st.binary(max_size=200)))
@example(b"<?xml version='1.0' encoding='utf-16'?><propfind/>")
@example(b'<propertyupdate xmlns="DAV:"><set><prop/></set></propertyupdate>')
@example(b"\xff\xfe<\x00")
def test_any_body_parses_or_is_refused_with_a_4xx(body: bytes) -> None:
    for parse in (parse_propfind, parse_proppatch, parse_lockinfo):
        try:
            parse(body)
        except DavError as refused:
            assert 400 <= refused.status < 500
