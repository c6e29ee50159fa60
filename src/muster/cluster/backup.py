"""``muster backup FILE`` and ``muster restore FILE``: the controller's state, copied whole.

The state is one SQLite database, ``<StateSaveLocation>/muster.db``: jobs and their event
log, accounting records, associations and QOS, reservations, nodes' admin states, job
steps. Both commands use SQLite's online backup API (``sqlite3.Connection.backup``):

* **backup** reads the database file directly, not through the controller. SQLite gives the
  copy one consistent snapshot (the whole copy is one read transaction; in WAL mode it
  never blocks the controller's commits), so it is safe while musterctld runs, and works
  as well when it is stopped. It needs read access to StateSaveLocation, which is what makes
  it an administrator's command (the file holds every user's jobs). The copy is written
  aside, checked (``PRAGMA integrity_check``), made a self-contained single file (no
  ``-wal``) with mode 0600, then renamed into place.
* **restore** is refused while a controller runs on that state directory: it takes the
  controller's own lock (``ctld.statelock``) for the time it writes, so it is refused while
  musterctld holds it and a musterctld started meanwhile is refused (its pid file and socket
  are checked too, for a controller of an older muster). A running controller keeps its
  memory and would write over the restored file. The files it writes are 0600. The file is checked first (a muster database, a schema this muster
  reads, intact); the current database is kept beside it as ``muster.db.pre-restore``;
  then the backup is copied in. The next musterctld start loads the restored state.

With PostgreSQL as the store (``store_pg``) both refuse and point to ``pg_dump`` and
``pg_restore`` (docs/operations.md).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
from dataclasses import dataclass

from muster.core.config import Config
from muster.ctld.statelock import StateLocked, held
from muster.ctld.store import SCHEMA_VERSION, private_files
from muster.ctld.store_pg import dsn_from_config

__all__ = ["BackupError", "Summary", "backup", "controller_pid", "restore", "state_db"]

PG_HINT = (
    "the state is in PostgreSQL (AccountingStorageType/AccountingStorageURL): "
    "use pg_dump -Fc and pg_restore (see docs/operations.md)"
)


class BackupError(Exception):
    """What ``muster`` prints after ``muster: error:``."""


@dataclass(frozen=True, slots=True)
class Summary:
    path: str
    schema: int
    jobs: int
    size: int


def state_db(config: Config) -> str:
    """Where musterctld keeps its database for ``config``."""
    return os.path.join(config.state_save_location, "muster.db")


def _describe(db: sqlite3.Connection, path: str) -> Summary:
    """Check that ``db`` is an intact muster database this muster can read."""
    try:
        ok = db.execute("PRAGMA integrity_check").fetchone()
        row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        jobs = db.execute("SELECT count(*) FROM jobs").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise BackupError(f"{path} is not a muster state database ({exc})") from None
    if ok is None or ok[0] != "ok":
        raise BackupError(f"{path} is damaged: integrity check says {ok[0] if ok else 'nothing'}")
    if row is None:
        raise BackupError(f"{path} is not a muster state database (no schema version)")
    schema = int(row[0])
    if schema > SCHEMA_VERSION:
        raise BackupError(f"{path} has schema {schema}, newer than this muster ({SCHEMA_VERSION})")
    return Summary(path, schema, int(jobs), os.path.getsize(path) if os.path.exists(path) else 0)


def _open_existing(path: str) -> sqlite3.Connection:
    if not os.path.isfile(path):
        raise BackupError(f"{path}: No such file")
    try:
        return sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise BackupError(f"{path}: {exc}") from None


def backup(config: Config, dest: str) -> Summary:
    """Copy the controller's state to ``dest`` (a new file), online."""
    if dsn_from_config(config) is not None:
        raise BackupError(PG_HINT)
    source = state_db(config)
    if os.path.exists(dest):
        raise BackupError(f"{dest} exists; refusing to overwrite it")
    part = f"{dest}.part"
    with contextlib.closing(_open_existing(source)) as src:
        try:
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.close(fd)
            with contextlib.closing(sqlite3.connect(part)) as dst:
                src.backup(dst)  # every page in one step: one consistent snapshot
                dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
                summary = _describe(dst, part)
        except BackupError:
            _unlink(part)
            raise
        except (OSError, sqlite3.Error) as exc:
            _unlink(part)
            raise BackupError(f"cannot write {dest}: {getattr(exc, 'strerror', None) or exc}") from None
    os.replace(part, dest)
    return Summary(dest, summary.schema, summary.jobs, os.path.getsize(dest))


def controller_pid(config: Config) -> int | None:
    """The pid of a musterctld running on ``config``'s state directory, or None: its pid
    file names a live musterctld, or its socket answers."""
    pidfile = os.path.join(config.state_save_location, "musterctld.pid")
    try:
        with open(pidfile) as f:
            pid = int(f.read().strip())
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"musterctld" in f.read():
                return pid
    except (OSError, ValueError):
        pass
    with contextlib.closing(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)) as s:
        s.settimeout(1.0)
        try:
            s.connect(config.ctld_socket)
        except OSError:
            return None
    return 0  # something answers on its socket; the pid is unknown


def restore(config: Config, source: str) -> tuple[Summary, str | None]:
    """Replace the controller's state with the backup ``source``; returns what was restored
    and where the state it replaced was kept (None when there was none)."""
    if dsn_from_config(config) is not None:
        raise BackupError(PG_HINT.replace("pg_dump -Fc and pg_restore", "pg_restore"))
    try:
        os.makedirs(config.state_save_location, mode=0o700, exist_ok=True)
        with held(config.state_save_location, "muster-restore"):
            return _restore(config, source)
    except StateLocked as exc:
        raise BackupError(f"{exc.holder} runs on {config.state_save_location}; stop it before restoring") from None
    except OSError as exc:
        raise BackupError(f"{exc.filename or config.state_save_location}: {exc.strerror}") from None


def _restore(config: Config, source: str) -> tuple[Summary, str | None]:
    pid = controller_pid(config)
    if pid is not None:
        who = f"musterctld (pid {pid})" if pid else "a controller"
        raise BackupError(f"{who} runs on {config.state_save_location}; stop it before restoring")
    target = state_db(config)
    with contextlib.closing(_open_existing(source)) as src:
        summary = _describe(src, source)
        kept = None
        try:
            if os.path.exists(target):
                kept = f"{target}.pre-restore"
                _unlink(kept)
                private_files(kept)
                with contextlib.closing(sqlite3.connect(target)) as cur, contextlib.closing(sqlite3.connect(kept)) as k:
                    cur.backup(k)
                os.chmod(kept, 0o600)
            private_files(target)
            with contextlib.closing(sqlite3.connect(target)) as dst:
                src.backup(dst)
                dst.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except (OSError, sqlite3.Error) as exc:
            raise BackupError(f"cannot write {target}: {getattr(exc, 'strerror', None) or exc}") from None
    return summary, kept


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
