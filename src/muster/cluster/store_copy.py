"""``muster store-copy``: the whole state store, copied between SQLite and PostgreSQL.

Moving a single-head cluster to high availability (the PostgreSQL store) or back keeps its
history: every table the store's migrations create (jobs and their event log, accounting
records, associations and QOS, reservations, nodes' admin states, steps, node outages, the
``meta`` rows with ``next_job_id``) is copied row for row, and the counters behind the
``AUTOINCREMENT`` columns go along, so job ids and event numbers continue where they were.

The contract:

* **One consistent snapshot of the source**, never written: SQLite is read in one read
  transaction, PostgreSQL in one ``REPEATABLE READ READ ONLY`` transaction.
* **Refused while a controller uses either end.** SQLite in a controller's state directory:
  the controller's own lock (``ctld.statelock``), held for the whole copy (a musterctld
  started meanwhile is refused); any SQLite file: a process that has it open (``/proc/*/fd``;
  a controller of an older muster too). PostgreSQL: every ``PgStore``
  holds a shared advisory lock on its schema's store for its whole session
  (``store_pg.STORE_LOCK``); the copy takes it exclusively, for its transaction, on both
  ends, and a controller that starts meanwhile waits no longer than it takes to refuse.
* **The destination is empty or replaced only when told.** A store with no rows beyond its
  schema version (what a controller started once leaves) counts as empty; anything else
  is refused unless ``--overwrite``. An overwritten SQLite file is kept beside the new one as
  ``<file>.pre-copy``.
* **All or nothing, checked before it counts.** The destination is written in one
  transaction (PostgreSQL's DDL is transactional; SQLite is written to ``<file>.part`` and
  renamed into place), then every table is read back from both ends in key order and
  compared value by value; a difference rolls it all back.
* **The schema travels as it is.** The destination gets the source's schema version (the
  same migrations run on it up to that version), and the next controller start migrates it
  as it would have migrated the source: an old SQLite file copied into PostgreSQL is
  migrated there (``tests/integration/test_store_copy.py`` does it with every old schema).
"""

from __future__ import annotations

import abc
import contextlib
import os
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Any

from muster.cluster.backup import controller_pid, state_db
from muster.core.config import Config
from muster.core.extras import require
from muster.ctld.statelock import StateLocked, held, lock_path
from muster.ctld.store import _MIGRATIONS, SCHEMA_VERSION
from muster.ctld.store_pg import STORE_LOCK, dsn_from_config, redact, translate

__all__ = ["CopyError", "CopyResult", "Endpoint", "configured_store", "copy_store", "parse_endpoint"]

BATCH = 1000
_TABLE = re.compile(r"CREATE TABLE IF NOT EXISTS (\w+)\s*\((.*)\)\s*$", re.S | re.I)


class CopyError(Exception):
    """What ``muster`` prints after ``muster: error:``."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    kind: str  # "sqlite" or "postgresql"
    target: str  # a file path, or a libpq connection string
    label: str = ""  # how messages name it (the password left out)

    def __str__(self) -> str:
        return self.label or self.target


def parse_endpoint(text: str) -> Endpoint:
    """``sqlite:PATH`` or a path; ``postgresql://...``/``postgres://...`` or a libpq
    keyword string (``host=db dbname=muster``)."""
    text = text.strip()
    if not text:
        raise CopyError("an empty store location")
    low = text.lower()
    if low.startswith(("postgresql://", "postgres://")) or re.match(r"^\w+\s*=", text):
        return Endpoint("postgresql", text, redact(text))
    if low.startswith("sqlite:"):
        text = text[len("sqlite:") :]
        if text.startswith("//"):
            text = text[2:]
    if not text:
        raise CopyError("sqlite: needs a file path")
    path = os.path.abspath(text)
    return Endpoint("sqlite", path, f"sqlite:{path}")


@dataclass(frozen=True, slots=True)
class Table:
    name: str
    key: tuple[str, ...]  # primary key columns, the order rows are compared in
    text_key: tuple[bool, ...]  # which of them are TEXT (PostgreSQL sorts them with COLLATE "C")
    serial: str | None  # the AUTOINCREMENT column, whose counter must travel


def store_tables(version: int) -> list[Table]:
    """The tables the store's migrations 1..``version`` create, in creation order."""
    out: list[Table] = []
    for v in range(1, version + 1):
        for stmt in _MIGRATIONS[v]:
            m = _TABLE.search(stmt.strip())
            if m:
                out.append(_table(m.group(1), m.group(2)))
    return out


def _table(name: str, body: str) -> Table:
    parts, depth, cur = [], 0, ""
    for ch in body:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    parts.append(cur.strip())
    types = {p.split()[0]: p.split()[1].upper() for p in parts if not p.upper().startswith("PRIMARY KEY")}
    key: tuple[str, ...] = ()
    serial = None
    for p in parts:
        up = p.upper()
        if up.startswith("PRIMARY KEY"):
            key = tuple(c.strip() for c in p[p.index("(") + 1 : p.rindex(")")].split(","))
        elif "PRIMARY KEY" in up:
            key = (p.split()[0],)
            if "AUTOINCREMENT" in up:
                serial = p.split()[0]
    return Table(name, key, tuple(types.get(c) == "TEXT" for c in key), serial)


@dataclass
class CopyResult:
    source: str
    dest: str
    schema: int
    rows: dict[str, int] = field(default_factory=dict)  # per table, checked on both ends
    next_job_id: int = 0
    kept: str | None = None  # the replaced SQLite file, kept


def _q(name: str) -> str:
    return f'"{name}"'


class _Side(abc.ABC):
    """One end of the copy, behind the few operations the copy needs (``_Sqlite``, ``_Pg``)."""

    kind = ""

    def __init__(self, end: Endpoint) -> None:
        self.end = end

    @abc.abstractmethod
    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> Any: ...

    @abc.abstractmethod
    def exists(self, table: str) -> bool: ...

    @abc.abstractmethod
    def columns(self, table: str) -> list[str]: ...

    @abc.abstractmethod
    def rows(self, table: Table, cols: list[str]) -> Iterator[tuple[Any, ...]]: ...

    @abc.abstractmethod
    def counter(self, table: Table) -> int:
        """The last value handed out for ``table.serial`` (past deleted rows too)."""
        ...

    @abc.abstractmethod
    def set_counter(self, table: Table, value: int) -> None: ...

    @abc.abstractmethod
    def create(self, version: int) -> None:
        """The store's tables as migrations 1..``version`` make them."""
        ...

    @abc.abstractmethod
    def insert(self, table: str, cols: list[str], rows: Iterator[tuple[Any, ...]]) -> None: ...

    @abc.abstractmethod
    def close(self) -> None: ...

    def schema_version(self) -> int | None:
        if not self.exists("meta"):
            return None
        row = self.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        return int(row[0]) if row else None

    def holds_data(self) -> str | None:
        """What a store here already holds beyond its schema version, or None."""
        for t in store_tables(SCHEMA_VERSION):
            if not self.exists(t.name):
                continue
            if t.name == "meta":
                n = self.execute("SELECT count(*) FROM meta WHERE key <> 'schema_version'").fetchone()[0]
            else:
                n = self.execute(f"SELECT count(*) FROM {_q(t.name)}").fetchone()[0]
            if n:
                jobs = self.execute("SELECT count(*) FROM jobs").fetchone()[0] if self.exists("jobs") else 0
                return f"schema {self.schema_version()}, {jobs} jobs"
        return None

    def _order(self, table: Table) -> str:
        return ", ".join(_q(c) for c in table.key)


class _Sqlite(_Side):
    kind = "sqlite"

    def __init__(self, end: Endpoint, path: str, create: bool = False) -> None:
        super().__init__(end)
        self.path = path
        mode = "rwc" if create else "rw"
        self.db = sqlite3.connect(f"file:{path}?mode={mode}", uri=True, isolation_level=None)

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        return self.db.execute(sql, params)

    def exists(self, table: str) -> bool:
        row = self.db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone()
        return row is not None

    def columns(self, table: str) -> list[str]:
        return [r[1] for r in self.db.execute(f"PRAGMA table_info({_q(table)})")]

    def rows(self, table: Table, cols: list[str]) -> Iterator[tuple[Any, ...]]:
        yield from self.db.execute(
            f"SELECT {', '.join(_q(c) for c in cols)} FROM {_q(table.name)} ORDER BY {self._order(table)}"
        )

    def counter(self, table: Table) -> int:
        """The last value AUTOINCREMENT handed out (it never goes back, even past deletions)."""
        assert table.serial
        top = self.db.execute(f"SELECT MAX({_q(table.serial)}) FROM {_q(table.name)}").fetchone()[0] or 0
        if not self.exists("sqlite_sequence"):
            return int(top)
        row = self.db.execute("SELECT seq FROM sqlite_sequence WHERE name=?", (table.name,)).fetchone()
        return max(int(top), int(row[0]) if row else 0)

    def set_counter(self, table: Table, value: int) -> None:
        self.db.execute("DELETE FROM sqlite_sequence WHERE name=?", (table.name,))
        if value:
            self.db.execute("INSERT INTO sqlite_sequence(name, seq) VALUES(?, ?)", (table.name, value))

    def create(self, version: int) -> None:
        for v in range(1, version + 1):
            for stmt in _MIGRATIONS[v]:
                self.db.execute(stmt)

    def insert(self, table: str, cols: list[str], rows: Iterator[tuple[Any, ...]]) -> None:
        sql = f"INSERT INTO {_q(table)} ({', '.join(_q(c) for c in cols)}) VALUES ({', '.join('?' * len(cols))})"
        batch: list[tuple[Any, ...]] = []
        for row in rows:
            batch.append(row)
            if len(batch) >= BATCH:
                self.db.executemany(sql, batch)
                batch.clear()
        if batch:
            self.db.executemany(sql, batch)

    def close(self) -> None:
        self.db.close()


class _Pg(_Side):
    kind = "postgresql"

    def __init__(self, end: Endpoint, read_only: bool) -> None:
        super().__init__(end)
        psycopg = require("psycopg", "copying a store to or from PostgreSQL")
        try:
            self.conn = psycopg.connect(end.target, autocommit=False)
        except psycopg.Error as exc:
            raise CopyError(f"cannot connect to {end}: {_first_line(exc)}") from None
        if read_only:  # one snapshot of every table, and a promise not to write
            self.conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            self.conn.read_only = True
        # the controllers' shared lock on this schema's store (store_pg.STORE_LOCK), exclusively
        row = self.conn.execute(f"SELECT pg_try_advisory_xact_lock({STORE_LOCK})").fetchone()
        if not row[0]:
            self.conn.close()
            raise CopyError(f"a controller has the store in {end} open (musterctld); stop it before copying")
        self._cursors = 0

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        pg = translate(sql, bool(params))
        assert pg is not None
        return self.conn.execute(pg, params or None)

    def exists(self, table: str) -> bool:
        row = self.conn.execute("SELECT to_regclass(%s) IS NOT NULL", (_q(table),)).fetchone()
        return bool(row[0])

    def columns(self, table: str) -> list[str]:
        rows = self.conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = %s ORDER BY ordinal_position",
            (table,),
        ).fetchall()
        return [r[0] for r in rows]

    def _order(self, table: Table) -> str:
        # byte order for TEXT keys, as SQLite's BINARY collation sorts them
        return ", ".join(_q(c) + (' COLLATE "C"' if t else "") for c, t in zip(table.key, table.text_key, strict=True))

    def rows(self, table: Table, cols: list[str]) -> Iterator[tuple[Any, ...]]:
        self._cursors += 1
        with self.conn.cursor(name=f"muster_copy_{self._cursors}") as cur:
            cur.itersize = BATCH
            cur.execute(f"SELECT {', '.join(_q(c) for c in cols)} FROM {_q(table.name)} ORDER BY {self._order(table)}")
            yield from cur

    def _sequence(self, table: Table) -> str | None:
        row = self.conn.execute("SELECT pg_get_serial_sequence(%s, %s)", (_q(table.name), table.serial)).fetchone()
        return str(row[0]) if row and row[0] else None

    def counter(self, table: Table) -> int:
        assert table.serial
        top = self.conn.execute(f"SELECT MAX({_q(table.serial)}) FROM {_q(table.name)}").fetchone()[0] or 0
        seq = self._sequence(table)
        if seq is None:
            return int(top)
        last, called = self.conn.execute(f"SELECT last_value, is_called FROM {seq}").fetchone()
        return max(int(top), int(last) if called else int(last) - 1)

    def set_counter(self, table: Table, value: int) -> None:
        seq = self._sequence(table)
        if seq is not None:
            self.conn.execute("SELECT setval(%s, %s, %s)", (seq, max(value, 1), value > 0))

    def drop(self, names: list[str]) -> None:
        for name in reversed(names):
            self.conn.execute(f"DROP TABLE IF EXISTS {_q(name)} CASCADE")

    def create(self, version: int) -> None:
        for v in range(1, version + 1):
            for stmt in _MIGRATIONS[v]:
                pg = translate(stmt, with_params=False)
                if pg is not None:
                    self.conn.execute(pg)

    def insert(self, table: str, cols: list[str], rows: Iterator[tuple[Any, ...]]) -> None:
        with (
            self.conn.cursor() as cur,
            cur.copy(f"COPY {_q(table)} ({', '.join(_q(c) for c in cols)}) FROM STDIN") as cp,
        ):
            for row in rows:
                cp.write_row(row)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.rollback()
        self.conn.close()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def users_of(path: str) -> list[tuple[int, str]]:
    """Processes (pid, command name) that have the SQLite file ``path`` (or its WAL) open."""
    wanted = {os.path.realpath(path), os.path.realpath(path) + "-wal"}
    found = []
    me = os.getpid()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target in wanted:
                try:
                    with open(f"/proc/{pid}/comm") as f:
                        comm = f.read().strip()
                except OSError:
                    comm = "?"
                found.append((int(pid), comm))
                break
    return found


def _refuse_if_open(end: Endpoint) -> None:
    users = users_of(end.target)
    if users:
        pid, comm = users[0]
        raise CopyError(f"{comm} (pid {pid}) has {end.target} open; stop it before copying its store")


def configured_store(config: Config) -> Endpoint:
    """The store ``config`` names; refused while its controller runs (for PostgreSQL the
    copy's own lock tells, from the database)."""
    dsn = dsn_from_config(config)
    if dsn is not None:
        return Endpoint("postgresql", dsn, redact(dsn))
    pid = controller_pid(config)
    if pid is not None:
        who = f"musterctld (pid {pid})" if pid else "a controller"
        raise CopyError(f"{who} runs on {config.state_save_location}; stop it before copying its store")
    db = state_db(config)
    return Endpoint("sqlite", db, f"sqlite:{db}")


def _open_source(end: Endpoint) -> _Side:
    if end.kind == "postgresql":
        return _Pg(end, read_only=True)
    if not os.path.isfile(end.target):
        raise CopyError(f"{end.target}: No such file")
    _refuse_if_open(end)
    try:
        side = _Sqlite(end, end.target)
        side.execute("BEGIN")  # one read transaction: one snapshot of every table
        side.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as exc:
        raise CopyError(f"{end.target} is not a muster state database ({exc})") from None
    return side


def copy_store(source: Endpoint, dest: Endpoint, overwrite: bool = False) -> CopyResult:
    """Copy the whole store at ``source`` to ``dest`` (see the module docstring)."""
    if source.kind == dest.kind and source.target == dest.target:
        raise CopyError("the source and the destination are the same store")
    with contextlib.ExitStack() as locks:
        for state_dir in dict.fromkeys(os.path.dirname(e.target) for e in (source, dest) if e.kind == "sqlite"):
            _lock_state_dir(state_dir, locks)
        return _copy(source, dest, overwrite)


def _lock_state_dir(state_dir: str, locks: contextlib.ExitStack) -> None:
    """A SQLite store in a controller's state directory (its ``musterctld.lock`` is there):
    the controller's own lock (``ctld.statelock``), held for the whole copy, so that the copy
    is refused while musterctld runs and musterctld is refused while the copy runs."""
    if not os.path.exists(lock_path(state_dir)):
        return
    try:
        locks.enter_context(held(state_dir, "muster-store-copy"))
    except StateLocked as exc:
        raise CopyError(f"{exc.holder} runs on {state_dir}; stop it before copying its store") from None


def _copy(source: Endpoint, dest: Endpoint, overwrite: bool) -> CopyResult:
    src = _open_source(source)
    try:
        version = src.schema_version()
        if version is None:
            raise CopyError(f"{source} holds no muster store (no schema version)")
        if version > SCHEMA_VERSION:
            raise CopyError(
                f"{source} has schema {version}, newer than this muster ({SCHEMA_VERSION}); "
                "copy it with the muster that wrote it"
            )
        tables = [t for t in store_tables(version) if src.exists(t.name)]
        if dest.kind == "postgresql":
            return _into_pg(src, dest, tables, version, overwrite)
        return _into_sqlite(src, dest, tables, version, overwrite)
    except sqlite3.Error as exc:
        raise CopyError(f"copy from {source} to {dest} failed, nothing was written: {_first_line(exc)}") from None
    except Exception as exc:
        if type(exc).__module__.startswith("psycopg"):
            raise CopyError(f"copy from {source} to {dest} failed, nothing was written: {_first_line(exc)}") from None
        raise
    finally:
        src.close()


def _transfer(src: _Side, dst: _Side, tables: list[Table], version: int, result: CopyResult) -> None:
    """Create the schema at ``version`` in ``dst``, copy every row, carry the counters, then
    read everything back from both ends and compare."""
    dst.create(version)
    for t in tables:
        cols = src.columns(t.name)
        if sorted(cols) != sorted(dst.columns(t.name)):
            raise CopyError(f"table {t.name}: columns differ ({cols} against {dst.columns(t.name)})")
        dst.insert(t.name, cols, src.rows(t, cols))
        if t.serial:
            dst.set_counter(t, src.counter(t))
    for t in tables:
        cols = src.columns(t.name)
        result.rows[t.name] = _compare(t, cols, src, dst)
        if t.serial and dst.counter(t) != src.counter(t):
            raise CopyError(f"table {t.name}: the {t.serial} counter is {dst.counter(t)}, not {src.counter(t)}")
    row = dst.execute("SELECT value FROM meta WHERE key='next_job_id'").fetchone()
    top = dst.execute("SELECT MAX(job_id) FROM jobs").fetchone()[0] or 0
    result.next_job_id = max(int(row[0]) if row else 0, int(top) + 1)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        return float(a) == float(b)
    return bool(a == b)


def _compare(t: Table, cols: list[str], src: _Side, dst: _Side) -> int:
    n = 0
    for a, b in zip_longest(src.rows(t, cols), dst.rows(t, cols)):
        if a is None or b is None:
            raise CopyError(f"table {t.name}: {n} rows match, then one end has a row the other lacks")
        for col, x, y in zip(cols, a, b, strict=True):
            if not _same(x, y):
                key = {c: a[cols.index(c)] for c in t.key}
                raise CopyError(f"table {t.name}, row {key}: {col} is {y!r} in the copy, {x!r} in the source")
        n += 1
    return n


def _into_pg(src: _Side, dest: Endpoint, tables: list[Table], version: int, overwrite: bool) -> CopyResult:
    dst = _Pg(dest, read_only=False)
    try:
        held = dst.holds_data()
        if held and not overwrite:
            raise CopyError(f"{dest} already holds a muster store ({held}); --overwrite replaces it")
        there = dst.schema_version() or 0
        if there > SCHEMA_VERSION:  # its tables are not all known here: not ours to drop
            raise CopyError(f"{dest} holds a store of schema {there}, newer than this muster ({SCHEMA_VERSION})")
        dst.drop([t.name for t in store_tables(SCHEMA_VERSION)])
        result = CopyResult(str(src.end), str(dest), version)
        _transfer(src, dst, tables, version, result)
        dst.conn.commit()
        return result
    finally:
        dst.close()


def _into_sqlite(src: _Side, dest: Endpoint, tables: list[Table], version: int, overwrite: bool) -> CopyResult:
    path = dest.target
    if os.path.exists(path):
        _refuse_if_open(dest)
        with contextlib.closing(_Sqlite(dest, path)) as old:
            held = old.holds_data()
            if held and not overwrite:
                raise CopyError(f"{path} already holds a muster store ({held}); --overwrite replaces it")
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    part = f"{path}.part"
    for stale in (part, f"{part}-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stale)
    os.close(os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    result = CopyResult(str(src.end), f"sqlite:{path}", version)
    try:
        dst = _Sqlite(dest, part, create=True)
        try:
            dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file to rename
            dst.execute("BEGIN IMMEDIATE")
            _transfer(src, dst, tables, version, result)
            dst.execute("COMMIT")
        finally:
            dst.close()
        if os.path.exists(path):
            _refuse_if_open(dest)  # again: a controller may have started on it meanwhile
            result.kept = _set_aside(path)
        os.replace(part, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(part)
        raise
    return result


def _set_aside(path: str) -> str:
    """Make the replaced file self-contained (its WAL folded in) and keep it as ``.pre-copy``."""
    with contextlib.closing(sqlite3.connect(path)) as old:
        old.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        old.execute("PRAGMA journal_mode=DELETE")
    kept = f"{path}.pre-copy"
    os.replace(path, kept)
    for extra in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path + extra)
    return kept
