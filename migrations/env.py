"""Alembic environment of the results database.

Run by bench.store.db (bench db upgrade), which passes an open connection in
config.attributes["connection"]; there is no alembic.ini. Import-safe: importing this module
outside an alembic run (e.g. as bench.migrations.env from an installed wheel) does nothing.
Versions live in versions/ next to this file.
"""

from alembic import context

from bench.store.models import Base

target_metadata = Base.metadata


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None:
        from sqlalchemy import create_engine
        url = context.config.get_main_option("sqlalchemy.url")
        with create_engine(url).connect() as conn:
            _run(conn)
            conn.commit()
        return
    _run(connection)


def _run(connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata,
                      render_as_batch=connection.dialect.name == "sqlite", compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


def _in_alembic() -> bool:
    try:
        context.config  # noqa: B018 - raises outside an alembic environment
    except (NameError, AttributeError):
        return False
    return True


if _in_alembic():
    if context.is_offline_mode():
        context.configure(url=context.config.get_main_option("sqlalchemy.url"),
                          target_metadata=target_metadata, literal_binds=True)
        with context.begin_transaction():
            context.run_migrations()
    else:
        run_migrations_online()
