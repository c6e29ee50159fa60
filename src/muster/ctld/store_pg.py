"""The store on PostgreSQL (psycopg 3), for sites that outgrow SQLite.

Selected in the configuration, as Slurm selects its accounting storage::

    AccountingStorageType=accounting_storage/postgresql
    AccountingStorageHost=db.example  AccountingStoragePort=5432
    AccountingStorageUser=muster      AccountingStoragePass=...
    AccountingStorageLoc=muster       (the database name)

or with one muster key, ``AccountingStorageURL=postgresql://user:pass@host:5432/db`` (any
libpq connection string). The whole store moves: events, jobs, accounting records,
associations; the controller still answers only after the transaction has committed.

``PgStore`` *is* a ``Store``: the same methods run the same SQL through ``_PgConnection``,
which speaks the SQLite dialect the store is written in (``?`` placeholders, ``BEGIN
IMMEDIATE``, ``PRAGMA``, ``REAL``/``INTEGER``/``AUTOINCREMENT`` in migrations, the column
named ``user``) to PostgreSQL. Keeping one body of SQL means every migration and query the
store gains works on both.
"""

from __future__ import annotations

import re
from typing import Any

from muster.core.config import Config
from muster.core.errors import StorageError
from muster.core.extras import require
from muster.ctld.store import Store

_PLACEHOLDER = re.compile(r"\?")
_USER_COLUMN = re.compile(r"(?<![\w\"'.%])user(?![\w\"'])")
_DDL = (
    (re.compile(r"INTEGER PRIMARY KEY AUTOINCREMENT", re.I), "BIGSERIAL PRIMARY KEY"),
    (re.compile(r"\bINTEGER\b", re.I), "BIGINT"),
    (re.compile(r"\bREAL\b", re.I), "DOUBLE PRECISION"),
)


def translate(sql: str, with_params: bool = True) -> str | None:
    """SQLite-flavoured SQL as the store writes it -> PostgreSQL; None to skip it.
    ``%`` is doubled only when parameters follow (psycopg reads placeholders only then)."""
    head = sql.lstrip()[:16].upper()
    if head.startswith("PRAGMA"):
        return None
    if head.startswith("BEGIN"):
        return "BEGIN"
    if head.startswith("CREATE"):
        for pattern, repl in _DDL:
            sql = pattern.sub(repl, sql)
    sql = _USER_COLUMN.sub('"user"', sql)
    if not with_params:
        return sql
    return _PLACEHOLDER.sub("%s", sql.replace("%", "%%"))


class _NoRows:
    def fetchone(self) -> None:
        return None

    def fetchall(self) -> list[Any]:
        return []

    def __iter__(self) -> Any:
        return iter(())


class _PgConnection:
    """The subset of ``sqlite3.Connection`` the store uses, on a psycopg connection."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Any = ()) -> Any:
        pg = translate(sql, bool(params))
        if pg is None:
            return _NoRows()
        cur = self.conn.execute(pg, tuple(params) if params else None)
        return cur if cur.description is not None else _NoRows()

    def close(self) -> None:
        self.conn.close()


class PgStore(Store):
    dialect = "postgresql"
    # With several controllers (``ctld.lease``): the lease epoch this one was elected with.
    # Every transaction then first reads the lease row (holding it shared until commit) and
    # commits nothing once another controller has taken over.
    fence_epoch: int | None = None

    def __init__(self, dsn: str) -> None:  # noqa: D107 - Store's contract
        psycopg = require("psycopg", "the PostgreSQL store (AccountingStorageType=accounting_storage/postgresql)")
        self.path = _redact(dsn)
        self.db = _PgConnection(psycopg.connect(dsn, autocommit=True))  # type: ignore[assignment]
        self.migrate()

    def backend_pid(self) -> int:
        """This store's session on the server (the lease row records it)."""
        return int(self.db.conn.info.backend_pid)  # type: ignore[attr-defined]

    def _fence(self) -> None:
        if self.fence_epoch is None:
            return
        from muster.ctld.lease_pg import FENCE_SQL

        row = self.db.execute(FENCE_SQL).fetchone()
        now = int(row[0]) if row else -1
        if now != self.fence_epoch:
            raise StorageError(
                f"not committed: this controller is no longer the active one (lease epoch {self.fence_epoch}, now {now})"
            )

    def table_exists(self, name: str) -> bool:
        row = self.db.execute("SELECT to_regclass(?) IS NOT NULL", (name,)).fetchone()
        return bool(row and row[0])


def _redact(dsn: str) -> str:
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", re.sub(r"password=\S+", "password=***", dsn))


def dsn_from_config(config: Config) -> str | None:
    """The PostgreSQL connection string the configuration asks for, or None for SQLite."""
    url = config.get("AccountingStorageURL")
    if url:
        return url
    kind = (config.get("AccountingStorageType") or "").lower()
    if kind not in ("accounting_storage/postgresql", "accounting_storage/pgsql"):
        return None
    parts = {
        "host": config.get("AccountingStorageHost") or "localhost",
        "port": config.get("AccountingStoragePort") or "5432",
        "user": config.get("AccountingStorageUser"),
        "password": config.get("AccountingStoragePass"),
        "dbname": config.get("AccountingStorageLoc") or "muster",
    }
    return " ".join(f"{k}={_quote(v)}" for k, v in parts.items() if v)


def _quote(value: str) -> str:
    if value and not re.search(r"[\s'\\]", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def open_store(config: Config, sqlite_path: str) -> Store:
    """The store the configuration selects: PostgreSQL when asked for, else SQLite."""
    dsn = dsn_from_config(config)
    if dsn is None:
        return Store(sqlite_path)
    return PgStore(dsn)
