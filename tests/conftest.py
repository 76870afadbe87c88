"""Database fixtures for every test package; `database` tests run on SQLite and on
Postgres through pgbouncer.

Postgres: each test session creates its own database (so concurrent test runs
and other users of the server cannot interfere), migrates it over the direct
URL, and truncates the tables before each test. Tests talk to it through
pgbouncer in transaction mode, as production does. If pgbouncer is not
reachable the Postgres tests fail (start it with scripts/pgbouncer-test.sh
start); TEST_SKIP_POSTGRES=1 skips them instead, for plain pytest runs only:
scripts/test (what CI runs) refuses to run with it set.

SQLite: the schema is migrated once into a template file that each test copies.
"""

from __future__ import annotations

import asyncio
import gc
import os
import secrets
import shutil
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import asyncpg  # type: ignore[import-untyped]
import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.db.engine import create_engine, create_sessionmaker
from app.db.migrations import upgrade
from app.db.models import Base
from app.store.instance import process_alive
from tests import hypothesis_profiles
from tests.db.helpers import Database
from tests.running_service import Service, ServiceFactory, ServiceLauncher

hypothesis_profiles.load()

PGBOUNCER_URL = os.environ.get(
    "TEST_PGBOUNCER_URL", "postgresql+asyncpg://postgres@127.0.0.1:6432/test"
)
POSTGRES_URL = os.environ.get(
    "TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
SKIP_POSTGRES = os.environ.get("TEST_SKIP_POSTGRES") == "1"

#: The container image's test runs on its own, after the suite: it needs an
#: image that scripts/test-image builds (TELEUPLOADER_IMAGE names it).
collect_ignore = [] if os.environ.get("TELEUPLOADER_IMAGE") else ["deploy/test_container.py"]

T = TypeVar("T")

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]

#: Where SQL can differ between SQLite and Postgres, a test that uses a
#: database runs on both (tests/README.md, "Which backend"): the repositories,
#: migrations and single-statement paths (tests/db) and scale-out and crash
#: recovery (tests/deploy), and any test or module marked `both_backends`
#: (locking, races, the GC ledger, a client's whole session on Postgres).
#: Everything else runs on SQLite: its HTTP answers do not depend on the SQL.
BOTH_BACKENDS_UNDER = ("tests/db/", "tests/deploy/")


#: Fixtures that run a whole service, a browser or processes: what
#: `--quick` leaves out (but for the tests marked `smoke`).
HEAVY_FIXTURES = frozenset(
    {"start_service", "processes", "browser", "telegram_sim_process", "dav_service"}
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--quick",
        action="store_true",
        help="the inner loop: unit tests (no service, browser or process, SQLite only) "
        "and the smoke test of each API (marked smoke); CI always runs everything",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--quick"):
        return
    kept: list[pytest.Item] = []
    left_out: list[pytest.Item] = []
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        unit = not fixtures & HEAVY_FIXTURES and item.get_closest_marker("postgres") is None
        (kept if unit or item.get_closest_marker("smoke") else left_out).append(item)
    config.hook.pytest_deselected(items=left_out)
    items[:] = kept


#: The test processes' youngest generation collects every this many
#: allocations (Python's default: 700). Each test builds and drops a whole
#: service (an app, engines, a simulator): a burst of objects in which the
#: default collects several times a millisecond.
GC_YOUNG_THRESHOLD = 7000


def pytest_collection_finish(session: pytest.Session) -> None:
    """Once the tests, the app and their libraries are imported: keep the
    garbage collector out of those objects, which live as long as the
    process. Without this a test process spent 18 % of its CPU collecting,
    mostly in full collections that walked every imported module's objects
    again (tests/README.md, "The suite's time"). Test processes only: the
    service keeps Python's defaults."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "database" not in metafunc.fixturenames:
        return
    if any(
        "database" in str(marker.args[0])
        for marker in metafunc.definition.iter_markers("parametrize")
    ):
        return  # the test names its backends itself
    if metafunc.definition.get_closest_marker("postgres_only"):
        metafunc.parametrize("database", BACKENDS[1:], indirect=True)
        return
    path = metafunc.definition.path.relative_to(metafunc.config.rootpath).as_posix()
    both = path.startswith(BOTH_BACKENDS_UNDER) or metafunc.definition.get_closest_marker(
        "both_backends"
    )
    metafunc.parametrize("database", BACKENDS if both else ["sqlite"], indirect=True)


def in_own_thread(function: Callable[..., T], *args: Any) -> T:
    """Run blocking setup code that starts its own event loop (asyncio.run, Alembic).

    In a worker thread it cannot disturb the loop pytest-asyncio has set for
    the test in the main thread.
    """
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(function, *args).result()


def run_async(coroutine: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return in_own_thread(lambda: asyncio.run(coroutine()))


# --- Postgres plumbing ---------------------------------------------------------


def _with_database(url: str, name: str) -> str:
    return make_url(url).set(database=name).render_as_string(hide_password=False)


def _asyncpg_dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def _admin(sql: str) -> None:
    """Run one statement on the direct connection's maintenance database."""
    connection = await asyncpg.connect(_asyncpg_dsn(_with_database(POSTGRES_URL, "postgres")))
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


async def _backend_pid(connection: asyncpg.Connection) -> int:
    async with connection.transaction():
        pid: int = await connection.fetchval("SELECT pg_backend_pid()")
        return pid


async def _pools_transactions(url: str) -> bool:
    """Does the pgbouncer at `url` hand a server connection to another client
    as soon as a transaction ends? (In session mode the first client keeps it.)"""
    first = await asyncpg.connect(_asyncpg_dsn(url), statement_cache_size=0, timeout=5)
    try:
        first_pid = await _backend_pid(first)
        second = await asyncpg.connect(_asyncpg_dsn(url), statement_cache_size=0, timeout=5)
        try:
            # pgbouncer reuses the most recently freed server connection.
            return await _backend_pid(second) == first_pid
        finally:
            await second.close()
    finally:
        await first.close()


_DATABASE_PREFIX = "teleuploader_test_"


async def _drop_abandoned_databases() -> None:
    """Drop test databases of runs that were killed before their teardown."""
    dsn = _asyncpg_dsn(_with_database(POSTGRES_URL, "postgres"))
    connection = await asyncpg.connect(dsn)
    try:
        names = await connection.fetch(
            "SELECT datname FROM pg_database WHERE datname LIKE $1", _DATABASE_PREFIX + "%"
        )
        for (name,) in names:
            pid = name.removeprefix(_DATABASE_PREFIX).split("_")[0]
            if pid.isdigit() and not process_alive(int(pid)):
                await connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await connection.close()


def _create_postgres_database() -> Database:
    if SKIP_POSTGRES:
        pytest.skip("TEST_SKIP_POSTGRES=1")
    name = f"{_DATABASE_PREFIX}{os.getpid()}_{secrets.token_hex(4)}"
    try:
        run_async(_drop_abandoned_databases)
        # A linguistic collation, as production databases usually have, so the
        # tests show that key order does not depend on it.
        run_async(
            lambda: _admin(
                f'CREATE DATABASE "{name}" TEMPLATE template0 '
                "LOCALE_PROVIDER icu ICU_LOCALE 'en-US'"
            )
        )
    except (OSError, asyncpg.PostgresError) as exc:
        pytest.fail(
            f"Postgres at {POSTGRES_URL} is not usable ({exc!r}); TEST_SKIP_POSTGRES=1 skips"
        )
    database = Database(
        backend="postgres",
        url=_with_database(PGBOUNCER_URL, name),
        migration_url=_with_database(POSTGRES_URL, name),
    )
    try:
        pools_transactions = run_async(
            lambda: asyncio.wait_for(_pools_transactions(database.url), timeout=10)
        )
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        _drop_postgres_database(name)
        pytest.fail(
            f"pgbouncer at {PGBOUNCER_URL} is not reachable ({exc!r}): "
            "run scripts/pgbouncer-test.sh start (or TEST_SKIP_POSTGRES=1 to skip)"
        )
    if not pools_transactions:
        _drop_postgres_database(name)
        pytest.fail(f"pgbouncer at {PGBOUNCER_URL} is not in transaction pooling mode")
    return database


def _drop_postgres_database(name: str) -> None:
    # FORCE: pgbouncer still holds idle server connections to it.
    run_async(lambda: _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def _database_name(database: Database) -> str:
    name = make_url(database.migration_url).database
    assert name is not None
    return name


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[Database]:
    """This session's migrated Postgres database."""
    database = _create_postgres_database()
    try:
        in_own_thread(upgrade, database.migration_url)
        yield database
    finally:
        _drop_postgres_database(_database_name(database))


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    in_own_thread(upgrade, f"sqlite:///{path}")
    return path


# --- the fixtures tests use ----------------------------------------------------


@pytest.fixture
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Database:
    """A migrated database with empty tables, on the backends a test runs on
    (`pytest_generate_tests`)."""
    if request.param == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        path = tmp_path / "test.db"
        shutil.copyfile(template, path)
        url = f"sqlite+aiosqlite:///{path}"
        return Database(backend="sqlite", url=url, migration_url=url)
    postgres: Database = request.getfixturevalue("postgres_database")
    return postgres


async def _empty_tables(engine: AsyncEngine) -> None:
    """Every table emptied and every sequence back at 1, in one round trip.

    Cheaper than a database per test; this session's database is ours alone.
    DELETE, not TRUNCATE: a test leaves a few rows, and TRUNCATE gives each of
    the tables and their indexes new files, 75-90 ms of the server's time per
    test against 5. The replica role keeps the journal's triggers from
    recording the deletions (and the foreign keys from ordering them)."""
    tables = [table.name for table in Base.metadata.sorted_tables]
    script = "; ".join(
        [
            "SET LOCAL session_replication_role = replica",
            *(f'DELETE FROM "{name}"' for name in tables),
            "SELECT setval(c.oid, 1, false) FROM pg_class c "
            "WHERE c.relkind = 'S' AND c.relnamespace = current_schema()::regnamespace",
        ]
    )
    async with engine.begin() as connection:
        raw = await connection.get_raw_connection()
        # asyncpg runs a script without arguments in one simple-query round trip.
        await raw.driver_connection.execute(script)  # type: ignore[union-attr]


def empty_tables(database: Database) -> None:
    """Empty the tables of the session's Postgres database, from synchronous code
    (the tests that run the service as a subprocess)."""

    async def empty() -> None:
        engine = create_engine(database.url)
        try:
            await _empty_tables(engine)
        finally:
            await engine.dispose()

    run_async(empty)


@pytest.fixture
async def engine(database: Database) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database.url)
    try:
        if database.backend == "postgres":
            await _empty_tables(engine)
        yield engine
    finally:
        await engine.dispose()


@pytest.fixture
def sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return create_sessionmaker(engine)


@pytest.fixture
async def session(sessionmaker: async_sessionmaker[AsyncSession]) -> AsyncIterator[AsyncSession]:
    async with sessionmaker() as session:
        yield session


@pytest.fixture
async def pgbouncer_engine(postgres_database: Database) -> AsyncIterator[AsyncEngine]:
    """Postgres through pgbouncer only, for tests about pgbouncer itself."""
    engine = create_engine(postgres_database.url)
    try:
        await _empty_tables(engine)
        yield engine
    finally:
        await engine.dispose()


@pytest.fixture(params=BACKENDS)
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """A database with no tables at all, on each backend."""
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"
        yield Database(backend="sqlite", url=url, migration_url=url)
        return
    database = _create_postgres_database()
    try:
        yield database
    finally:
        _drop_postgres_database(_database_name(database))


# --- a running service, for the HTTP tests ---------------------------------------


@pytest.fixture
async def launcher(database: Database, engine: AsyncEngine) -> AsyncIterator[ServiceLauncher]:
    """Starts (and stops, and restarts) services; everything stops at teardown.

    (`engine` empties the tables of the shared Postgres test database.)"""
    launcher = ServiceLauncher(database)
    yield launcher
    await launcher.aclose()


@pytest.fixture
def start_service(launcher: ServiceLauncher) -> ServiceFactory:
    """Starts a service with setting overrides."""
    return launcher.start


@pytest.fixture
async def service(start_service: ServiceFactory) -> Service:
    return await start_service()
