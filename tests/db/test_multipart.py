from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.db.models import (
    Chunk,
    GcEntry,
    MultipartUpload,
    PartPiece,
    Piece,
    StoredObject,
    UploadPart,
)
from app.db.repositories import (
    ChunkRepository,
    ChunksMissing,
    InvalidPart,
    InvalidPartOrder,
    MultipartRepository,
    ObjectRepository,
    PieceSpec,
    UploadMissing,
    multipart_etag,
)
from app.db.session import session_scope
from tests.db.helpers import Database, LockWaits, add_chunks, count, spec, whole_chunks

Sessions = async_sessionmaker[AsyncSession]


def etag_of(data: bytes) -> str:
    return f'"{hashlib.md5(data).hexdigest()}"'


async def new_upload(
    sessionmaker: Sessions, key: str = "big/file.bin", bucket: str = "bucket"
) -> MultipartUpload:
    async with session_scope(sessionmaker) as session:
        return await MultipartRepository(session).create(
            bucket=bucket,
            key=key,
            content_type="video/mp4",
            user_metadata={"owner": "test"},
        )


async def put_part(
    sessionmaker: Sessions,
    upload_id: str,
    number: int,
    pieces: Sequence[PieceSpec],
    etag: str | None = None,
) -> UploadPart:
    async with session_scope(sessionmaker) as session:
        return await MultipartRepository(session).put_part(
            upload_id,
            number,
            size=sum(p.length for p in pieces),
            etag=etag or etag_of(b"part %d" % number),
            pieces=pieces,
        )


async def ledger(sessionmaker: Sessions) -> dict[int, str]:
    """message id -> reason of every GC ledger entry."""
    async with session_scope(sessionmaker) as session:
        return {e.message_id: e.reason for e in await session.scalars(select(GcEntry))}


async def chunk_ids(sessionmaker: Sessions) -> set[int]:
    async with session_scope(sessionmaker) as session:
        return set(await session.scalars(select(Chunk.id)))


async def object_pieces(sessionmaker: Sessions, key: str) -> list[tuple[int, int, int, int]]:
    """(start, chunk id, offset, length) of the object's pieces, in order."""
    async with session_scope(sessionmaker) as session:
        obj = await ObjectRepository(session).get("bucket", key)
        assert obj is not None
        pieces = await session.scalars(
            select(Piece).where(Piece.object_id == obj.id).order_by(Piece.seq)
        )
        return [(p.start, p.chunk_id, p.offset, p.length) for p in pieces]


# --- uploads ---------------------------------------------------------------------


async def test_create_and_get_checks_bucket_and_key(sessionmaker: Sessions) -> None:
    upload = await new_upload(sessionmaker)
    assert len(upload.id) == 43
    async with session_scope(sessionmaker) as session:
        repo = MultipartRepository(session)
        found = await repo.get(upload.id)
        assert found is not None
        assert (found.bucket, found.key, found.content_type) == (
            "bucket",
            "big/file.bin",
            "video/mp4",
        )
        assert found.user_metadata == {"owner": "test"}
        assert found.created_at.tzinfo is not None
        assert await repo.get(upload.id, bucket="bucket", key="big/file.bin") is not None
        assert await repo.get(upload.id, bucket="other") is None
        assert await repo.get(upload.id, key="other") is None
        assert await repo.get("no-such-upload") is None
    other = await new_upload(sessionmaker)
    assert other.id != upload.id


# --- the whole flow --------------------------------------------------------------


async def test_parts_out_of_order_then_complete_concatenates_them_in_order(
    sessionmaker: Sessions,
) -> None:
    c1a, c1b, c2, c3 = await add_chunks(sessionmaker, [100, 20, 50, 7])
    upload = await new_upload(sessionmaker)
    pieces = {1: whole_chunks([c1a, c1b]), 2: whole_chunks([c2]), 3: whole_chunks([c3])}
    etags = {n: etag_of(b"content of part %d" % n) for n in pieces}
    for number in (3, 1, 2):
        part = await put_part(sessionmaker, upload.id, number, pieces[number], etags[number])
        assert (part.part_number, part.etag) == (number, etags[number])

    async with session_scope(sessionmaker) as session:
        repo = MultipartRepository(session)
        first_page = await repo.list_parts(upload.id, limit=2)
        second_page = await repo.list_parts(upload.id, after=first_page[-1].part_number)
        assert await repo.list_parts(upload.id, after=3) == []
        assert await repo.list_parts(upload.id, limit=0) == []
    assert [(p.part_number, p.size, p.etag) for p in first_page] == [
        (1, 120, etags[1]),
        (2, 50, etags[2]),
    ]
    assert [(p.part_number, p.size) for p in second_page] == [(3, 7)]
    assert first_page[0].created_at.tzinfo is not None

    async with session_scope(sessionmaker) as session:
        created = await MultipartRepository(session).complete(
            upload.id,
            # Clients may send the ETags with or without quotes.
            [(1, etags[1]), (2, etags[2].strip('"')), (3, etags[3])],
            name="file.bin",
        )

    expected_etag = hashlib.md5(
        b"".join(bytes.fromhex(etags[n].strip('"')) for n in (1, 2, 3))
    ).hexdigest()
    assert created.etag == f'"{expected_etag}-3"'
    assert (created.bucket, created.key, created.name) == ("bucket", "big/file.bin", "file.bin")
    assert created.size == 177
    assert (created.md5, created.sha256, created.inline_data) == (None, None, None)
    assert created.content_type == "video/mp4"
    assert created.user_metadata == {"owner": "test"}
    assert await object_pieces(sessionmaker, "big/file.bin") == [
        (0, c1a.id, 0, 100),
        (100, c1b.id, 0, 20),
        (120, c2.id, 0, 50),
        (170, c3.id, 0, 7),
    ]
    # The upload and its parts are gone; every chunk is live and kept.
    async with session_scope(sessionmaker) as session:
        repo = MultipartRepository(session)
        assert await repo.get(upload.id) is None
        with pytest.raises(UploadMissing):
            await repo.list_parts(upload.id)
        for model in (MultipartUpload, UploadPart, PartPiece, GcEntry):
            assert await count(session, model) == 0
        assert set(await session.scalars(select(Chunk.state))) == {"live"}
    assert await chunk_ids(sessionmaker) == {c1a.id, c1b.id, c2.id, c3.id}


def test_multipart_etag_matches_s3() -> None:
    md5s = [hashlib.md5(b"a").hexdigest(), hashlib.md5(b"b").hexdigest()]
    expected = hashlib.md5(bytes.fromhex(md5s[0]) + bytes.fromhex(md5s[1])).hexdigest()
    assert multipart_etag([f'"{md5s[0]}"', md5s[1]]) == f'"{expected}-2"'
    # A synthetic ETag (not an MD5) counts as the MD5 of its text.
    synthetic = hashlib.md5(hashlib.md5(b"copy-1").digest()).hexdigest()
    assert multipart_etag(['"copy-1"']) == f'"{synthetic}-1"'


async def test_complete_replaces_an_existing_object_and_can_keep_its_public_id(
    sessionmaker: Sessions,
) -> None:
    old, new = await add_chunks(sessionmaker, [10, 20])
    async with session_scope(sessionmaker) as session:
        previous = await ObjectRepository(session).put(spec("big/file.bin", whole_chunks([old])))
    upload = await new_upload(sessionmaker)
    part = await put_part(sessionmaker, upload.id, 1, whole_chunks([new]))
    async with session_scope(sessionmaker) as session:
        created = await MultipartRepository(session).complete(
            upload.id, [(1, part.etag)], name="file.bin", keep_public_id=True
        )
    assert created.public_id == previous.public_id
    assert created.id != previous.id
    assert await ledger(sessionmaker) == {old.message_id: "overwritten"}
    assert await chunk_ids(sessionmaker) == {new.id}


async def test_reputting_a_part_number_replaces_it_and_ledgers_its_old_chunk(
    sessionmaker: Sessions,
) -> None:
    first, second = await add_chunks(sessionmaker, [10, 30])
    upload = await new_upload(sessionmaker)
    await put_part(sessionmaker, upload.id, 1, whole_chunks([first]), etag_of(b"first"))
    await put_part(sessionmaker, upload.id, 1, whole_chunks([second]), etag_of(b"second"))

    async with session_scope(sessionmaker) as session:
        (part,) = await MultipartRepository(session).list_parts(upload.id)
        pieces = (await session.scalars(select(PartPiece))).all()
    assert (part.part_number, part.size, part.etag) == (1, 30, etag_of(b"second"))
    assert [(p.chunk_id, p.length) for p in pieces] == [(second.id, 30)]
    assert await ledger(sessionmaker) == {first.message_id: "overwritten"}
    assert await chunk_ids(sessionmaker) == {second.id}

    # Putting the same range again (a repeated UploadPartCopy) releases nothing.
    await put_part(sessionmaker, upload.id, 1, whole_chunks([second]), etag_of(b"second"))
    assert await ledger(sessionmaker) == {first.message_id: "overwritten"}
    assert await chunk_ids(sessionmaker) == {second.id}


# --- refusals that change nothing ------------------------------------------------


async def _two_part_upload(sessionmaker: Sessions) -> tuple[MultipartUpload, list[UploadPart]]:
    a, b = await add_chunks(sessionmaker, [10, 20])
    upload = await new_upload(sessionmaker)
    parts = [
        await put_part(sessionmaker, upload.id, 1, whole_chunks([a])),
        await put_part(sessionmaker, upload.id, 2, whole_chunks([b])),
    ]
    return upload, parts


async def _assert_untouched(sessionmaker: Sessions, upload_id: str) -> None:
    async with session_scope(sessionmaker) as session:
        assert [
            p.part_number for p in await MultipartRepository(session).list_parts(upload_id)
        ] == [
            1,
            2,
        ]
        assert await count(session, PartPiece) == 2
        assert await count(session, StoredObject) == 0
        assert await count(session, GcEntry) == 0
        assert await count(session, Chunk) == 2


@pytest.mark.parametrize("order", [[2, 1], [1, 1], [1, 2, 2]])
async def test_complete_with_parts_out_of_order_is_refused(
    sessionmaker: Sessions, order: list[int]
) -> None:
    upload, parts = await _two_part_upload(sessionmaker)
    etags = {p.part_number: p.etag for p in parts}
    with pytest.raises(InvalidPartOrder):
        async with session_scope(sessionmaker) as session:
            await MultipartRepository(session).complete(
                upload.id, [(n, etags[n]) for n in order], name="x"
            )
    await _assert_untouched(sessionmaker, upload.id)


@pytest.mark.parametrize("wrong", ["unknown-part", "wrong-etag"])
async def test_complete_with_an_unknown_part_or_wrong_etag_is_refused(
    sessionmaker: Sessions, wrong: str
) -> None:
    upload, parts = await _two_part_upload(sessionmaker)
    listed = [(1, parts[0].etag), (2, parts[1].etag)]
    if wrong == "unknown-part":
        listed.append((5, parts[1].etag))
        bad = 5
    else:
        listed[1] = (2, etag_of(b"something else"))
        bad = 2
    with pytest.raises(InvalidPart) as raised:
        async with session_scope(sessionmaker) as session:
            await MultipartRepository(session).complete(upload.id, listed, name="x")
    assert raised.value.part_number == bad
    await _assert_untouched(sessionmaker, upload.id)


async def test_complete_with_no_parts_makes_an_empty_object(sessionmaker: Sessions) -> None:
    upload, _ = await _two_part_upload(sessionmaker)
    async with session_scope(sessionmaker) as session:
        stored = await MultipartRepository(session).complete(upload.id, [], name="x")
    assert stored.size == 0
    assert stored.etag == f'"{hashlib.md5(b"").hexdigest()}-0"'
    async with session_scope(sessionmaker) as session:
        assert await MultipartRepository(session).get(upload.id) is None


async def test_operations_on_a_missing_upload_or_another_key(sessionmaker: Sessions) -> None:
    upload, parts = await _two_part_upload(sessionmaker)
    (spare,) = await add_chunks(sessionmaker, [5])
    listed = [(p.part_number, p.etag) for p in parts]
    async with session_scope(sessionmaker) as session:
        repo = MultipartRepository(session)
        with pytest.raises(UploadMissing):
            await repo.complete("nope", listed, name="x")
        with pytest.raises(UploadMissing):
            await repo.complete(upload.id, listed, name="x", key="other")
        with pytest.raises(UploadMissing):
            await repo.put_part("nope", 1, size=5, etag='"x"', pieces=whole_chunks([spare]))
        with pytest.raises(UploadMissing):
            await repo.put_part(
                upload.id, 3, size=5, etag='"x"', pieces=whole_chunks([spare]), bucket="other"
            )
        with pytest.raises(UploadMissing):
            await repo.list_parts("nope")
        with pytest.raises(UploadMissing):
            await repo.list_parts(upload.id, key="other")
        assert await repo.abort("nope") is False
        assert await repo.abort(upload.id, bucket="other") is False
    async with session_scope(sessionmaker) as session:
        assert await count(session, PartPiece) == 2
        assert await count(session, GcEntry) == 0


@pytest.mark.parametrize(
    ("number", "size", "pieces"),
    [
        (0, 0, ()),
        (10_001, 0, ()),
        (1, 11, (PieceSpec(chunk_id=1, offset=0, length=10),)),
        (1, 0, (PieceSpec(chunk_id=1, offset=0, length=0),)),
        (1, -1, ()),
    ],
)
async def test_put_part_refuses_inconsistent_arguments(
    sessionmaker: Sessions, number: int, size: int, pieces: tuple[PieceSpec, ...]
) -> None:
    upload = await new_upload(sessionmaker)
    async with session_scope(sessionmaker) as session:
        with pytest.raises(ValueError):
            await MultipartRepository(session).put_part(
                upload.id, number, size=size, etag='"x"', pieces=pieces
            )


async def test_put_part_referencing_a_released_chunk_changes_nothing(
    sessionmaker: Sessions,
) -> None:
    kept, gone = await add_chunks(sessionmaker, [10, 10])
    upload = await new_upload(sessionmaker)
    await put_part(sessionmaker, upload.id, 1, whole_chunks([kept]), etag_of(b"kept"))
    async with session_scope(sessionmaker) as session:
        await ChunkRepository(session).release([gone.id], "failed_upload")
    with pytest.raises(ChunksMissing):
        await put_part(sessionmaker, upload.id, 1, whole_chunks([gone]))
    async with session_scope(sessionmaker) as session:
        (part,) = await MultipartRepository(session).list_parts(upload.id)
    assert part.etag == etag_of(b"kept")
    assert await chunk_ids(sessionmaker) == {kept.id}


# --- what the object gets --------------------------------------------------------


async def test_a_single_zero_byte_part_completes_into_an_empty_object(
    sessionmaker: Sessions,
) -> None:
    upload = await new_upload(sessionmaker)
    part = await put_part(sessionmaker, upload.id, 1, [], etag_of(b""))
    assert part.size == 0
    async with session_scope(sessionmaker) as session:
        created = await MultipartRepository(session).complete(
            upload.id, [(1, part.etag)], name="empty"
        )
    empty_md5 = hashlib.md5(b"").digest()
    assert created.etag == f'"{hashlib.md5(empty_md5).hexdigest()}-1"'
    assert created.size == 0
    assert created.inline_data is None
    assert await object_pieces(sessionmaker, "big/file.bin") == []


async def test_parts_left_out_of_complete_have_their_chunks_ledgered(
    sessionmaker: Sessions,
) -> None:
    one, two, three, shared = await add_chunks(sessionmaker, [10, 20, 30, 40])
    upload = await new_upload(sessionmaker)
    p1 = await put_part(sessionmaker, upload.id, 1, whole_chunks([one]))
    await put_part(sessionmaker, upload.id, 2, whole_chunks([two]))
    # Part 4 shares a chunk with part 3: left out, it must not take it along.
    p3 = await put_part(
        sessionmaker, upload.id, 3, [*whole_chunks([three]), PieceSpec(shared.id, 0, 15)]
    )
    await put_part(sessionmaker, upload.id, 4, [PieceSpec(shared.id, 15, 25)])

    async with session_scope(sessionmaker) as session:
        created = await MultipartRepository(session).complete(
            upload.id, [(1, p1.etag), (3, p3.etag)], name="x"
        )
    assert created.size == 55
    assert created.etag == multipart_etag([p1.etag, p3.etag])
    assert await ledger(sessionmaker) == {two.message_id: "aborted"}
    assert await chunk_ids(sessionmaker) == {one.id, three.id, shared.id}
    assert await object_pieces(sessionmaker, "big/file.bin") == [
        (0, one.id, 0, 10),
        (10, three.id, 0, 30),
        (40, shared.id, 0, 15),
    ]


async def test_copied_ranges_that_continue_each_other_become_one_piece(
    sessionmaker: Sessions,
) -> None:
    """UploadPartCopy of consecutive ranges of an object cuts its chunks at part boundaries."""
    a, b = await add_chunks(sessionmaker, [100, 50])
    async with session_scope(sessionmaker) as session:
        await ObjectRepository(session).put(spec("source", whole_chunks([a, b])))
    upload = await new_upload(sessionmaker)
    p1 = await put_part(sessionmaker, upload.id, 1, [PieceSpec(a.id, 0, 60)], '"copy-1"')
    p2 = await put_part(
        sessionmaker, upload.id, 2, [PieceSpec(a.id, 60, 40), PieceSpec(b.id, 0, 30)], '"copy-2"'
    )
    p3 = await put_part(sessionmaker, upload.id, 3, [PieceSpec(b.id, 30, 20)], '"copy-3"')
    async with session_scope(sessionmaker) as session:
        created = await MultipartRepository(session).complete(
            upload.id, [(1, p1.etag), (2, p2.etag), (3, p3.etag)], name="moved"
        )
    assert created.size == 150
    assert await object_pieces(sessionmaker, "big/file.bin") == [
        (0, a.id, 0, 100),
        (100, b.id, 0, 50),
    ]
    assert await ledger(sessionmaker) == {}


async def test_abort_ledgers_every_chunk_of_the_upload(sessionmaker: Sessions) -> None:
    one, two, three = await add_chunks(sessionmaker, [10, 20, 30])
    upload = await new_upload(sessionmaker)
    await put_part(sessionmaker, upload.id, 1, whole_chunks([one, two]))
    await put_part(sessionmaker, upload.id, 2, whole_chunks([three]))
    async with session_scope(sessionmaker) as session:
        assert await MultipartRepository(session).abort(upload.id) is True
    async with session_scope(sessionmaker) as session:
        assert await MultipartRepository(session).abort(upload.id) is False
        for model in (MultipartUpload, UploadPart, PartPiece, Chunk):
            assert await count(session, model) == 0
    assert await ledger(sessionmaker) == {c.message_id: "aborted" for c in (one, two, three)}


# --- reference counting across objects and parts ---------------------------------


@pytest.mark.parametrize("first_gone", ["object", "upload"])
async def test_chunk_shared_by_an_object_and_a_part_survives_either_alone(
    sessionmaker: Sessions, first_gone: str
) -> None:
    shared, own = await add_chunks(sessionmaker, [100, 10])
    async with session_scope(sessionmaker) as session:
        await ObjectRepository(session).put(spec("source", whole_chunks([shared])))
    upload = await new_upload(sessionmaker)
    # UploadPartCopy of bytes 10..60 of the object, plus a freshly uploaded chunk.
    await put_part(sessionmaker, upload.id, 1, [PieceSpec(shared.id, 10, 50), *whole_chunks([own])])

    # Releasing it directly keeps it too: both kinds of reference count.
    async with session_scope(sessionmaker) as session:
        assert await ChunkRepository(session).release([shared.id, own.id], "aborted") == 0

    async def drop(which: str) -> None:
        async with session_scope(sessionmaker) as session:
            if which == "object":
                assert await ObjectRepository(session).delete("bucket", "source")
            else:
                assert await MultipartRepository(session).abort(upload.id)

    second_gone = "upload" if first_gone == "object" else "object"
    await drop(first_gone)
    assert shared.id in await chunk_ids(sessionmaker)
    assert shared.message_id not in await ledger(sessionmaker)
    await drop(second_gone)
    assert await chunk_ids(sessionmaker) == set()
    assert await ledger(sessionmaker) == {
        shared.message_id: "deleted" if second_gone == "object" else "aborted",
        own.message_id: "aborted",
    }


async def test_collect_pending_orphans_leaves_chunks_that_parts_reference(
    sessionmaker: Sessions,
) -> None:
    startup = datetime.now(UTC) + timedelta(hours=1)
    in_part, orphan = await add_chunks(sessionmaker, [10, 20])
    upload = await new_upload(sessionmaker)
    await put_part(sessionmaker, upload.id, 1, whole_chunks([in_part]))
    # A part's chunks are live, but only the references may decide.
    async with session_scope(sessionmaker) as session:
        await session.execute(update(Chunk).values(state="pending"))
    async with session_scope(sessionmaker) as session:
        assert await ChunkRepository(session).collect_pending_orphans(startup) == 1
    assert await chunk_ids(sessionmaker) == {in_part.id}
    assert await ledger(sessionmaker) == {orphan.message_id: "orphaned"}


# --- concurrency -----------------------------------------------------------------


async def test_concurrent_puts_of_different_parts_all_succeed(sessionmaker: Sessions) -> None:
    parts = 12
    chunks = await add_chunks(sessionmaker, [10 + n for n in range(parts)])
    upload = await new_upload(sessionmaker)
    go = asyncio.Event()

    async def writer(number: int) -> None:
        await go.wait()
        async with session_scope(sessionmaker) as session:
            await MultipartRepository(session).put_part(
                upload.id,
                number,
                size=chunks[number - 1].size,
                etag=etag_of(b"%d" % number),
                pieces=whole_chunks([chunks[number - 1]]),
            )
            await asyncio.sleep(0.02)  # the rest of the request, locks held

    tasks = [asyncio.create_task(writer(n)) for n in range(1, parts + 1)]
    go.set()
    await asyncio.gather(*tasks)
    async with session_scope(sessionmaker) as session:
        listed = await MultipartRepository(session).list_parts(upload.id)
    assert [(p.part_number, p.size) for p in listed] == [(n, 9 + n) for n in range(1, parts + 1)]


async def test_puts_of_different_parts_do_not_wait_for_each_other_on_postgres(
    sessionmaker: Sessions, database: Database
) -> None:
    if database.backend == "sqlite":
        pytest.skip("SQLite has one write lock: writers queue")
    first, second = await add_chunks(sessionmaker, [10, 20])
    upload = await new_upload(sessionmaker)
    async with sessionmaker() as holding:
        await MultipartRepository(holding).put_part(
            upload.id, 1, size=10, etag='"a"', pieces=whole_chunks([first])
        )
        # Part 2 goes through while part 1's transaction is still open.
        await asyncio.wait_for(put_part(sessionmaker, upload.id, 2, whole_chunks([second])), 5)
        await holding.commit()
    async with session_scope(sessionmaker) as session:
        assert len(await MultipartRepository(session).list_parts(upload.id)) == 2


async def test_concurrent_puts_of_one_part_number_leave_one_part_and_no_leaked_chunk(
    sessionmaker: Sessions,
) -> None:
    writers = 8
    uploads = [await add_chunks(sessionmaker, [10, 20]) for _ in range(writers)]
    upload = await new_upload(sessionmaker)
    go = asyncio.Event()

    async def writer(n: int) -> None:
        await go.wait()
        await put_part(sessionmaker, upload.id, 1, whole_chunks(uploads[n]), f'"{n:032x}"')

    tasks = [asyncio.create_task(writer(n)) for n in range(writers)]
    go.set()
    await asyncio.gather(*tasks)

    async with session_scope(sessionmaker) as session:
        (part,) = await MultipartRepository(session).list_parts(upload.id)
        pieces = (await session.scalars(select(PartPiece).order_by(PartPiece.seq))).all()
    winner = int(part.etag.strip('"'), 16)
    assert [p.chunk_id for p in pieces] == [c.id for c in uploads[winner]]
    assert part.size == 30
    assert await chunk_ids(sessionmaker) == {c.id for c in uploads[winner]}
    losers = [c for n, chunks in enumerate(uploads) if n != winner for c in chunks]
    assert await ledger(sessionmaker) == {c.message_id: "overwritten" for c in losers}


async def test_complete_waits_for_a_part_being_written_and_includes_it(
    sessionmaker: Sessions, engine: AsyncEngine
) -> None:
    one, two = await add_chunks(sessionmaker, [10, 20])
    upload = await new_upload(sessionmaker)
    p1 = await put_part(sessionmaker, upload.id, 1, whole_chunks([one]))
    waits = LockWaits(engine)
    async with sessionmaker() as writing:
        p2 = await MultipartRepository(writing).put_part(
            upload.id, 2, size=20, etag='"late"', pieces=whole_chunks([two])
        )

        async def complete() -> StoredObject:
            async with session_scope(sessionmaker) as session:
                return await MultipartRepository(session).complete(
                    upload.id, [(1, p1.etag), (2, p2.etag)], name="x"
                )

        attempt = asyncio.create_task(complete())
        # Blocked on the upload row (Postgres) or the database (SQLite).
        await waits.wait()
        assert not attempt.done()
        await writing.commit()

    created = await attempt
    assert created.size == 30
    assert await ledger(sessionmaker) == {}


@pytest.mark.parametrize(
    "contenders",
    [("complete", "abort"), ("abort", "complete"), ("complete", "complete")],
    ids="-then-".join,
)
async def test_concurrent_complete_and_abort_of_one_upload_exactly_one_wins(
    sessionmaker: Sessions, engine: AsyncEngine, contenders: tuple[str, str]
) -> None:
    one, two = await add_chunks(sessionmaker, [10, 20])
    upload = await new_upload(sessionmaker)
    p1 = await put_part(sessionmaker, upload.id, 1, whole_chunks([one]))
    p2 = await put_part(sessionmaker, upload.id, 2, whole_chunks([two]))
    go = asyncio.Event()
    waits = LockWaits(engine)
    holders: list[str] = []

    async def hold_until_the_rival_waits(name: str) -> None:
        """The first to get through keeps its transaction open until the other
        one waits for its lock: the two really overlap."""
        holders.append(name)
        if len(holders) == 1:
            await waits.wait()

    async def complete() -> str:
        await go.wait()
        try:
            async with session_scope(sessionmaker) as session:
                await MultipartRepository(session).complete(
                    upload.id, [(1, p1.etag), (2, p2.etag)], name="x"
                )
                await hold_until_the_rival_waits("complete")
        except UploadMissing:
            return "lost"
        return "completed"

    async def abort() -> str:
        await go.wait()
        async with session_scope(sessionmaker) as session:
            aborted = await MultipartRepository(session).abort(upload.id)
            await hold_until_the_rival_waits("abort")
        return "aborted" if aborted else "lost"

    runs = {"complete": complete, "abort": abort}
    tasks = [asyncio.create_task(runs[name]()) for name in contenders]
    go.set()
    results = await asyncio.gather(*tasks)
    assert sorted(results).count("lost") == 1, results
    winner = next(r for r in results if r != "lost")

    async with session_scope(sessionmaker) as session:
        for model in (MultipartUpload, UploadPart, PartPiece):
            assert await count(session, model) == 0
        objects = await count(session, StoredObject)
    if winner == "completed":
        assert objects == 1
        assert await ledger(sessionmaker) == {}
        assert await chunk_ids(sessionmaker) == {one.id, two.id}
    else:
        assert objects == 0
        assert await ledger(sessionmaker) == {one.message_id: "aborted", two.message_id: "aborted"}
        assert await chunk_ids(sessionmaker) == set()
