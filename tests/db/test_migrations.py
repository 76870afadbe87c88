from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import TextClause, bindparam, inspect, select, text, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db import trash
from app.db.api_keys import hash_key
from app.db.chat_fill import ChatFillRepository
from app.db.engine import create_engine, create_sessionmaker
from app.db.migrations import (
    MIGRATIONS_DIR,
    SchemaOutOfDate,
    alembic_config,
    check_schema,
    current_revisions,
    downgrade,
    head_revision,
    schema_is_current,
    script_head,
    upgrade,
)
from app.db.models import Base, Chunk, GcEntry, UploadPart
from app.db.object_rows import new_public_id, row_values
from app.db.repositories import (
    ApiKeyRepository,
    MultipartRepository,
    ObjectRepository,
    PieceSpec,
)
from app.db.session import session_scope
from app.db.single_statements import single_statements_for
from app.db.spool import SpoolRepository
from app.db.types import UtcDateTime
from tests.db.helpers import Database, add_chunks, spec, whole_chunks

TELEUPLOADER = str(Path(sys.executable).parent / "teleuploader")


def test_migration_scripts_are_found_next_to_the_package() -> None:
    assert (MIGRATIONS_DIR / "env.py").is_file()
    assert head_revision() == "0029"


def test_the_head_the_schema_check_reads_is_alembics() -> None:
    """check_schema reads the scripts without Alembic (serve does not import
    it); the revision it asks for is the one `migrate` brings a database to."""
    alembic_head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head_revision() == alembic_head


def _script(versions: Path, revision: str, down: str | tuple[str, ...] | None) -> None:
    """A revision script as Alembic writes them (script.py.mako)."""
    (versions / f"{revision}_step.py").write_text(
        f'''"""Step {revision}."""

from collections.abc import Sequence

revision: str = {revision!r}
down_revision: str | Sequence[str] | None = {down!r}
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
'''
    )


def _alembic_head(directory: Path) -> str | None:
    head: str | None = ScriptDirectory(str(directory)).get_current_head()
    return head


def test_a_merged_history_has_the_head_alembic_finds(tmp_path: Path) -> None:
    versions = tmp_path / "versions"
    versions.mkdir()
    # Two branches from 0001, merged by 0004, then one more step.
    for revision, down in [
        ("0001", None),
        ("0002", "0001"),
        ("0003", "0001"),
        ("0004", ("0002", "0003")),
        ("0005", "0004"),
    ]:
        _script(versions, revision, down)
    (versions / "__init__.py").write_text("")

    assert script_head(versions) == _alembic_head(tmp_path) == "0005"


def test_two_unmerged_heads_are_refused_as_alembic_refuses_them(tmp_path: Path) -> None:
    versions = tmp_path / "versions"
    versions.mkdir()
    for revision, down in [("0001", None), ("0002", "0001"), ("0003", "0001")]:
        _script(versions, revision, down)

    with pytest.raises(CommandError):
        _alembic_head(tmp_path)
    with pytest.raises(RuntimeError, match=r"2 heads \(0002, 0003\): merge them"):
        script_head(versions)


async def test_the_recorded_revision_is_read_as_alembic_records_it(
    empty_database: Database,
) -> None:
    """Never migrated (no table), at head, and downgraded to base (an empty table)."""
    engine = create_engine(empty_database.url)
    try:
        assert await current_revisions(engine) == ()
        await asyncio.to_thread(upgrade, empty_database.migration_url)
        assert await current_revisions(engine) == (head_revision(),)
        await asyncio.to_thread(downgrade, empty_database.migration_url, "0013")
        assert await current_revisions(engine) == ("0013",)
        await asyncio.to_thread(downgrade, empty_database.migration_url)
        assert await current_revisions(engine) == ()
        assert await _tables(engine) == {"alembic_version"}
    finally:
        await engine.dispose()


async def test_empty_database_fails_check_then_passes_after_upgrade(
    empty_database: Database,
) -> None:
    engine = create_engine(empty_database.url)
    try:
        assert not await schema_is_current(engine)
        with pytest.raises(SchemaOutOfDate) as raised:
            await check_schema(engine)
        assert str(raised.value) == (
            "database schema is at nothing (no tables), code needs 0029: run `teleuploader migrate`"
        )

        await asyncio.to_thread(upgrade, empty_database.migration_url)

        assert await schema_is_current(engine)
        await check_schema(engine)
    finally:
        await engine.dispose()


def test_replicas_migrating_at_once_queue_and_all_succeed(
    empty_database: Database, tmp_path: Path
) -> None:
    """Three `teleuploader migrate` started together on an empty database (as
    replicas of the container image do at start): one migrates while the
    others wait for its lock, then find the schema current. Without the lock
    two created the first table at once and one failed."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "DATABASE_URL": empty_database.migration_url,
        **{name: os.environ[name] for name in ("PYTHONPYCACHEPREFIX",) if name in os.environ},
    }
    migrations = [
        subprocess.Popen(
            [TELEUPLOADER, "migrate"],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [proc.communicate(timeout=120)[0] for proc in migrations]
    assert [proc.returncode for proc in migrations] == [0, 0, 0], outputs

    async def recorded() -> tuple[str, ...]:
        engine = create_engine(empty_database.url)
        try:
            return await current_revisions(engine)
        finally:
            await engine.dispose()

    assert asyncio.run(recorded()) == (head_revision(),)


async def test_downgrade_removes_everything_and_upgrade_restores_it(
    empty_database: Database,
) -> None:
    await asyncio.to_thread(upgrade, empty_database.migration_url)
    await asyncio.to_thread(downgrade, empty_database.migration_url)
    engine = create_engine(empty_database.url)
    try:
        tables = await _tables(engine)
        assert tables <= {"alembic_version"}
        with pytest.raises(SchemaOutOfDate):
            await check_schema(engine)
        await asyncio.to_thread(upgrade, empty_database.migration_url)
        assert await _tables(engine) == {*Base.metadata.tables, "alembic_version"}
    finally:
        await engine.dispose()


async def test_no_downgrade_below_blake3_digests_once_a_chunk_has_them(
    empty_database: Database,
) -> None:
    """The previous release checks every block with SHA-256: a BLAKE3 chunk
    would be unreadable under it, so the downgrade refuses while one exists,
    and goes through once none does."""
    await asyncio.to_thread(upgrade, empty_database.migration_url)
    # The revision that brought the digests, whatever came after it.
    await asyncio.to_thread(downgrade, empty_database.migration_url, "0022")
    engine = create_engine(empty_database.url)
    try:
        sessionmaker = create_sessionmaker(engine)
        (chunk,) = await add_chunks(sessionmaker, [100])
        async with session_scope(sessionmaker) as session:
            await session.execute(
                update(Chunk).where(Chunk.id == chunk.id).values(block_digest="blake3")
            )
        with pytest.raises(RuntimeError, match="1 chunks have block digests"):
            await asyncio.to_thread(downgrade, empty_database.migration_url, "0021")
        # Not below 0022: the revisions above it may have gone down first
        # (SQLite), or the whole downgrade was undone (Postgres).
        (revision,) = await current_revisions(engine)
        assert revision >= "0022"

        async with session_scope(sessionmaker) as session:
            await session.execute(update(Chunk).values(block_digest=None))
        await asyncio.to_thread(downgrade, empty_database.migration_url, "0021")
        assert await current_revisions(engine) == ("0021",)
    finally:
        await engine.dispose()


async def test_downgrade_below_multipart_ledgers_the_chunks_only_uploads_used(
    empty_database: Database,
) -> None:
    """Without part_pieces nothing would reference them, and nothing would delete them."""
    await asyncio.to_thread(upgrade, empty_database.migration_url)
    engine = create_engine(empty_database.url)
    try:
        sessionmaker = create_sessionmaker(engine)
        shared, in_part, in_object, pending = await add_chunks(sessionmaker, [100, 10, 20, 30])
        async with session_scope(sessionmaker) as session:
            await ObjectRepository(session).put(spec("k", whole_chunks([shared, in_object])))
            multipart = MultipartRepository(session)
            upload = await multipart.create(
                bucket="bucket", key="big", content_type="text/plain", user_metadata={}
            )
            await multipart.put_part(
                upload.id,
                1,
                size=60,
                etag='"x"',
                pieces=[PieceSpec(shared.id, 50, 50), *whole_chunks([in_part])],
            )
        await engine.dispose()

        await asyncio.to_thread(downgrade, empty_database.migration_url, "0001")

        async with session_scope(sessionmaker) as session:
            remaining = set(await session.scalars(select(Chunk.id)))
            # The columns of revision 0001's ledger.
            (entry,) = (
                await session.execute(
                    select(
                        GcEntry.message_id,
                        GcEntry.reason,
                        GcEntry.attempts,
                        GcEntry.enqueued_at,
                        GcEntry.next_attempt_at,
                    )
                )
            ).all()
        assert remaining == {shared.id, in_object.id, pending.id}
        assert (entry.message_id, entry.reason, entry.attempts) == (
            in_part.message_id,
            "aborted",
            0,
        )
        assert abs(entry.enqueued_at - datetime.now(UTC)) < timedelta(minutes=1)
        assert entry.next_attempt_at == entry.enqueued_at
        await engine.dispose()
        await asyncio.to_thread(upgrade, empty_database.migration_url)
        assert await schema_is_current(engine)
    finally:
        await engine.dispose()


async def test_downgrade_below_the_trash_deletes_what_it_held_and_ledgers_its_own_chunks(
    empty_database: Database,
) -> None:
    """A trashed object's row would hold its chunks forever under a bucket
    nothing reads: it goes, and the chunks only it used go to the ledger."""
    await asyncio.to_thread(upgrade, empty_database.migration_url)
    engine = create_engine(empty_database.url)
    try:
        sessionmaker = create_sessionmaker(engine)
        trash.configure(sessionmaker, 3600)
        shared, alone = await add_chunks(sessionmaker, [100, 50])
        async with session_scope(sessionmaker) as session:
            repo = ObjectRepository(session)
            await repo.put(spec("a", whole_chunks([shared, alone]), bucket="_native"))
            await repo.put(spec("b", whole_chunks([shared]), bucket="_native"))
            await repo.delete("_native", "a")
        await engine.dispose()

        await asyncio.to_thread(downgrade, empty_database.migration_url, "0016")

        async with session_scope(sessionmaker) as session:
            keys = set(await session.scalars(text("SELECT key FROM objects")))
            remaining = set(await session.scalars(select(Chunk.id)))
            ledger = [
                tuple(e) for e in await session.execute(select(GcEntry.message_id, GcEntry.reason))
            ]
        assert keys == {"b"}
        assert remaining == {shared.id}
        assert ledger == [(alone.message_id, "deleted")]
        await engine.dispose()
        await asyncio.to_thread(upgrade, empty_database.migration_url)
        assert await schema_is_current(engine)
    finally:
        await engine.dispose()


async def test_downgrade_below_the_spool_drops_the_parts_it_held(
    empty_database: Database,
) -> None:
    """A spooled part has no bytes in Telegram: without its spool row it would
    be an empty shell, so it goes and Complete asks the client for it again."""
    await asyncio.to_thread(upgrade, empty_database.migration_url)
    engine = create_engine(empty_database.url)
    try:
        sessionmaker = create_sessionmaker(engine)
        (chunk,) = await add_chunks(sessionmaker, [10])
        async with session_scope(sessionmaker) as session:
            multipart = MultipartRepository(session)
            upload = await multipart.create(
                bucket="bucket", key="big", content_type="text/plain", user_metadata={}
            )
            await multipart.put_part(
                upload.id, 1, size=10, etag='"x"', pieces=whole_chunks([chunk])
            )
            await SpoolRepository(session).put(
                upload.id,
                2,
                size=5,
                etag='"y"',
                path="i/p.part",
                owner="i",
                bucket="bucket",
                key="big",
            )
        await engine.dispose()

        await asyncio.to_thread(downgrade, empty_database.migration_url, "0002")

        async with session_scope(sessionmaker) as session:
            parts = (await session.execute(select(UploadPart.part_number))).scalars().all()
        assert parts == [1]
        await engine.dispose()
        await asyncio.to_thread(upgrade, empty_database.migration_url)
        assert await schema_is_current(engine)
    finally:
        await engine.dispose()


async def test_keys_from_before_scopes_stay_usable_as_admin_keys(
    empty_database: Database,
) -> None:
    """0005: every key that existed could do everything, and still can; the
    objects it uploaded have no owner (only admin keys may change them)."""
    await asyncio.to_thread(upgrade, empty_database.migration_url, "0003")
    engine = create_engine(empty_database.url)
    try:
        plaintext = "tu_" + "k" * 43
        # As 0003's code wrote them: the models have moved on.
        async with engine.begin() as connection:
            await connection.execute(
                _at_now(
                    "INSERT INTO api_keys (name, prefix, key_hash, created_at) "
                    "VALUES ('old', 'tu_kkkkk', :hash, :now)"
                ),
                {"hash": hash_key(plaintext)},
            )
            await connection.execute(
                _at_now(
                    "INSERT INTO objects (bucket, key, public_id, name, content_type, size, "
                    "etag, user_metadata, created_at, updated_at) VALUES ('bucket', 'old-file', "
                    "'pid', 'old-file', 'text/plain', 0, '\"e\"', '{}', :now, :now)"
                )
            )
        sessionmaker = create_sessionmaker(engine)
        await engine.dispose()

        await asyncio.to_thread(upgrade, empty_database.migration_url)

        async with session_scope(sessionmaker) as session:
            key = await ApiKeyRepository(session).verify(plaintext)
            old_file = await ObjectRepository(session).get("bucket", "old-file")
        assert key is not None and key.name == "old" and key.scope == "admin"
        assert key.allows("admin")
        assert old_file is not None and old_file.owner_key_id is None
        # No default was left behind: a key must be given its scope.
        with pytest.raises(IntegrityError):
            async with engine.begin() as connection:
                await connection.execute(
                    _at_now(
                        "INSERT INTO api_keys (name, prefix, key_hash, created_at) "
                        "VALUES ('new', 'tu_nnnnn', :hash, :now)"
                    ),
                    {"hash": "0" * 64},
                )
        await engine.dispose()

        await asyncio.to_thread(downgrade, empty_database.migration_url, "0003")
        async with engine.connect() as connection:
            columns = await connection.run_sync(
                lambda c: {
                    table: {column["name"] for column in inspect(c).get_columns(table)}
                    for table in ("api_keys", "objects")
                }
            )
        assert "scope" not in columns["api_keys"] and "owner_key_id" not in columns["objects"]
        await engine.dispose()
        await asyncio.to_thread(upgrade, empty_database.migration_url)
        assert await schema_is_current(engine)
    finally:
        await engine.dispose()


async def test_key_prefixes_written_before_0014_lose_their_secret_characters(
    empty_database: Database,
) -> None:
    """0014: a key's `prefix` held its first 8 characters, 5 of them secret;
    now only the fixed `tu_` (nothing for a key of another form), and the keys
    still verify."""
    await asyncio.to_thread(upgrade, empty_database.migration_url, "0013")
    engine = create_engine(empty_database.url)
    try:
        plaintext = "tu_" + "s" * 43
        async with engine.begin() as connection:
            for name, prefix, digest in (
                ("new-form", "tu_sssss", hash_key(plaintext)),
                ("other-form", "abcdefgh", "0" * 64),
            ):
                await connection.execute(
                    _at_now(
                        "INSERT INTO api_keys (name, prefix, key_hash, scope, created_at) "
                        "VALUES (:name, :prefix, :hash, 'write', :now)"
                    ),
                    {"name": name, "prefix": prefix, "hash": digest},
                )
        await engine.dispose()

        await asyncio.to_thread(upgrade, empty_database.migration_url)

        async with engine.connect() as connection:
            prefixes = dict(
                (await connection.execute(text("SELECT name, prefix FROM api_keys"))).all()
            )
        assert prefixes == {"new-form": "tu_", "other-form": ""}
        async with session_scope(create_sessionmaker(engine)) as session:
            key = await ApiKeyRepository(session).verify(plaintext)
        assert key is not None and key.name == "new-form"
    finally:
        await engine.dispose()


async def test_absent_tags_and_parts_are_sql_null_also_for_rows_written_before_0013(
    empty_database: Database,
) -> None:
    """Up to 0012 an object without tags or parts stored JSON null, which an
    IS NULL query does not find; 0013 turns those into SQL NULL, and what is
    written from then on (a small PUT's single insert, the ORM's path, a
    multipart upload) is SQL NULL too. Tags that exist are left alone."""
    await asyncio.to_thread(upgrade, empty_database.migration_url, "0012")
    engine = create_engine(empty_database.url)
    try:
        # As 0012's code wrote them (JSON literals: typed JSONB on Postgres).
        async with engine.begin() as connection:
            for key, tags in (("old-plain", "'null'"), ("old-tagged", '\'{"a": "1"}\'')):
                await connection.execute(
                    _at_now(
                        "INSERT INTO objects (bucket, key, public_id, name, content_type, "
                        "size, etag, user_metadata, tags, parts, created_at, updated_at) "
                        "VALUES ('b', :key, :key, :key, 'text/plain', 0, '\"e\"', '{}', "
                        f"{tags}, 'null', :now, :now)"
                    ).bindparams(key=key)
                )
        await engine.dispose()
        await asyncio.to_thread(upgrade, empty_database.migration_url)

        sessionmaker = create_sessionmaker(engine)
        statements = single_statements_for(engine)
        try:
            now = datetime.now(UTC)
            inserted = await statements.insert_object_unless_exists(
                row_values(spec("new-fast", bucket="b"), new_public_id(), now, now)
            )
            assert inserted is not None
        finally:
            await statements.close()
        async with session_scope(sessionmaker) as session:
            await ObjectRepository(session).put(spec("new-orm", bucket="b"))
            await MultipartRepository(session).create(
                bucket="b", key="upload", content_type="text/plain", user_metadata={}
            )

        async with engine.connect() as connection:
            untagged = set(
                (await connection.execute(text("SELECT key FROM objects WHERE tags IS NULL")))
                .scalars()
                .all()
            )
            without_parts = set(
                (await connection.execute(text("SELECT key FROM objects WHERE parts IS NULL")))
                .scalars()
                .all()
            )
            uploads = (
                await connection.execute(
                    text("SELECT count(*) FROM multipart_uploads WHERE tags IS NULL")
                )
            ).scalar_one()
        assert untagged == {"old-plain", "new-fast", "new-orm"}
        assert without_parts == {"old-plain", "old-tagged", "new-fast", "new-orm"}
        assert uploads == 1
        async with session_scope(sessionmaker) as session:
            tagged = await ObjectRepository(session).get("b", "old-tagged")
        assert tagged is not None and tagged.tags == {"a": "1"}
    finally:
        await engine.dispose()


async def test_migrated_schema_matches_the_models(engine: AsyncEngine) -> None:
    def differences(connection: Connection) -> list[object]:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return list(compare_metadata(context, Base.metadata))

    async with engine.connect() as connection:
        assert await connection.run_sync(differences) == []


def _at_now(sql: str) -> TextClause:
    """`sql` with :now bound to the current time, as the models store it."""
    return text(sql).bindparams(bindparam("now", datetime.now(UTC), type_=UtcDateTime()))


async def _tables(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as connection:
        return set(await connection.run_sync(lambda c: inspect(c).get_table_names()))


async def test_the_chats_fill_starts_from_the_message_ids_the_database_knows(
    empty_database: Database,
) -> None:
    """0028: a deployment upgraded with chats already well filled starts with
    their counts (CHAT_MESSAGE_LIMIT), not at zero."""
    await asyncio.to_thread(upgrade, empty_database.migration_url, "0022")
    engine = create_engine(empty_database.url)
    try:
        async with engine.begin() as connection:
            for statement in (
                "INSERT INTO chunks (id, size, sha256, state, created_at, copies_ok) "
                "VALUES (1, 10, '', 'live', CURRENT_TIMESTAMP, 1)",
                "INSERT INTO chunk_copies (chunk_id, bot_id, file_id, file_unique_id, chat_id, "
                "message_id, state, created_at) VALUES "
                "(1, 7, 'f', 'u', -1001, 480, 'ok', CURRENT_TIMESTAMP), "
                "(1, 7, 'f', 'u', -1002, 12, 'ok', CURRENT_TIMESTAMP)",
                "INSERT INTO snapshot_messages (taken_at, kind, bot_id, chat_id, message_id, "
                "file_unique_id) VALUES (CURRENT_TIMESTAMP, 'manifest', 7, -1001, 502, 'm')",
                "INSERT INTO gc_ledger (bot_id, chat_id, message_id, file_unique_id, reason, "
                "enqueued_at, attempts, next_attempt_at) VALUES "
                "(0, -1002, 30, '', 'orphaned', CURRENT_TIMESTAMP, 0, CURRENT_TIMESTAMP)",
            ):
                await connection.execute(text(statement))
        await engine.dispose()

        await asyncio.to_thread(upgrade, empty_database.migration_url)

        async with session_scope(create_sessionmaker(engine)) as session:
            assert await ChatFillRepository(session).all() == {-1001: 502, -1002: 30}
    finally:
        await engine.dispose()
