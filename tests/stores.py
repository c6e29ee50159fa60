"""Stores to run the same tests on: SQLite in a temporary directory, and PostgreSQL when
``MUSTER_TEST_PG_DSN`` names a server (``.ci/run`` starts one; each test gets a schema of
its own)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

BACKENDS = ["sqlite", "postgresql"]
NO_PG = "PostgreSQL tests need MUSTER_TEST_PG_DSN (a libpq DSN); .ci/run starts a server and sets it"


def pg_dsn() -> str | None:
    return os.environ.get("MUSTER_TEST_PG_DSN") or None


@pytest.fixture(params=BACKENDS)
def make_store(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Callable[[], Any]]:
    """A factory of stores on one database (call it again to reopen, as after a restart)."""
    if request.param == "sqlite":
        from muster.ctld.store import Store

        path = str(tmp_path / "muster.db")
        yield lambda: Store(path)
        return
    dsn = pg_dsn()
    if dsn is None:
        pytest.skip(NO_PG)
    import psycopg

    from muster.ctld.store_pg import PgStore

    schema = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    opened: list[Any] = []

    def factory() -> Any:
        store = PgStore(f"{dsn} options=-csearch_path={schema}")
        opened.append(store)
        return store

    try:
        yield factory
    finally:
        for s in opened:
            try:
                s.close()
            except Exception:
                pass
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
