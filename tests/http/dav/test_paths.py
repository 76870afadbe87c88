"""Where a WebDAV URL points, and the URLs the service hands back: decoded
once, UTF-8, no control character, no `.` or `..`; a Destination elsewhere
is a 502; any key, whatever it holds, comes back as a URL and XML that
parse."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.http.dav.errors import DavError
from app.http.dav.paths import file_key, folder_key, href, path_of, url_path
from app.http.dav.properties import Entry, Facts, response_xml
from app.http.dav.xml_bodies import ALLPROP
from app.http.dav.xml_out import ROOT_NAMESPACES


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        (b"/dav", ""),
        (b"/dav/", ""),
        (b"/dav/a%20b/c.txt", "a b/c.txt"),
        (b"/dav/res-%e2%82%ac", "res-€"),
        (b"/dav/photos/", "photos/"),
        (b"/dav/put%23test", "put#test"),
    ],
)
def test_paths_are_decoded_once(raw: bytes, path: str) -> None:
    assert path_of(raw) == path


@pytest.mark.parametrize(
    "raw", [b"/dav/%ff", b"/dav/a%00b", b"/dav/a/../b", b"/dav/./a", b"/dav/a//b", b"/dav/a%0a"]
)
def test_paths_no_file_can_have_are_a_400(raw: bytes) -> None:
    with pytest.raises(DavError) as refused:
        path_of(raw)
    assert refused.value.status == 400


def test_keys_and_urls() -> None:
    assert file_key("a/b.txt") == "named/a/b.txt"
    assert folder_key("a/b") == folder_key("a/b/") == "named/a/b/"
    assert folder_key("") == "named/"
    assert href("named/a b/€.txt") == "/dav/a%20b/%E2%82%AC.txt"
    assert href("named/a/") == "/dav/a/"


def test_a_destination_must_be_on_this_server_and_under_dav() -> None:
    assert url_path("http://h:1/dav/x/y", host="h:1", public_hosts=set()) == "x/y"
    assert url_path("/dav/x", host="h:1", public_hosts=set()) == "x"
    assert url_path("https://files.example/dav/x", host="h:1", public_hosts={"files.example"})
    for elsewhere in ("http://other/dav/x", "http://h:1/api/files/x"):
        with pytest.raises(DavError) as refused:
            url_path(elsewhere, host="h:1", public_hosts=set())
        assert refused.value.status == 502
    with pytest.raises(DavError) as refused:
        url_path("ftp://h:1/dav/x", host="h:1", public_hosts=set())
    assert refused.value.status == 400


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(min_size=1, max_size=30), st.text(max_size=30), st.booleans())
def test_any_key_gives_a_response_that_parses(name: str, content_type: str, folder: bool) -> None:
    """Keys made through the native API may hold anything but NUL, control
    characters XML cannot carry included."""
    key = "named/" + name + ("/" if folder else "")
    moment = datetime(2026, 12, 7, tzinfo=UTC)
    entry = Entry(
        key=key,
        is_folder=folder,
        size=3,
        etag='"abc"',
        md5="abc",
        content_type=content_type,
        created=moment,
        modified=moment,
    )
    xml = response_xml(entry, ALLPROP, Facts(now=moment))
    document = ET.fromstring(f"<D:multistatus {ROOT_NAMESPACES}>{xml}</D:multistatus>")
    found = document.findtext("{DAV:}response/{DAV:}href")
    assert found is not None and found.startswith("/dav/")
