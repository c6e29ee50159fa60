"""Durable state: SQLite in WAL mode, an append-only event log plus projections.

Every accepted change is written in one transaction (event row + projection row) and
committed with ``synchronous=FULL`` before the request is answered, so a reply such as
``Submitted batch job N`` means job N survives ``kill -9`` of the controller. On start the
projections are loaded; the schema is versioned and migrated in ``migrate``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from muster.core.errors import StorageError
from muster.core.events import EventKind
from muster.core.job import Job
from muster.core.steps import Step
from muster.ctld import records

SCHEMA_VERSION = 5
# meta keys a migration leaves: the schema it started from and the copy kept of it
UPGRADED_FROM = "upgraded_from_schema"
UPGRADE_BACKUP = "upgrade_backup"
# the event kind of the failure ledger's records (``add_ledger``)
LEDGER_KIND = "ledger"

_MIGRATIONS: dict[int, list[str]] = {
    1: [
        "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        """CREATE TABLE IF NOT EXISTS jobs (
               job_id INTEGER PRIMARY KEY,
               state TEXT NOT NULL,
               user TEXT NOT NULL,
               submit_time REAL NOT NULL,
               end_time REAL,
               data TEXT NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state)",
        "CREATE INDEX IF NOT EXISTS jobs_end ON jobs(end_time)",
        """CREATE TABLE IF NOT EXISTS events (
               seq INTEGER PRIMARY KEY AUTOINCREMENT,
               time REAL NOT NULL,
               job_id INTEGER,
               kind TEXT NOT NULL,
               data TEXT NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS events_job ON events(job_id)",
        "CREATE TABLE IF NOT EXISTS nodes (name TEXT PRIMARY KEY, data TEXT NOT NULL)",
    ],
    2: ["CREATE TABLE IF NOT EXISTS reservations (name TEXT PRIMARY KEY, data TEXT NOT NULL)"],
    3: records.SCHEMA,  # accounting: one record per job attempt; associations and QOS
    # Job steps (srun), one row per step of each attempt of a job; ``data`` is
    # ``core.steps.Step.to_dict()`` (with flat ``nodes``, ``ncpus``, ``gpus``, ``ntasks``).
    4: [
        """CREATE TABLE IF NOT EXISTS steps (
               job_id INTEGER NOT NULL,
               attempt INTEGER NOT NULL,
               step_id INTEGER NOT NULL,
               name TEXT NOT NULL,
               state TEXT NOT NULL,
               user TEXT NOT NULL,
               start_time REAL NOT NULL,
               end_time REAL,
               exit_code INTEGER NOT NULL DEFAULT 0,
               signal INTEGER NOT NULL DEFAULT 0,
               data TEXT NOT NULL,
               PRIMARY KEY (job_id, attempt, step_id))""",
        "CREATE INDEX IF NOT EXISTS steps_end ON steps(end_time)",
    ],
    # Nodes going out of service (DOWN, or drained) and back, for sreport's Down column:
    # one row per change, with the node's size at the time.
    5: [
        """CREATE TABLE IF NOT EXISTS node_events (
               seq INTEGER PRIMARY KEY AUTOINCREMENT,
               node TEXT NOT NULL,
               time REAL NOT NULL,
               down INTEGER NOT NULL,
               reason TEXT NOT NULL DEFAULT '',
               data TEXT NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS node_events_time ON node_events(time)",
    ],
}


class SchemaTooNew(StorageError):
    """The store was written by a newer muster (its schema is above ``SCHEMA_VERSION``)."""


def _is_db_error(exc: BaseException) -> bool:
    """sqlite3's errors, and psycopg's (the PostgreSQL store), without importing psycopg."""
    return isinstance(exc, sqlite3.Error) or type(exc).__module__.startswith("psycopg")


def storage_cause(exc: BaseException, path: str) -> str:
    """A database error in the words of the operating system where one applies."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    low = text.lower()
    if "disk is full" in low or "no space" in low:
        return "No space left on device"
    if "readonly" in low or "read-only" in low or "read only" in low:
        return "Read-only file system"
    if "disk i/o error" in low:
        return "No space left on device" if _disk_full(path) else "Input/output error"
    if "locked" in low or "busy" in low:
        return f"state database {path} is locked by another process"
    if "malformed" in low or "not a database" in low or "corrupt" in low:
        return f"state database {path} is corrupt"
    return f"state database error: {text}"


def _disk_full(path: str) -> bool:
    """SQLite reports a write that hit ENOSPC in its WAL as a plain I/O error: look."""
    if path == ":memory:" or "://" in path or "=" in path:
        return False
    try:
        st = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 64 * 1024


def private_files(path: str) -> None:
    """The database file created 0600 whatever the umask, and it and its ``-wal`` and
    ``-shm`` made 0600 if an older muster left them readable (SQLite gives a new ``-wal``
    and ``-shm`` the mode of the database file). They hold every job's script and
    environment: docs/security.md."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    for name in (path, f"{path}-wal", f"{path}-shm"):
        with contextlib.suppress(FileNotFoundError, PermissionError):  # not ours: left as it is
            if os.stat(name).st_mode & 0o077:
                os.chmod(name, 0o600)


class Store:
    # >0 while a group commit is open (``group``): a transaction then joins it
    _joined = 0

    def __init__(self, path: str) -> None:
        self.path = path
        if path != ":memory:":
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            private_files(path)
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            self._refuse_newer()  # before anything is set on the file, even its journal mode
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self.migrate()
        except BaseException:
            self.db.close()  # a store refused (too new) or not migrated holds nothing open
            raise

    def migrate(self) -> None:
        """Bring the schema to ``SCHEMA_VERSION``: every step in one transaction (a step
        that fails leaves the store as it was), after the file as it was is kept beside it
        (``_keep_before_migration``). A store of a newer schema is refused, untouched."""
        self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        current = int(row[0]) if row else 0
        if current > SCHEMA_VERSION:
            raise SchemaTooNew(self._too_new(current))
        if current == SCHEMA_VERSION:
            return
        kept = self._keep_before_migration(current) if current else None
        with self.transaction():
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for stmt in _MIGRATIONS[version]:
                    self.db.execute(stmt)
                self._set_meta("schema_version", str(version))
            if kept:
                # what an older muster names when it finds this store too new (``_too_new``)
                self._set_meta(UPGRADED_FROM, str(current))
                self._set_meta(UPGRADE_BACKUP, kept)

    def _refuse_newer(self) -> None:
        try:
            row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        except sqlite3.DatabaseError:
            return  # a new file, or one that ``migrate`` judges
        if row and int(row[0]) > SCHEMA_VERSION:
            raise SchemaTooNew(self._too_new(int(row[0])))

    def _keep_before_migration(self, current: int) -> str | None:
        """A copy of the store as it was, ``<file>.schema-N`` (mode 0600), taken before a
        migration: what going back to the older muster restores. None where there is no
        file (``:memory:``; PostgreSQL: pg_dump before upgrading, docs/upgrade.md)."""
        if self.path == ":memory:":
            return None
        kept = f"{self.path}.schema-{current}"
        part = f"{kept}.part"
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(part)
            os.close(os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            with contextlib.closing(sqlite3.connect(part)) as copy:
                self.db.backup(copy)
                copy.execute("PRAGMA journal_mode=DELETE")
            os.replace(part, kept)
        except (OSError, sqlite3.Error) as exc:
            with contextlib.suppress(OSError):
                os.unlink(part)
            cause = exc.strerror if isinstance(exc, OSError) else storage_cause(exc, kept)
            raise StorageError(
                f"cannot keep {self.path} as it was before upgrading its schema from {current} "
                f"to {SCHEMA_VERSION} ({kept}: {cause}); nothing was changed"
            ) from None
        return kept

    def _too_new(self, current: int) -> str:
        """Why this (older) muster refuses the store, and the way back."""
        head = (
            f"state database {self.path} has schema {current}, newer than this muster's ({SCHEMA_VERSION}): "
            "a newer muster wrote it, and this one leaves it untouched. Run that newer muster, or go back: "
        )
        row = self.db.execute(
            "SELECT (SELECT value FROM meta WHERE key=?), (SELECT value FROM meta WHERE key=?)",
            (UPGRADED_FROM, UPGRADE_BACKUP),
        ).fetchone()
        before, kept = (row[0], row[1]) if row else (None, None)
        if before is not None and kept and int(before) <= SCHEMA_VERSION:
            return head + (
                f"stop musterctld and run `muster restore {kept}` (the store as it was at schema {before}, "
                "kept by the upgrade; what changed since is lost), or restore a `muster backup` file "
                "taken before the upgrade (docs/upgrade.md)"
            )
        return head + (
            f"restore a backup of schema {SCHEMA_VERSION} or older taken before the upgrade "
            "(`muster restore FILE`; PostgreSQL: pg_restore of its pg_dump; docs/upgrade.md)"
        )

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic write. A database error (a full disk, an I/O error, a lock held by
        someone else, a corrupt file) rolls everything back and is raised as
        ``StorageError`` with its cause in plain words; the store stays usable, so the
        same change can be retried once space is freed. Inside ``group`` it joins the
        group's transaction: an error goes to the group, which undoes it all."""
        if self._joined:
            yield self.db
            return
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except Exception as exc:
            raise self._storage_error(exc) from exc
        try:
            self._fence()
            yield self.db
            self.db.execute("COMMIT")
        except BaseException as exc:
            try:
                self.db.execute("ROLLBACK")
            except Exception:  # noqa: S110 - the transaction may already be gone
                pass
            if isinstance(exc, Exception) and _is_db_error(exc):
                raise self._storage_error(exc) from exc
            raise

    @contextmanager
    def group(self) -> Iterator[None]:
        """One transaction, one commit, for several changes each written as if alone
        (a group commit: one fsync instead of one each). Any error inside rolls all of
        them back and goes on to the caller (``ctld.commits``)."""
        with self.transaction():
            self._joined += 1
            try:
                yield
            finally:
                self._joined -= 1

    def _fence(self) -> None:
        """Checked first in every transaction: the PostgreSQL store refuses to commit for
        a controller that is no longer the active one (``PgStore.fence``)."""

    def _storage_error(self, exc: BaseException) -> StorageError:
        return StorageError(storage_cause(exc, self.path))

    def _set_meta(self, key: str, value: str) -> None:
        self.db.execute(
            "INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
            (key, value),
        )

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else default

    def set_meta(self, key: str, value: str) -> None:
        with self.transaction():
            self._set_meta(key, value)

    # --- jobs -------------------------------------------------------------------------

    def _put_job(self, job: Job, data: str) -> None:
        self.db.execute(
            "INSERT INTO jobs(job_id, state, user, submit_time, end_time, data) VALUES(?,?,?,?,?,?) "
            "ON CONFLICT(job_id) DO UPDATE SET state=excluded.state, end_time=excluded.end_time, "
            "data=excluded.data",
            (
                job.job_id,
                str(job.state),
                job.user,
                job.submit_time,
                job.end_time,
                data,
            ),
        )

    def _put_and_project(self, now: float, job: Job, kind: str) -> None:
        """The job's row and its accounting record, from one encoding of the job."""
        data = json.dumps(job.to_dict(), separators=(",", ":"))
        self._put_job(job, data)
        records.project(self.db, now, job, kind, data)

    def _event(self, now: float, job_id: int | None, kind: str, data: dict[str, Any]) -> None:
        self.db.execute(
            "INSERT INTO events(time, job_id, kind, data) VALUES(?,?,?,?)",
            (now, job_id, kind, json.dumps(data, separators=(",", ":"))),
        )

    def record(
        self,
        now: float,
        changes: Iterable[tuple[Job, EventKind, dict[str, Any]]],
        meta: dict[str, str] | None = None,
    ) -> None:
        """Persist job changes atomically: for each (job, event kind, event data) one event
        row and the job's new projection."""
        with self.transaction():
            for job, kind, data in changes:
                self._event(now, job.job_id, kind, data)
                self._put_and_project(now, job, kind)
            for k, v in (meta or {}).items():
                self._set_meta(k, v)

    def load_jobs(self, *, active_only: bool = False, ended_after: float | None = None) -> list[Job]:
        """Jobs to hold in memory: every non-terminal job, plus those that ended after
        ``ended_after`` (for squeue's MinJobAge window)."""
        if ended_after is None:
            rows = self.db.execute("SELECT data FROM jobs ORDER BY job_id").fetchall()
        else:
            rows = self.db.execute(
                "SELECT data FROM jobs WHERE end_time IS NULL OR end_time >= ? "
                "OR state IN ('PENDING','RUNNING','SUSPENDED') OR data LIKE '%\"completing\":true%' "
                "ORDER BY job_id",
                (ended_after,),
            ).fetchall()
        jobs = [Job.from_dict(json.loads(r[0])) for r in rows]
        if active_only:
            jobs = [j for j in jobs if not j.state.is_terminal or j.completing]
        return jobs

    def last_events(self, kinds: Iterable[str]) -> dict[int, str]:
        """Each job's last event among ``kinds`` (the log's view of where it stands)."""
        kinds = list(kinds)
        marks = ",".join("?" * len(kinds))
        rows = self.db.execute(
            f"SELECT e.job_id, e.kind FROM events e JOIN (SELECT job_id, MAX(seq) AS seq FROM events "
            f"WHERE kind IN ({marks}) AND job_id IS NOT NULL GROUP BY job_id) last ON e.seq = last.seq",
            kinds,
        ).fetchall()
        return {int(job_id): str(kind) for job_id, kind in rows}

    def submit_tokens(self, since_job_id: int) -> list[tuple[int, int, str]]:
        """``(job_id, uid, request token)`` of the submissions from ``since_job_id`` on that
        carried a client's token (``ctld.jobs``: a retried submission finds its job)."""
        rows = self.db.execute(
            "SELECT job_id, data FROM events WHERE job_id >= ? AND kind = 'submit' AND data LIKE ?",
            (since_job_id, '%"request":%'),
        ).fetchall()
        out = []
        for job_id, data in rows:
            d = json.loads(data)
            if d.get("request"):
                out.append((int(job_id), int(d.get("uid", -1)), str(d["request"])))
        return out

    def get_job(self, job_id: int) -> Job | None:
        row = self.db.execute("SELECT data FROM jobs WHERE job_id=?", (job_id,)).fetchone()
        return Job.from_dict(json.loads(row[0])) if row else None

    def max_job_id(self) -> int:
        row = self.db.execute("SELECT MAX(job_id) FROM jobs").fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def events(self, job_id: int) -> list[tuple[float, str, dict[str, Any]]]:
        rows = self.db.execute("SELECT time, kind, data FROM events WHERE job_id=? ORDER BY seq", (job_id,)).fetchall()
        return [(t, k, json.loads(d)) for t, k, d in rows]

    # --- nodes (admin-set state that must survive restarts: drain, down, reasons) -------

    def put_node(self, name: str, data: dict[str, Any]) -> None:
        self.put_nodes({name: data})

    def put_nodes(self, nodes: dict[str, dict[str, Any]]) -> None:
        """Several nodes' admin states in one transaction (all or none)."""
        with self.transaction():
            for name, data in nodes.items():
                self.db.execute(
                    "INSERT INTO nodes(name, data) VALUES(?, ?) ON CONFLICT(name) DO UPDATE SET data=excluded.data",
                    (name, json.dumps(data)),
                )

    def load_nodes(self) -> dict[str, dict[str, Any]]:
        return {n: json.loads(d) for n, d in self.db.execute("SELECT name, data FROM nodes")}

    # --- node outages ----------------------------------------------------------------------

    def record_node_events(self, now: float, changes: list[tuple[str, bool, str, dict[str, Any]]]) -> None:
        """``(node, down, reason, sizes)`` per node that went out of service or came back."""
        with self.transaction():
            for node, down, reason, sizes in changes:
                self.db.execute(
                    "INSERT INTO node_events(node, time, down, reason, data) VALUES(?,?,?,?,?)",
                    (node, now, 1 if down else 0, reason, json.dumps(sizes, separators=(",", ":"))),
                )

    def node_events(self, until: float | None = None) -> list[tuple[str, float, bool, str, dict[str, Any]]]:
        """Every change up to ``until``, oldest first: ``(node, time, down, reason, sizes)``."""
        sql = "SELECT node, time, down, reason, data FROM node_events"
        params: tuple[Any, ...] = ()
        if until is not None:
            sql += " WHERE time <= ?"
            params = (until,)
        rows = self.db.execute(sql + " ORDER BY seq", params).fetchall()
        return [(n, float(t), bool(d), r, json.loads(data)) for n, t, d, r, data in rows]

    def last_node_states(self) -> dict[str, bool]:
        """Whether each node was last recorded out of service."""
        return {node: down for node, _t, down, _r, _d in self.node_events()}

    # --- the failure ledger (``ctld.ledger``) ----------------------------------------------
    # Rows of the event log with kind ``ledger`` and no job id (the job is in ``data``): the
    # log is append-only, in both backends, and ``events(job_id)`` never shows them.

    def add_ledger(self, now: float, data: dict[str, Any]) -> None:
        """One record of the failure ledger, committed."""
        with self.transaction():
            self._event(now, None, LEDGER_KIND, data)

    def ledger(self, since: float) -> list[tuple[float, dict[str, Any]]]:
        """The ledger's records from ``since`` on, oldest first: ``(time, data)``."""
        rows = self.db.execute(
            "SELECT time, data FROM events WHERE kind = ? AND job_id IS NULL AND time >= ? ORDER BY seq",
            (LEDGER_KIND, since),
        ).fetchall()
        return [(float(t), json.loads(d)) for t, d in rows]

    # --- reservations ----------------------------------------------------------------------

    def put_reservation(self, name: str, data: dict[str, Any] | None) -> None:
        """Create or replace a reservation; ``None`` deletes it."""
        with self.transaction():
            if data is None:
                self.db.execute("DELETE FROM reservations WHERE name=?", (name,))
            else:
                self.db.execute(
                    "INSERT INTO reservations(name, data) VALUES(?, ?) "
                    "ON CONFLICT(name) DO UPDATE SET data=excluded.data",
                    (name, json.dumps(data)),
                )

    def load_reservations(self) -> dict[str, dict[str, Any]]:
        return {n: json.loads(d) for n, d in self.db.execute("SELECT name, data FROM reservations")}

    # --- job steps (srun); accounting reads the same rows --------------------------------

    def _put_step(self, step: Step) -> None:
        self.db.execute(
            "INSERT INTO steps(job_id, attempt, step_id, name, state, user, start_time, end_time, "
            "exit_code, signal, data) VALUES(?,?,?,?,?,?,?,?,?,?,?) "
            "ON CONFLICT(job_id, attempt, step_id) DO UPDATE SET state=excluded.state, "
            "end_time=excluded.end_time, exit_code=excluded.exit_code, signal=excluded.signal, "
            "data=excluded.data",
            (
                step.job_id,
                step.attempt,
                step.step_id,
                step.name,
                step.state,
                step.user,
                step.start_time,
                step.end_time,
                step.exit_code,
                step.exit_signal,
                json.dumps(step.to_dict(), separators=(",", ":")),
            ),
        )

    def record_steps(
        self,
        now: float,
        steps: Iterable[tuple[Step, str]],
        jobs: Iterable[tuple[Job, EventKind, dict[str, Any]]] = (),
    ) -> None:
        """Persist step changes (an event row ``step_<kind>`` each) and, in the same
        transaction, job changes exactly as ``record`` does."""
        with self.transaction():
            for step, kind in steps:
                self._event(
                    now,
                    step.job_id,
                    f"step_{kind}",
                    {"step": step.step_id, "attempt": step.attempt, "state": step.state},
                )
                self._put_step(step)
            for job, kind, data in jobs:
                self._event(now, job.job_id, kind, data)
                self._put_and_project(now, job, kind)

    def load_steps(self, job_ids: Iterable[int]) -> list[Step]:
        """Every recorded step of these jobs (all attempts), by job, attempt and step."""
        ids = sorted(set(job_ids))
        out: list[Step] = []
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            marks = ",".join("?" * len(chunk))
            rows = self.db.execute(
                f"SELECT data FROM steps WHERE job_id IN ({marks}) ORDER BY job_id, attempt, step_id",
                chunk,
            ).fetchall()
            out.extend(Step.from_dict(json.loads(r[0])) for r in rows)
        return out

    def close(self) -> None:
        self.db.close()
