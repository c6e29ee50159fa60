"""muster backup and restore on a state database, without daemons."""

from __future__ import annotations

import os
import pathlib
import socket
import sqlite3

import pytest

from muster.cluster.backup import BackupError, backup, controller_pid, restore, state_db
from muster.core.clock import ManualClock
from muster.core.config import Config, parse_config
from muster.core.job import JobSpec
from muster.ctld.controller import Controller, Identity
from muster.ctld.store import SCHEMA_VERSION, Store

ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)


def config(tmp_path: pathlib.Path, extra: str = "") -> Config:
    state = tmp_path / "state"
    text = f"ClusterName=t\nStateSaveLocation={state}\nCtldSocket={state}/ctld.sock\n{extra}NodeName=n1 CPUs=2\nPartitionName=p Nodes=ALL Default=YES\n"
    return parse_config(text, str(tmp_path / "muster.conf"))


def store_with_jobs(cfg: Config, count: int) -> Store:
    """The state of a controller that took ``count`` more jobs (its store left open)."""
    ctl = Controller(cfg, Store(state_db(cfg)), ManualClock(1000.0))
    ctl.load()
    for _ in range(count):
        ctl.queue.submit(JobSpec(script="#!/bin/sh\ntrue\n", workdir="/tmp"), ALICE)
    return ctl.store


def job_ids(path: str) -> list[int]:
    with sqlite3.connect(path) as db:
        return [r[0] for r in db.execute("SELECT job_id FROM jobs ORDER BY job_id")]


def test_a_backup_is_one_self_contained_file_of_the_live_database(tmp_path: pathlib.Path) -> None:
    cfg = config(tmp_path)
    store = store_with_jobs(cfg, 2)  # open, as a running controller holds it
    dest = str(tmp_path / "b.db")
    done = backup(cfg, dest)
    assert (done.jobs, done.schema, done.path) == (2, SCHEMA_VERSION, dest)
    assert job_ids(dest) == [1, 2]
    assert not os.path.exists(dest + "-wal") and not os.path.exists(dest + ".part")
    assert oct(os.stat(dest).st_mode & 0o777) == "0o600"
    with pytest.raises(BackupError, match="exists; refusing to overwrite it"):
        backup(cfg, dest)
    store.close()


def test_a_backup_without_a_state_database_says_so(tmp_path: pathlib.Path) -> None:
    cfg = config(tmp_path)
    with pytest.raises(BackupError, match="muster.db: No such file"):
        backup(cfg, str(tmp_path / "b.db"))
    assert not os.path.exists(tmp_path / "b.db.part")


def test_a_restore_replaces_the_state_and_keeps_what_it_replaced(tmp_path: pathlib.Path) -> None:
    cfg = config(tmp_path)
    store_with_jobs(cfg, 1).close()
    dest = str(tmp_path / "b.db")
    backup(cfg, dest)
    store_with_jobs(cfg, 2).close()  # life after the backup
    summary, kept = restore(cfg, dest)
    assert summary.jobs == 1 and kept == state_db(cfg) + ".pre-restore"
    assert job_ids(state_db(cfg)) == [1]
    assert job_ids(kept) == [1, 2, 3]
    Store(state_db(cfg)).close()  # the controller opens what was restored


def test_a_restore_checks_the_file_first(tmp_path: pathlib.Path) -> None:
    cfg = config(tmp_path)
    store_with_jobs(cfg, 1).close()
    junk = tmp_path / "junk"
    junk.write_text("not a database\n")
    with pytest.raises(BackupError, match="is not a muster state database"):
        restore(cfg, str(junk))
    newer = str(tmp_path / "newer.db")
    backup(cfg, newer)
    with sqlite3.connect(newer) as db:
        db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION + 1),))
    with pytest.raises(BackupError, match=f"has schema {SCHEMA_VERSION + 1}, newer than this muster"):
        restore(cfg, newer)
    with pytest.raises(BackupError, match="No such file"):
        restore(cfg, str(tmp_path / "missing.db"))
    assert job_ids(state_db(cfg)) == [1]  # untouched


def test_a_restore_is_refused_while_a_controller_answers(tmp_path: pathlib.Path) -> None:
    cfg = config(tmp_path)
    store_with_jobs(cfg, 1).close()
    dest = str(tmp_path / "b.db")
    backup(cfg, dest)
    # a pid file naming a process that is not musterctld (a recycled pid) does not count
    (tmp_path / "state" / "musterctld.pid").write_text(f"{os.getpid()}\n")
    assert controller_pid(cfg) is None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listening:
        listening.bind(cfg.ctld_socket)
        listening.listen(1)
        assert controller_pid(cfg) == 0
        with pytest.raises(BackupError, match="a controller runs on .*; stop it before restoring"):
            restore(cfg, dest)


def test_postgresql_is_left_to_its_own_tools(tmp_path: pathlib.Path) -> None:
    cfg = config(tmp_path, "AccountingStorageType=accounting_storage/postgresql\n")
    with pytest.raises(BackupError, match="use pg_dump -Fc and pg_restore"):
        backup(cfg, str(tmp_path / "b.db"))
    with pytest.raises(BackupError, match="use pg_restore"):
        restore(cfg, str(tmp_path / "b.db"))
