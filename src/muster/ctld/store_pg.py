"""The store on PostgreSQL (psycopg 3), for sites that outgrow SQLite.

Selected in the configuration, as Slurm selects its accounting storage::

    AccountingStorageType=accounting_storage/postgresql
    AccountingStorageHost=db.example  AccountingStoragePort=5432
    AccountingStorageUser=muster      AccountingStoragePassFile=/etc/muster/dbpass
    AccountingStorageLoc=muster       (the database name)

or with one muster key, ``AccountingStorageURL=postgresql://user@host:5432/db`` (any
libpq connection string). The password is read from ``AccountingStoragePassFile`` (a file
no one but its owner may read, else refused), or by libpq itself from ``PGPASSFILE`` or
``~/.pgpass`` when the connection string has none; a password written in muster.conf
(``AccountingStoragePass``, or in the URL) is refused while that file is readable by
others (muster.conf is world-readable: the commands read it). The whole store moves: events, jobs, accounting records,
associations; the controller still answers only after the transaction has committed.

``PgStore`` *is* a ``Store``: the same methods run the same SQL through ``_PgConnection``,
which speaks the SQLite dialect the store is written in (``?`` placeholders, ``BEGIN
IMMEDIATE``, ``PRAGMA``, ``REAL``/``INTEGER``/``AUTOINCREMENT`` in migrations, the column
named ``user``) to PostgreSQL. Keeping one body of SQL means every migration and query the
store gains works on both.
"""

from __future__ import annotations

import os
import re
from typing import Any

from muster.core.config import Config, ConfigError
from muster.core.errors import StorageError
from muster.core.extras import require
from muster.ctld.store import Store

# Held shared by every ``PgStore`` session, on its schema's store: ``muster store-copy``
# takes it exclusively, so neither waits on nor writes under the other. A two-key advisory
# lock: never the same lock as the election's one-key lock (``lease_pg``), whatever the
# cluster's name.
STORE_LOCK = "hashtext(current_schema()), hashtext('muster:store')"

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
        self.path = redact(dsn)
        self.db = _PgConnection(psycopg.connect(dsn, autocommit=True))  # type: ignore[assignment]
        row = self.db.execute(f"SELECT pg_try_advisory_lock_shared({STORE_LOCK})").fetchone()
        if not (row and row[0]):
            self.db.close()
            raise StorageError(
                f"the store in {self.path} is being copied (muster store-copy); start again when it ends"
            )
        try:
            self.migrate()
        except BaseException:
            self.db.close()  # a store refused (too new) or not migrated holds nothing open
            raise

    def _keep_before_migration(self, current: int) -> str | None:
        return None  # pg_dump before upgrading (docs/upgrade.md)

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


def redact(dsn: str) -> str:
    """A connection string fit to print: its password (if any) replaced by ``***``."""
    dsn = re.sub(r"password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", "password=***", dsn)
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", dsn)


def dsn_from_config(config: Config) -> str | None:
    """The PostgreSQL connection string the configuration asks for, or None for SQLite;
    with the password of ``AccountingStoragePassFile`` when one is named. ``ConfigError``
    when that file is unsafe or a password sits in a world-readable muster.conf."""
    url = config.get("AccountingStorageURL")
    kind = (config.get("AccountingStorageType") or "").lower()
    if not url and kind not in ("accounting_storage/postgresql", "accounting_storage/pgsql"):
        return None
    inline = config.get("AccountingStoragePass")
    if url:
        inline = inline or ("password" if re.search(r"://[^/@:]+:[^@/]+@|password\s*=", url) else None)
    if inline:
        _refuse_world_readable(config.path)
    password = _password_file(config.get("AccountingStoragePassFile"))
    if url:
        return _with_password(url, password) if password else url
    parts = {
        "host": config.get("AccountingStorageHost") or "localhost",
        "port": config.get("AccountingStoragePort") or "5432",
        "user": config.get("AccountingStorageUser"),
        "password": password or config.get("AccountingStoragePass"),
        "dbname": config.get("AccountingStorageLoc") or "muster",
    }
    return " ".join(f"{k}={_quote(v)}" for k, v in parts.items() if v)


def _refuse_world_readable(conf: str) -> None:
    try:
        mode = os.stat(conf).st_mode
    except OSError:
        return  # not a file (a configuration given as text): nothing to judge
    if mode & 0o004:
        raise ConfigError(
            f"{conf}: the database password must not be written in a file every user can read "
            f"(mode {mode & 0o777:04o}): put it in a file of its own, mode 0600, named by "
            "AccountingStoragePassFile= (or in ~/.pgpass), and remove it from AccountingStoragePass/"
            "AccountingStorageURL"
        )


def _password_file(path: str | None) -> str | None:
    """The password in ``path``: its first line. Refused unless only its owner can read it."""
    if not path:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise ConfigError(f"AccountingStoragePassFile={path}: {exc.strerror}") from None
    with os.fdopen(fd, encoding="utf-8") as f:
        mode = os.fstat(f.fileno()).st_mode
        if mode & 0o077:
            raise ConfigError(
                f"AccountingStoragePassFile={path} is readable by others (mode {mode & 0o777:04o}): chmod 600 {path}"
            )
        line = f.readline().rstrip("\r\n")
    if not line:
        raise ConfigError(f"AccountingStoragePassFile={path} is empty")
    return line


def _with_password(dsn: str, password: str) -> str:
    """``dsn`` (a URL or keywords) with ``password`` added, as libpq reads both."""
    require("psycopg", "the PostgreSQL store (AccountingStorageType=accounting_storage/postgresql)")
    from psycopg.conninfo import make_conninfo

    return str(make_conninfo(dsn, password=password))


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
