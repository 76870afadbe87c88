"""A Core statement compiled once for one dialect, run on the driver's own
connection: for the request path's single statements (app.db.single_statements).

SQLAlchemy's execution machinery (Connection, execution context, result
object, the pool's checkout and reset) cost ~90 µs of CPU per statement, ten
times what SQLite takes to look up one row. What a statement needs from it is
small and fixed: its SQL text, the order of its parameters, and the type
conversions of its parameters and columns. Those are taken from SQLAlchemy
once (the same processors it would apply), so the rows read and written are
exactly those of SQLAlchemy's own path; a driver error is raised as the
DBAPIError subclass SQLAlchemy would raise (callers and the error pages tell
"database is locked" and lost connections apart by it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from sqlalchemy import ClauseElement
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError, StatementError
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.sql.compiler import SQLCompiler

Processor = Callable[[Any], Any] | None


class CompiledStatement:
    """`statement` for `dialect`, with the parameter names `keys` (an
    INSERT's columns; None: the statement's own bind parameters)."""

    def __init__(
        self, statement: ClauseElement, dialect: Dialect, keys: Sequence[str] | None = None
    ) -> None:
        compiled = statement.compile(
            dialect=dialect, column_keys=list(keys) if keys is not None else None
        )
        if not isinstance(compiled, SQLCompiler):
            raise TypeError(f"not a SQL statement: {statement!r}")
        self.sql: Final = str(compiled)
        self._dialect = dialect
        names = compiled.positiontup
        if names is None:
            raise ValueError(f"{dialect.name}: a positional paramstyle is needed")
        binds = compiled.binds
        self._params: Final = [
            (name, binds[name].type.dialect_impl(dialect).bind_processor(dialect)) for name in names
        ]
        # Parameters the dialect adds with a value of its own (SQLite's
        # OFFSET 0 after a bound LIMIT).
        self._defaults: Final = {
            name: binds[name].effective_value for name in names if not binds[name].required
        }
        columns = getattr(statement, "selected_columns", None)
        if columns is None:
            columns = statement.returning_column_descriptions  # type: ignore[attr-defined]
            types = [entry["type"] for entry in columns]
        else:
            types = [column.type for column in columns]
        self._results: Final[list[Processor]] = [
            kind.dialect_impl(dialect).result_processor(dialect, None) for kind in types
        ]
        # (position, processor) of the columns that need converting: a
        # listing's page has 1,000 rows, with one such column in six.
        self._converted: Final = [
            (at, process) for at, process in enumerate(self._results) if process is not None
        ]

    def parameters(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        """The positional parameters for `values`, converted for the driver."""
        if self._defaults:
            values = {**self._defaults, **values}
        return tuple(
            value if process is None else process(value)
            for name, process in self._params
            for value in (values[name],)
        )

    def row(self, raw: Sequence[Any]) -> list[Any]:
        """A row as the driver returned it, converted to Python values."""
        return [
            value if process is None else process(value)
            for value, process in zip(raw, self._results, strict=True)
        ]

    def rows(self, raws: Sequence[Sequence[Any]]) -> list[Sequence[Any]]:
        """Rows as the driver returned them, converted to Python values."""
        if not self._converted:
            return list(raws)
        converted: list[Sequence[Any]] = []
        for raw in raws:
            if len(raw) != len(self._results):
                raise ValueError(f"{len(raw)} columns, expected {len(self._results)}")
            row = list(raw)
            for at, process in self._converted:
                row[at] = process(row[at])
            converted.append(row)
        return converted

    def error(self, exc: Exception, parameters: Sequence[Any] | None) -> StatementError:
        """`exc` (of the driver, or of a conversion) as SQLAlchemy raises it:
        the DBAPIError subclass of a driver error, else a StatementError."""
        dbapi = self._dialect.loaded_dbapi
        return DBAPIError.instance(self.sql, parameters, exc, dbapi.Error)


class StatementCache:
    """Statements compiled on first use for one dialect: a listing's
    statements are built per page shape, and each is compiled once."""

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = dialect
        self._compiled: dict[ClauseElement, CompiledStatement] = {}

    def __getitem__(self, statement: ClauseElement) -> CompiledStatement:
        compiled = self._compiled.get(statement)
        if compiled is None:
            compiled = self._compiled[statement] = CompiledStatement(statement, self._dialect)
        return compiled


def run_statement(
    connection: PoolProxiedConnection, statement: CompiledStatement, values: Mapping[str, Any]
) -> list[Any] | None:
    """`statement` on a synchronous DB-API connection (SQLite's): its first
    row, converted, or None."""
    rows = _fetch_all(connection, statement, values)
    return statement.row(rows[0]) if rows else None


def run_for_rows(
    connection: PoolProxiedConnection, statement: CompiledStatement, values: Mapping[str, Any]
) -> list[Sequence[Any]]:
    """`statement` on a synchronous DB-API connection (SQLite's): every row,
    converted."""
    return statement.rows(_fetch_all(connection, statement, values))


def _fetch_all(
    connection: PoolProxiedConnection, statement: CompiledStatement, values: Mapping[str, Any]
) -> list[Any]:
    parameters = None
    cursor = connection.cursor()
    try:
        parameters = statement.parameters(values)
        # fetchall, not fetchone: stepping the statement to its end ends
        # its implicit read transaction, which would otherwise hold back
        # WAL checkpoints until the next statement on this connection.
        rows: list[Any] = cursor.execute(statement.sql, parameters).fetchall()
    except Exception as exc:
        raise statement.error(exc, parameters) from exc
    finally:
        cursor.close()
    return rows
