"""S3 listings in the database (app.db.listing), on SQLite and Postgres,
checked against a plain-Python model of S3's rules."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.db.listing import (
    CommonPrefix,
    ListedObject,
    ListedUpload,
    ListingRepository,
    UnsupportedDelimiter,
)
from app.db.models import MultipartUpload
from app.db.repositories import MultipartRepository, ObjectRepository
from app.db.session import session_scope
from app.db.single_statements import single_statements_for
from tests.db.helpers import pending_object, spec

Sessions = async_sessionmaker[AsyncSession]


@pytest.fixture
async def repo(engine: AsyncEngine) -> AsyncIterator[ListingRepository]:
    """Listings as the service runs them: on the backend's single statements."""
    statements = single_statements_for(engine)
    try:
        yield ListingRepository(statements)
    finally:
        await statements.close()


# Byte order puts "B" before "a" and "a-c" before "a/"; keys with characters
# of two, three and four UTF-8 bytes; delimiters at odd places ("a//x",
# "/lead", a trailing one).
KEYS = [
    "/lead",
    "B",
    "a",
    "a-c",
    "a-c/d",
    "a/",
    "a//x",
    "a/1",
    "a/2/x",
    "a/b",
    "a/b-/y",
    "a/b/c",
    "a/b/c/d",
    "a/bc",
    "a0",
    "ab",
    "a\u00e9",
    "b",
    "b/1",
    "\u00fc",
    "\u00fc/x",
    "\u00fc/y/z",
    "\ufffd",
    "\U0001f600/x",
    "\U0001f600\U0001f600",
]
PREFIXES = ["", "a", "a/", "a/b", "\u00fc", "\U0001f600", "zz"]
DELIMITERS = [None, "/", "-", "/b", "\u00e9", "\U0001f600"]
AFTERS = [None, "", "B", "a", "a/", "a/b", "a/b/c", "a/b/z", "a0", "\u00fc/", "\uffff"]

Entry = tuple[str, str]  # ("key" | "prefix", name)


def model(keys: list[str], prefix: str, delimiter: str | None, after: str | None) -> list[Entry]:
    """Every entry S3 lists, in order: keys under `prefix`, rolled up at the
    first `delimiter` after it, each entry once, those after `after`."""
    entries: list[Entry] = []
    for key in sorted(keys, key=str.encode):
        if not key.startswith(prefix):
            continue
        cut = key.find(delimiter, len(prefix)) if delimiter else -1
        entry = ("prefix", key[: cut + len(delimiter)]) if delimiter and cut >= 0 else ("key", key)
        if (after is None or entry[1] > after) and entry not in entries:
            entries.append(entry)
    return entries


def named(entries: list[ListedObject | CommonPrefix]) -> list[Entry]:
    return [
        ("prefix", e.prefix) if isinstance(e, CommonPrefix) else ("key", e.key) for e in entries
    ]


async def put_keys(sessionmaker: Sessions, keys: list[str], bucket: str = "bucket") -> None:
    async with session_scope(sessionmaker) as session:
        repo = ObjectRepository(session)
        for key in keys:
            await repo.put(spec(key, inline_data=key.encode(), bucket=bucket))


async def test_objects_match_s3_rules_for_every_prefix_delimiter_and_marker(
    sessionmaker: Sessions, repo: ListingRepository
) -> None:
    assert sorted(KEYS, key=str.encode) == KEYS
    await put_keys(sessionmaker, list(reversed(KEYS)))
    await put_keys(sessionmaker, ["a/other-bucket", "a0/x"], bucket="other")
    for prefix, delimiter, after in itertools.product(PREFIXES, DELIMITERS, AFTERS):
        expected = model(KEYS, prefix, delimiter, after)
        case = (prefix, delimiter, after)
        listed = await repo.objects(
            "bucket", prefix=prefix, delimiter=delimiter, after=after, limit=1000
        )
        assert named(listed) == expected, case
        first_two = await repo.objects(
            "bucket", prefix=prefix, delimiter=delimiter, after=after, limit=2
        )
        assert named(first_two) == expected[:2], case


async def test_paging_with_the_last_entry_as_marker_lists_everything_once(
    sessionmaker: Sessions, repo: ListingRepository
) -> None:
    await put_keys(sessionmaker, KEYS)
    for prefix, delimiter, page_size in itertools.product(PREFIXES, DELIMITERS, [1, 3]):
        seen: list[Entry] = []
        after: str | None = None
        while page := named(
            await repo.objects(
                "bucket", prefix=prefix, delimiter=delimiter, after=after, limit=page_size
            )
        ):
            seen += page
            # The continuation token is the last key or common prefix.
            after = page[-1][1]
        assert seen == model(KEYS, prefix, delimiter, None), (prefix, delimiter, page_size)


async def test_objects_carry_the_listed_columns(
    sessionmaker: Sessions, repo: ListingRepository
) -> None:
    await put_keys(sessionmaker, ["d/x", "k"])
    async with session_scope(sessionmaker) as session:
        stored = await ObjectRepository(session).get("bucket", "k")
    plain = await repo.objects("bucket")
    rolled = await repo.objects("bucket", delimiter="/")
    assert stored is not None
    listed = ListedObject(
        "k", 1, stored.etag, stored.updated_at, stored.content_type, stored.public_id
    )
    assert plain[-1] == listed
    assert rolled == [CommonPrefix("d/"), listed]
    assert listed.modified.tzinfo is not None


async def test_a_delimiter_ending_in_the_last_code_point_is_refused(
    repo: ListingRepository,
) -> None:
    with pytest.raises(UnsupportedDelimiter, match="U\\+10FFFF"):
        await repo.objects("bucket", delimiter="/\U0010ffff")
    with pytest.raises(UnsupportedDelimiter):
        await repo.uploads("bucket", delimiter="\U0010ffff")
    assert await repo.objects("bucket", delimiter="\U0010ffff/") == []


# --- uploads -----------------------------------------------------------------------


async def new_upload(sessionmaker: Sessions, key: str, bucket: str = "bucket") -> MultipartUpload:
    async with session_scope(sessionmaker) as session:
        return await MultipartRepository(session).create(
            bucket=bucket, key=key, content_type="video/mp4", user_metadata={}
        )


async def test_uploads_by_prefix_and_markers_in_key_then_id_order(
    sessionmaker: Sessions, repo: ListingRepository
) -> None:
    keys = ["a/1", "a/1", "a/1", "a/2", "a0", "b", "B"]
    uploads = [await new_upload(sessionmaker, key) for key in keys]
    await new_upload(sessionmaker, "a/1", bucket="other")
    # S3 order: by key, byte order; then (here) by upload id.
    everything = sorted(((u.key, u.id) for u in uploads), key=lambda t: (t[0].encode(), t[1]))
    a1 = [upload_id for key, upload_id in everything if key == "a/1"]

    async def listed(**kwargs: object) -> list[tuple[str, str]]:
        entries = await repo.uploads("bucket", **kwargs)  # type: ignore[arg-type]
        return [(u.key, u.upload_id) for u in entries if isinstance(u, ListedUpload)]

    assert await listed() == everything
    assert [k for k, _ in await listed(prefix="a/")] == ["a/1", "a/1", "a/1", "a/2"]
    assert await listed(prefix="c") == []
    assert await listed(limit=0) == []
    # key_marker alone: keys after it.
    assert [k for k, _ in await listed(key_marker="a/1")] == ["a/2", "a0", "b"]
    # key_marker and upload_id_marker: the rest of that key, then later keys.
    expected_rest = [("a/1", a1[1]), ("a/1", a1[2]), ("a/2", uploads[3].id)]
    assert await listed(key_marker="a/1", upload_id_marker=a1[0], prefix="a/") == expected_rest
    # upload_id_marker without key_marker is ignored.
    assert await listed(upload_id_marker=a1[2]) == everything

    for delimiter in (None, "/"):
        pages: list[list[tuple[str, str]]] = []
        key_marker: str | None = None
        upload_id_marker: str | None = None
        while page := await listed(
            key_marker=key_marker,
            upload_id_marker=upload_id_marker,
            limit=2,
            delimiter=delimiter,
            prefix="a/",
        ):
            pages.append(page)
            key_marker, upload_id_marker = page[-1]
        under_a = [item for item in everything if item[0].startswith("a/")]
        assert [item for page in pages for item in page] == under_a
        assert [len(page) for page in pages] == [2, 2]


async def test_uploads_roll_up_at_the_delimiter_like_objects(
    sessionmaker: Sessions, repo: ListingRepository
) -> None:
    for key in KEYS:
        await new_upload(sessionmaker, key)
    await new_upload(sessionmaker, "a/b/c")  # a second upload of one key
    for prefix, delimiter, marker in itertools.product(PREFIXES, DELIMITERS, AFTERS):
        expected = model(KEYS, prefix, delimiter, marker)
        case = (prefix, delimiter, marker)
        entries = await repo.uploads(
            "bucket", prefix=prefix, delimiter=delimiter, key_marker=marker, limit=1000
        )
        listed = [
            ("prefix", e.prefix) if isinstance(e, CommonPrefix) else ("key", e.key) for e in entries
        ]
        # Each upload is an entry: the key with two uploads is listed twice.
        assert listed == [
            entry for entry in expected for _ in range(2 if entry == ("key", "a/b/c") else 1)
        ], case


async def test_a_pending_objects_upload_is_neither_listed_nor_a_common_prefix(
    sessionmaker: Sessions, repo: ListingRepository
) -> None:
    # Completed while a part was still spooled: the upload stays, hidden, as
    # the object's source until the flush (app.db.pending).
    await pending_object(sessionmaker, key="dir/blob")
    visible = await new_upload(sessionmaker, "other/part", bucket="b")

    listed = await repo.uploads("b", delimiter="/")

    assert [e.prefix for e in listed if isinstance(e, CommonPrefix)] == ["other/"]
    assert await repo.uploads("b") == [ListedUpload("other/part", visible.id, visible.created_at)]
