"""Opening a study database: its URL, the checks made before anything is written, the engine,
and tuner's schema migrations.

A database is checked before anything is written to it: it must be empty or carry tuner's
schema marker (its Alembic version table); anything else, even tables named like Optuna's, is
refused and left exactly as it was. A reader (the dashboard, `tuner status`) opens without
`create` or `upgrade` and writes nothing at all, not even a migration. SQLite files run in WAL
mode so a dashboard can read while a study writes. The error-text helpers at the end are shared
with the repository.
"""

from __future__ import annotations

import functools
import os
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import Connection, Engine, create_engine, event, inspect
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, OperationalError, SQLAlchemyError
from sqlalchemy.pool import NullPool

import db
from db.models import OPTUNA_TABLES, TABLE_PREFIX, VERSION_TABLE
from tuner.store.errors import StoreError

__all__ = ["engine_options", "mask_url", "open_engine", "setup_lock", "sqlite_file"]

_MIGRATIONS = Path(db.__file__).resolve().parent / "migrations"
_SQLITE_HEADER = b"SQLite format 3\x00"
_SQLITE_TIMEOUT_S = 30  # how long a writer waits for another's lock before failing
_DB_CONNECT_TIMEOUT_S = 10  # how long a server database may take to answer a connection
# Any fixed key: serializes migrations of workers sharing one PostgreSQL database.
_PG_MIGRATION_LOCK = 7_202_511
# With the study's own key: serializes workers claiming a trial of one study's budget.
_PG_BUDGET_LOCK = 7_202_512


def open_engine(url: str, *, create: bool, upgrade: bool) -> tuple[Engine, str]:
    """Check the database, then bring tuner's tables up to date where allowed.

    `create`: a missing database (file, or tuner's tables) may be created. `upgrade`: an older
    schema may be migrated and an SQLite file switched to WAL. With neither, opening only reads:
    a missing database, or one whose schema is older than this tuner's, is refused in one line
    naming the command that upgrades it, and nothing is created or written.

    Returns the engine and where the database is for messages: the file path, or the URL without
    its password. Nothing is written before every check has passed, and nothing at all to a
    database that is already up to date.
    """
    parsed = _parse_url(url)
    path = _sqlite_file(parsed)
    where = str(path) if path is not None else mask_url(url)
    if path is None and parsed.get_backend_name() == "sqlite":
        path = _uri_file(parsed)  # checked like a plain path: a reader creates nothing
        if path is not None:
            _check_sqlite_path(path, create=create)
    elif path is not None:
        _check_sqlite_path(path, create=create)
        if create or upgrade:
            _check_writable(path)
    engine = _create_engine(parsed, where, reader=path is not None and not (create or upgrade))
    try:
        revisions = _check_contents(engine, where, sqlite_file=path is not None, create=create)
        if revisions != {_head_revision()} and not (create or upgrade):
            raise _older_schema(where, url, revisions)
        if path is not None and (create or upgrade):
            _use_wal(engine)
        if revisions != {_head_revision()}:
            _upgrade(engine, parsed)
    except StoreError:
        engine.dispose()
        raise
    except (SQLAlchemyError, CommandError) as e:
        engine.dispose()
        raise StoreError(
            f"cannot open {where}: {_cause(e)}: check the database is reachable and writable"
        ) from e
    return engine, where


def _older_schema(where: str, url: str, revisions: set[str]) -> StoreError:
    return StoreError(
        f"{where} has an older tuner schema (revision {', '.join(sorted(revisions))}; this "
        f"tuner's is {_head_revision()}) and this command only reads: upgrade it once with "
        f"`tuner upgrade --storage {shlex.quote(mask_url(url))}`"
    )


@contextmanager
def setup_lock(engine: Engine, where: str) -> Iterator[None]:
    """Held while Optuna creates or checks its own tables in this database. On PostgreSQL,
    workers starting at once on a fresh database would race on CREATE TABLE; this is the
    lock tuner's own migrations take, so setups run one at a time."""
    if engine.dialect.name != "postgresql":
        yield
        return
    try:
        connection = engine.connect()
        connection.exec_driver_sql(f"SELECT pg_advisory_lock({_PG_MIGRATION_LOCK})")
        connection.commit()
    except SQLAlchemyError as e:
        raise StoreError(f"cannot lock {where} for setup: {_cause(e)}") from e
    try:
        yield
    finally:
        connection.exec_driver_sql(f"SELECT pg_advisory_unlock({_PG_MIGRATION_LOCK})")
        connection.commit()
        connection.close()


def _parse_url(url: str) -> URL:
    try:
        return make_url(url)
    except ArgumentError as e:
        raise StoreError(
            f"cannot parse storage URL {url if '@' not in url else '<with credentials>'!r}: "
            "pass e.g. sqlite:///tuner.db or "
            "postgresql://user@host/db"
        ) from e


def sqlite_file(url: str) -> Path | None:
    """The database file of an SQLite storage URL; None for other backends, memory, URI
    filenames and URLs that do not parse."""
    try:
        return _sqlite_file(_parse_url(url))
    except StoreError:
        return None


def _sqlite_file(url: URL) -> Path | None:
    """The database file of an SQLite URL; None for other backends, memory and URI filenames."""
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    if str(url.query.get("uri", "")).lower() in ("true", "1"):
        return None
    return Path(database)


def _uri_file(url: URL) -> Path | None:
    """The file of an SQLite URI filename (`sqlite:///file:tuner.db?mode=ro&uri=true`); None for
    a memory database. A URL SQLite would take as some other file name is refused: with
    `uri=true` and no `file:`, SQLite creates a file named `tuner.db?mode=ro`."""
    database = url.database or ""
    uri = str(url.query.get("uri", "")).lower() in ("true", "1")
    if database in ("", ":memory:"):
        return None
    if uri and not database.startswith("file:"):
        raise StoreError(f"storage {mask_url(url.render_as_string())}: with uri=true the database "
                         "must be a file: URI, e.g. sqlite:///file:tuner.db?mode=ro&uri=true")
    if database.startswith("file:") and not uri:
        raise StoreError(f"storage {mask_url(url.render_as_string())}: a file: database needs "
                         "uri=true, or give the plain path: sqlite:///tuner.db")
    return Path(database.removeprefix("file:").split("?", 1)[0])


def _check_sqlite_path(path: Path, *, create: bool) -> None:
    """Refuse what is not an SQLite database (or a new file we may create), only by looking."""
    if not path.exists():
        if not create:
            raise _no_database(str(path))
        if not path.parent.is_dir():
            raise StoreError(
                f"cannot create {path}: directory {path.parent} does not exist: "
                "create it or choose another --storage"
            )
        return
    if path.is_dir():
        raise StoreError(
            f"{path} is a directory, not a database file: pass a file path such as "
            f"--storage sqlite:///{path / 'tuner.db'}"
        )
    if not path.is_file():
        raise StoreError(f"{path} is not a regular file: choose another --storage")
    if not os.access(path, os.R_OK):
        raise StoreError(
            f"cannot read {path}: permission denied: "
            "fix its permissions or choose another --storage"
        )
    try:
        with path.open("rb") as f:
            header = f.read(len(_SQLITE_HEADER))
    except OSError as e:
        raise StoreError(f"cannot read {path}: {e.strerror}: choose another --storage") from e
    # An empty file is a valid, empty SQLite database.
    if header and header != _SQLITE_HEADER:
        raise StoreError(f"{path} is not an SQLite database: choose another --storage")


def _check_writable(path: Path) -> None:
    """A file (or folder) its owner marked read-only is refused to a writer by its mode bits,
    not only by the permission check: root passes every permission check, and would write a
    database the user meant to keep as it is. SQLite writes its journal beside the file, so the
    folder must be writable too."""
    for target, what in ((path, "file"), (path.parent, "folder")):
        if target.exists() and not target.stat().st_mode & 0o222:
            mode = f"{target.stat().st_mode & 0o777:o}"
            raise StoreError(
                f"{path} is read-only (its {what} {target} has mode {mode}): a study writes its "
                "trials there; make it writable (chmod u+w) or choose another --storage")


def _no_database(where: str) -> StoreError:
    return StoreError(f"no study database at {where}: run `tuner run` first or pass --storage")


def engine_options(url: str | URL) -> dict[str, Any]:
    """`create_engine` options for a storage URL, tuner's and Optuna's engines alike: how long
    SQLite waits for another writer's lock; on a server database, a connect timeout (a host that
    accepts and never answers becomes an error, not a hang; `connect_timeout` in the URL or
    $TUNER_DB_CONNECT_TIMEOUT_S, default 10 s) and a test of each pooled connection before use
    (long studies outlive idle server connections)."""
    url = url if isinstance(url, URL) else _parse_url(url)
    if url.get_backend_name() == "sqlite":
        return {"connect_args": {"timeout": _SQLITE_TIMEOUT_S}}
    options: dict[str, Any] = {"pool_pre_ping": True}
    if "connect_timeout" not in url.query:
        options["connect_args"] = {"connect_timeout": _connect_timeout_s()}
    return options


def _connect_timeout_s() -> int:
    text = os.environ.get("TUNER_DB_CONNECT_TIMEOUT_S", str(_DB_CONNECT_TIMEOUT_S))
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise StoreError(f"TUNER_DB_CONNECT_TIMEOUT_S={text!r}: give whole seconds, at least 1")
    return value


def _create_engine(url: URL, where: str, *, reader: bool = False) -> Engine:
    """The engine; a reader of an SQLite file closes each connection after its read: a WAL
    database's -wal and -shm files, which any connection creates beside it, are then removed by
    the last one to close, so a reader that stays open for hours (the dashboard) leaves the
    folder as it found it. (A read-only connection, `mode=ro`, would leave them behind.)"""
    options = engine_options(url)
    if reader:
        options["poolclass"] = NullPool
    try:
        engine = create_engine(url, **options)
        if url.get_backend_name() == "sqlite":
            event.listen(engine, "connect", _sqlite_foreign_keys_on)
        return engine
    except ArgumentError as e:
        raise StoreError(f"cannot use {where}: {e}: pass a sqlite:// or postgresql:// URL") from e
    except ImportError as e:
        raise StoreError(f"cannot use {where}: {e}: install the database driver") from e


def _sqlite_foreign_keys_on(dbapi_connection: Any, connection_record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _check_contents(engine: Engine, where: str, *, sqlite_file: bool, create: bool) -> set[str]:
    """Read-only checks: no foreign tables (SQLite), tuner's tables if required, a known schema.

    Returns the database's tuner schema revisions (none for a database without tuner's tables).
    """
    with engine.connect() as connection:
        tables = set(inspect(connection).get_table_names())
        if sqlite_file:
            foreign = sorted(t for t in tables if not _is_ours(t))
            if foreign:
                raise StoreError(
                    f"{where} is not a tuner database (it has tables {_some(foreign)}): "
                    "choose another --storage"
                )
        if VERSION_TABLE not in tables:
            # Without tuner's schema marker, tables named like Optuna's (`studies`, `trials`)
            # are another program's: nothing may be added to them. In an SQLite file, any table.
            theirs = sorted(t for t in tables if sqlite_file or t in OPTUNA_TABLES)
            if theirs:
                raise StoreError(
                    f"{where} is not a tuner database (it has tables {_some(theirs)} and no "
                    "tuner schema): choose another --storage"
                )
            if not create:
                raise _no_database(where)
            return set()
        heads = set(_migration_context(connection).get_current_heads())
    unknown = sorted(heads - _known_revisions())
    if unknown:
        raise StoreError(
            f"{where} was created by a newer tuner (schema revision {unknown[0]}): "
            "upgrade tuner or choose another --storage"
        )
    return heads


def _is_ours(table: str) -> bool:
    """tuner's own tables, or Optuna's, which share the database by design."""
    return table.startswith(TABLE_PREFIX) or table in OPTUNA_TABLES


def _some(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown} and {len(names) - limit} more"


def _use_wal(engine: Engine) -> None:
    # Persistent in the file: readers (the dashboard) no longer block the writer, nor it them.
    with engine.connect() as connection:
        if connection.exec_driver_sql("PRAGMA journal_mode").scalar() != "wal":
            connection.exec_driver_sql("PRAGMA journal_mode=WAL")


def _upgrade(engine: Engine, url: URL) -> None:
    """`alembic upgrade head` in one transaction that holds the write lock, so workers opening a
    fresh database at the same time migrate it once (Alembic re-reads the revision under it)."""
    if url.get_backend_name() == "sqlite":
        migration_engine = _sqlite_migration_engine(url)
        try:
            with migration_engine.begin() as connection:
                command.upgrade(_alembic_config(connection), "head")
        finally:
            migration_engine.dispose()
        return
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_MIGRATION_LOCK})")
        command.upgrade(_alembic_config(connection), "head")


def _sqlite_migration_engine(url: URL) -> Engine:
    """An engine whose transactions start with BEGIN IMMEDIATE and include DDL.

    Python's sqlite3 emits no BEGIN before DDL, so a migration would otherwise commit statement
    by statement and two processes could both try to create the tables.
    """
    engine = create_engine(url, connect_args={"timeout": _SQLITE_TIMEOUT_S}, poolclass=NullPool)

    @event.listens_for(engine, "connect")
    def _driver_leaves_transactions_to_us(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin_immediate(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def _alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def _migration_context(connection: Connection) -> MigrationContext:
    return MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})


@functools.cache
def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(_alembic_config())


def _known_revisions() -> frozenset[str]:
    return frozenset(rev.revision for rev in _scripts().walk_revisions())


def _head_revision() -> str | None:
    return _scripts().get_current_head()


# -- error text -------------------------------------------------------------------------------


def _cause(e: BaseException) -> str:
    """The driver's own message when there is one (SQLAlchemy's adds the SQL and a link)."""
    orig = getattr(e, "orig", None)
    text = " ".join(str(orig if orig is not None else e).split())
    return text if len(text) <= 300 else text[:297] + "..."


def _hint(e: SQLAlchemyError) -> str:
    if isinstance(e, IntegrityError):
        return ": a record with the same key exists, or one it refers to is missing"
    if isinstance(e, OperationalError):
        return ": check the database is reachable, writable and not locked by another process"
    return ""


def mask_url(url: str) -> str:
    """A storage URL with any password replaced by ***, for printing and logging: the one place
    tuner turns a storage URL into text that a page, a terminal or a log shows."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL is reported elsewhere; never print it raw
        return "<storage url>"
