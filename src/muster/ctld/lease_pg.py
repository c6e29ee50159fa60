"""The controllers' election kept by PostgreSQL (``ctld.lease``'s ``LeaseBackend``).

One connection of its own (autocommit) holds the session advisory lock, so the lock lives
exactly as long as this process's session; the lease row is ``muster_lease`` (one row, in
the store's schema). Times are the database server's (``clock_timestamp()``), so the head
nodes' clocks need not agree. A lost connection is opened again on the next call.
"""

from __future__ import annotations

from typing import Any

from muster.core.extras import require
from muster.ctld.lease import Lease

_COLUMNS = "holder, epoch, expires, lock_pid, store_pid, takeover, takeover_at"
_NOW = "EXTRACT(EPOCH FROM clock_timestamp())::double precision"

SCHEMA = [
    """CREATE TABLE IF NOT EXISTS muster_lease (
           id INTEGER PRIMARY KEY CHECK (id = 1),
           holder TEXT NOT NULL DEFAULT '',
           epoch BIGINT NOT NULL DEFAULT 0,
           expires DOUBLE PRECISION NOT NULL DEFAULT 0,
           lock_pid INTEGER NOT NULL DEFAULT 0,
           store_pid INTEGER NOT NULL DEFAULT 0,
           takeover TEXT NOT NULL DEFAULT '',
           takeover_at DOUBLE PRECISION NOT NULL DEFAULT 0)""",
    "INSERT INTO muster_lease(id) VALUES (1) ON CONFLICT (id) DO NOTHING",
]

# The fence every store transaction runs first (``PgStore.fence``): it also holds the row
# shared until commit, so an epoch bump waits for commits in flight and none lands after it.
FENCE_SQL = "SELECT epoch FROM muster_lease WHERE id = 1 FOR SHARE"


def _lease(row: Any) -> Lease:
    return Lease(str(row[0]), int(row[1]), float(row[2]), int(row[3]), int(row[4]), str(row[5]), float(row[6]))


class PgLease:
    def __init__(self, dsn: str, cluster: str, connect_timeout: float = 5.0) -> None:
        self.dsn = dsn
        self.cluster = cluster
        self.connect_timeout = connect_timeout
        self._conn: Any = None
        self._key: int | None = None

    def _db(self) -> Any:
        if self._conn is None or self._conn.closed:
            psycopg = require("psycopg", "several controllers (SlurmctldHost listed more than once)")
            self._conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=max(1, int(self.connect_timeout)))
            # a takeover never waits long on a row a hung session holds: it ends that session first
            self._conn.execute("SET lock_timeout = '10s'")
            for stmt in SCHEMA:
                self._conn.execute(stmt)
            # One lock per cluster and schema: several test clusters share a database.
            row = self._conn.execute(
                "SELECT hashtext(current_schema() || ':muster:' || %s)", (self.cluster,)
            ).fetchone()
            self._key = int(row[0])
        return self._conn

    def _run(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        try:
            return self._db().execute(sql, params or None)
        except Exception:
            self.close()  # the next call opens a new session
            raise

    def try_lock(self) -> bool:
        self._db()
        row = self._run("SELECT pg_try_advisory_lock(%s)", (self._key,)).fetchone()
        return bool(row[0])

    def unlock(self) -> None:
        if self._conn is not None and not self._conn.closed:
            self._run("SELECT pg_advisory_unlock(%s)", (self._key,))

    def read(self) -> tuple[Lease, float]:
        row = self._run(f"SELECT {_COLUMNS}, {_NOW} FROM muster_lease WHERE id = 1").fetchone()
        return _lease(row), float(row[7])

    def take(self, me: str, timeout: float) -> int:
        row = self._run(
            f"UPDATE muster_lease SET holder = %s, epoch = epoch + 1, expires = {_NOW} + %s, "
            "lock_pid = pg_backend_pid(), store_pid = 0, "
            "takeover = CASE WHEN takeover = %s THEN '' ELSE takeover END WHERE id = 1 RETURNING epoch",
            (me, timeout, me),
        ).fetchone()
        return int(row[0])

    def renew(self, me: str, epoch: int, timeout: float) -> tuple[Lease | None, float]:
        if self._conn is None or self._conn.closed:  # the session that held the lock is gone
            raise ConnectionError("the lease's database session was lost")
        row = self._run(
            f"UPDATE muster_lease SET expires = {_NOW} + %s WHERE id = 1 AND epoch = %s AND holder = %s "
            f"RETURNING {_COLUMNS}, {_NOW}",
            (timeout, epoch, me),
        ).fetchone()
        if row is None:
            return None, 0.0
        return _lease(row), float(row[7])

    def note_store(self, epoch: int, pid: int) -> None:
        self._run("UPDATE muster_lease SET store_pid = %s WHERE id = 1 AND epoch = %s", (pid, epoch))

    def terminate(self, pids: list[int]) -> None:
        me = self._run("SELECT pg_backend_pid()").fetchone()[0]
        for pid in pids:
            if pid and pid != me:
                self._run("SELECT pg_terminate_backend(%s)", (pid,))

    def ask_takeover(self, me: str) -> None:
        self._run(f"UPDATE muster_lease SET takeover = %s, takeover_at = {_NOW} WHERE id = 1", (me,))

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: S110 - closing a broken connection
                pass
