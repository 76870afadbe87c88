"""The If header (RFC 4918 section 10.4): what it parses to, when it holds,
which tokens it submits; and that no input makes it raise anything but its
own error (a 400)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from app.http.dav.if_header import (
    Condition,
    IfHeaderError,
    IfList,
    ResourceState,
    holds,
    lists_for,
    parse_if,
    submitted_tokens,
)

TOKEN = "urn:uuid:181d4fae-7d8c-11d0-a765-00a0c91e6bf2"
ETAG = '"abc123"'
LOCKED = ResourceState(etag=ETAG, tokens=frozenset({TOKEN}))
UNLOCKED = ResourceState(etag=ETAG, tokens=frozenset())


def test_an_untagged_list_of_a_token_and_an_etag() -> None:
    assert parse_if(f"(<{TOKEN}> [{ETAG}])") == [
        IfList(None, (Condition(False, token=TOKEN), Condition(False, etag=ETAG)))
    ]


def test_tagged_lists_belong_to_their_resource_until_the_next_tag() -> None:
    lists = parse_if(f'<http://h/dav/a> (<{TOKEN}>) (Not [W/"x"]) </dav/b/> ([{ETAG}])')
    assert [if_list.resource for if_list in lists] == [
        "http://h/dav/a",
        "http://h/dav/a",
        "/dav/b/",
    ]
    assert lists[1].conditions == (Condition(True, etag='W/"x"'),)


@pytest.mark.parametrize(
    "header",
    [
        "",
        "()",
        "(",
        f"(<{TOKEN}>",
        "<http://h/dav/a>",
        f"<http://h/dav/a> (<{TOKEN}>) (<{TOKEN}>) ([{ETAG}]) (x)",
        f"(<{TOKEN}>) <http://h/dav/a> (<{TOKEN}>)",
        "([abc])",
        "(Not)",
        "(<a b>)",
        "(<>)",
    ],
)
def test_malformed_headers_are_refused(header: str) -> None:
    with pytest.raises(IfHeaderError):
        parse_if(header)


# litmus's conditional PUTs (Julian Reschke's), against a resource holding
# the lock TOKEN with the entity tag ETAG.
@pytest.mark.parametrize(
    ("header", "state", "expected"),
    [
        (f"(<{TOKEN}> [{ETAG}])", LOCKED, True),
        (f"(<DAV:no-lock> [{ETAG}])", LOCKED, False),
        (f"(<{TOKEN}>) (Not <DAV:no-lock>)", LOCKED, True),
        (f"(<{TOKEN}x>) (Not <DAV:no-lock>)", LOCKED, True),
        (f'(<{TOKEN}> ["abc124"]) (Not <DAV:no-lock> ["abc124"])', LOCKED, False),
        (f"(<{TOKEN}> [{ETAG}]) (Not <DAV:no-lock> [{ETAG}])", LOCKED, True),
        ("(<DAV:no-lock>)", UNLOCKED, False),
        (f"(Not <{TOKEN}>)", UNLOCKED, True),
        (f"([W/{ETAG}])", UNLOCKED, True),
    ],
)
def test_a_list_holds_when_all_its_conditions_do(
    header: str, state: ResourceState, expected: bool
) -> None:
    lists = parse_if(header)
    applicable = lists_for(lists, "a", request_path="a", path_of=lambda url: None)
    assert holds(applicable, state) is expected


def test_every_state_token_is_submitted_negated_or_not() -> None:
    lists = parse_if(f"(<{TOKEN}>) (Not <DAV:no-lock> [{ETAG}])")
    assert submitted_tokens(lists) == {TOKEN, "DAV:no-lock"}


def test_tagged_lists_apply_to_the_resource_they_name_and_others_ignore_them() -> None:
    lists = parse_if("</dav/a.txt> (<DAV:no-lock>)")

    def path_of(url: str) -> str | None:
        return url.removeprefix("/dav/")

    for_a = lists_for(lists, "a.txt", request_path="b.txt", path_of=path_of)
    for_b = lists_for(lists, "b.txt", request_path="b.txt", path_of=path_of)
    assert not holds(for_a, UNLOCKED)
    assert holds(for_b, UNLOCKED), "no tag names b.txt: the header is ignored for it"


def test_a_folder_matches_its_tag_with_or_without_the_slash() -> None:
    lists = parse_if(f"</dav/coll/> (<{TOKEN}>)")
    found = lists_for(lists, "coll", request_path="x", path_of=lambda url: url[len("/dav/") :])
    assert found == lists


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.sampled_from(["(", ")", "<", ">", "[", "]", "Not", " ", '"', "W/", TOKEN, ETAG]),
            st.text(max_size=8),
        ),
        max_size=20,
    ).map("".join)
)
@example("(Not")
@example("(Not <")
@example("[")
@example('(["])')
def test_any_header_parses_or_is_refused_with_its_own_error(header: str) -> None:
    try:
        lists = parse_if(header)
    except IfHeaderError:
        return
    assert lists and all(if_list.conditions for if_list in lists)
    holds(lists_for(lists, "a", request_path="a", path_of=lambda url: None), LOCKED)
