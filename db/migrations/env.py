"""Alembic environment for tuner's own tables.

tuner runs migrations in code (`tuner.store`), handing over an open connection through
`config.attributes["connection"]`; the `sqlalchemy.url` path serves a developer running the
`alembic` command with `db/alembic.ini`. Optuna's migrations own `alembic_version` in the same
database, so ours keep their revision in `tuner_alembic_version` and autogenerate looks only at
`tuner_*` tables (it would otherwise offer to drop Optuna's).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine, pool

from db.models import TABLE_PREFIX, VERSION_TABLE, Base

config = context.config
target_metadata = Base.metadata


def include_name(name: str | None, type_: str, parent_names: object) -> bool:
    if type_ == "table":
        return name is not None and name.startswith(TABLE_PREFIX)
    return True


def _configure(**kwargs: object) -> None:
    context.configure(
        target_metadata=target_metadata,
        version_table=VERSION_TABLE,
        include_name=include_name,
        render_as_batch=True,  # SQLite can only ALTER through table copies
        **kwargs,
    )


def run_migrations_offline() -> None:
    _configure(url=config.get_main_option("sqlalchemy.url"), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def _run_on(connection: Connection) -> None:
    _configure(connection=connection)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_on(connection)  # the caller owns the connection and its transaction
        return
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no database: set sqlalchemy.url or pass attributes['connection']")
    engine = create_engine(url, poolclass=pool.NullPool)
    with engine.connect() as connection:
        _run_on(connection)


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
