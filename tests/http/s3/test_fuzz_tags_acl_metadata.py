"""The parsers of tags, ACLs and user metadata are total: any input gives a
value or their own 4xx S3Error, never anything else (hypothesis)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.http.s3 import acl, metadata_text, tagging
from app.http.s3.errors import S3Error
from app.http.s3.xml.writer import DEFAULT_OWNER, escape

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: A header value as Starlette hands it over: its bytes as Latin-1 text.
HEADER_TEXT = st.one_of(
    st.binary(max_size=120).map(lambda raw: raw.decode("latin-1")),
    st.text(max_size=60).map(lambda text: text.encode("utf-8", "replace").decode("latin-1")),
    st.lists(
        st.sampled_from(["=?", "?=", "UTF-8", "utf-8", "?B?", "?Q?", "x-bad", "SGk=", "=C3=A9"])
        | st.text(max_size=4),
        max_size=8,
    ).map("".join),
)
XML_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=140).map(escape)


def four_xx(exc: S3Error) -> None:
    assert 400 <= exc.status < 500 or exc.code == "NotImplemented"


@FUZZ
@given(HEADER_TEXT)
def test_tagging_header(value: str) -> None:
    try:
        tags = tagging.parse_header(value)
    except S3Error as exc:
        four_xx(exc)
        return
    assert tags is not None and len(tags) <= tagging.MAX_TAGS
    tagging.tagging_xml(tags).decode("utf-8")


@FUZZ
@given(
    st.one_of(
        st.binary(max_size=300),
        st.lists(st.tuples(XML_TEXT, XML_TEXT), max_size=12).map(
            lambda pairs: (
                "<Tagging><TagSet>"
                + "".join(f"<Tag><Key>{k}</Key><Value>{v}</Value></Tag>" for k, v in pairs)
                + "</TagSet></Tagging>"
            ).encode()
        ),
    )
)
def test_tagging_document(body: bytes) -> None:
    try:
        tags = tagging.parse_document(body)
    except S3Error as exc:
        four_xx(exc)
        return
    assert len(tags) <= tagging.MAX_TAGS


@FUZZ
@given(
    st.one_of(
        st.binary(max_size=300),
        st.builds(
            "<AccessControlPolicy><Owner><ID>{}</ID></Owner><AccessControlList><Grant>"
            '<Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:type="{}">'
            "<ID>{}</ID></Grantee><Permission>{}</Permission></Grant></AccessControlList>"
            "</AccessControlPolicy>".format,
            XML_TEXT,
            st.sampled_from(["CanonicalUser", "Group", "AmazonCustomerByEmail", ""]),
            st.sampled_from(["teleuploader", "other", ""]),
            st.sampled_from(["FULL_CONTROL", "READ", ""]),
        ).map(str.encode),
    ),
    st.dictionaries(st.sampled_from(["x-amz-acl", "x-amz-grant-read"]), HEADER_TEXT),
)
def test_acl_requests(body: bytes, headers: dict[str, str]) -> None:
    for check in (
        lambda: acl.check_policy(body, DEFAULT_OWNER),
        lambda: acl.check_request_headers(headers),
    ):
        try:
            check()
        except S3Error as exc:
            four_xx(exc)


@FUZZ
@given(HEADER_TEXT)
def test_metadata_values_go_back_out_as_ascii_headers(value: str) -> None:
    stored = metadata_text.from_header(value)
    stored.encode("utf-8")
    assert "\x00" not in stored or stored == value
    out = metadata_text.to_header(stored)
    assert out.isascii()
