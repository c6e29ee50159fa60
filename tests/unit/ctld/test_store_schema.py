"""Every schema the store has had, migrated to today's on the files those releases wrote
(tests/fixtures/stores, made by make_fixtures.py from the old commits' own code); a
migration that fails leaves the file as it was; a store of a newer schema is refused with
the way back named."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.job import JobSpec
from muster.core.states import JobState
from muster.ctld import store as store_mod
from muster.ctld.controller import Controller, Identity
from muster.ctld.store import SCHEMA_VERSION, UPGRADE_BACKUP, UPGRADED_FROM, SchemaTooNew, Store

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "stores"
VERSIONS = list(range(1, SCHEMA_VERSION + 1))
CONF = """
ClusterName=fixture
NodeName=node[1-2] CPUs=8 RealMemory=16000 Gres=gpu:2
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)
# What make_fixtures.py's driver leaves, in every version
STATES = ["COMPLETED", "FAILED", "CANCELLED", "PENDING", "PENDING", "RUNNING"]
NAMES = ["finished", "broken", "cancelled", "waiting", "queued", "running"]


def fixture_copy(version: int, tmp_path: Path) -> str:
    path = str(tmp_path / "muster.db")
    shutil.copyfile(FIXTURES / f"schema-{version}.db", path)
    return path


def dump(path: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of every table, as column -> value, in rowid order."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.row_factory = sqlite3.Row
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        return {n: [dict(r) for r in db.execute(f'SELECT * FROM "{n}" ORDER BY rowid')] for n in names}


def column_defaults(path: str) -> dict[str, dict[str, Any]]:
    """Each column's declared default, as a value (``DEFAULT 0`` -> 0, none -> None)."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {
            n: {
                c[1]: None if c[4] is None else db.execute(f"SELECT {c[4]}").fetchone()[0]
                for c in db.execute(f'PRAGMA table_info("{n}")')
            }
            for n in names
        }


def test_there_is_a_fixture_for_every_schema_version() -> None:
    for version in VERSIONS:
        with contextlib.closing(sqlite3.connect(f"file:{FIXTURES / f'schema-{version}.db'}?mode=ro", uri=True)) as db:
            row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        assert row == (str(version),)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_store_of_every_schema_migrates_with_every_row_kept(version: int, tmp_path: Path) -> None:
    path = fixture_copy(version, tmp_path)
    before = dump(path)
    Store(path).close()
    after = dump(path)

    defaults = column_defaults(path)
    for table, rows in before.items():
        if table == "meta":
            continue
        old_cols = list(rows[0]) if rows else []
        assert [{c: r[c] for c in old_cols} for r in after[table]] == rows, f"{table} changed from schema {version}"
        for row in after[table]:  # a column a later schema added holds its default
            for col in set(row) - set(old_cols):
                assert row[col] == defaults[table][col], (table, col)
    meta = {r["key"]: r["value"] for r in after["meta"]}
    assert meta["schema_version"] == str(SCHEMA_VERSION)
    assert meta["next_job_id"] == "7"
    # tables a later schema added start empty, except accounting, which starts from the jobs
    for table in set(after) - set(before) - {"sqlite_sequence"}:
        if table == "acct_jobs":
            jobs = before["jobs"]
            assert [(r["job_id"], r["attempt"], r["state"], r["data"]) for r in after[table]] == [
                (j["job_id"], 0, j["state"], j["data"]) for j in jobs
            ]
        else:
            assert after[table] == [], table
    if version < SCHEMA_VERSION:  # the file as it was, kept for the way back
        kept = f"{path}.schema-{version}"
        assert meta[UPGRADED_FROM] == str(version) and meta[UPGRADE_BACKUP] == kept
        assert dump(kept) == before and oct(os.stat(kept).st_mode & 0o777) == "0o600"
    else:
        assert UPGRADE_BACKUP not in meta


@pytest.mark.parametrize("version", VERSIONS)
def test_todays_controller_loads_every_old_store_and_ids_continue(version: int, tmp_path: Path) -> None:
    path = fixture_copy(version, tmp_path)
    ctl = Controller(parse_config(CONF, "fixture.conf"), Store(path), ManualClock(1_700_001_000.0))
    ctl.load()
    jobs = ctl.store.load_jobs()
    assert [str(j.state) for j in jobs] == STATES
    assert [j.spec.name for j in jobs] == NAMES
    assert ctl.jobs[4].spec.comment == "héllo wörld"
    assert ctl.jobs[6].state is JobState.RUNNING and ctl.jobs[6].nodes == ["node2"]
    if version >= 4:
        assert [(s.job_id, s.step_id, s.state) for s in ctl.store.load_steps([1])] == [(1, 0, "COMPLETED")]
    if version < 5:  # drained by the old controller when node1 came back short of GPUs
        assert ctl.nodes["node1"].drain and "gres/gpu count reported lower" in ctl.nodes["node1"].reason
    assert ctl.queue.submit(JobSpec(name="next", script="#!/bin/sh\ntrue\n", workdir="/tmp"), ALICE).job_id == 7


def test_a_migration_that_fails_half_way_leaves_the_store_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = fixture_copy(3, tmp_path)
    before = dump(path)
    # schema 4 goes in, then schema 5's second statement fails (an index on a column that is not there)
    broken = [store_mod._MIGRATIONS[5][0], "CREATE INDEX node_events_nosuch ON node_events(nosuch)"]
    monkeypatch.setitem(store_mod._MIGRATIONS, 5, broken)
    with pytest.raises(Exception, match="nosuch"):
        Store(path)
    assert dump(path) == before  # schema 3, no steps table, no node_events, every row as it was
    monkeypatch.undo()
    Store(path).close()  # today's migrations still apply to it
    assert {r["key"]: r["value"] for r in dump(path)["meta"]}["schema_version"] == str(SCHEMA_VERSION)


def test_a_store_of_a_newer_schema_is_refused_untouched_with_the_way_back(tmp_path: Path) -> None:
    path = fixture_copy(SCHEMA_VERSION - 1, tmp_path)
    Store(path).close()  # the upgrade: keeps muster.db.schema-N
    with contextlib.closing(sqlite3.connect(path)) as db:  # as a release with schema N+2 leaves it
        db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION + 2),))
        db.commit()
        db.execute("PRAGMA journal_mode=DELETE")  # as a backup is: not even WAL is switched on
    before = dump(path)
    with open(path, "rb") as f:
        raw = f.read()
    with pytest.raises(SchemaTooNew) as err:
        Store(path)
    text = str(err.value)
    assert f"has schema {SCHEMA_VERSION + 2}, newer than this muster's ({SCHEMA_VERSION})" in text
    assert f"muster restore {path}.schema-{SCHEMA_VERSION - 1}" in text
    assert dump(path) == before
    with open(path, "rb") as f:
        assert f.read() == raw

    with contextlib.closing(sqlite3.connect(path)) as db:  # it was upgraded from a schema newer than ours
        db.execute("UPDATE meta SET value=? WHERE key=?", (str(SCHEMA_VERSION + 1), UPGRADED_FROM))
        db.commit()
    with pytest.raises(SchemaTooNew, match=f"restore a backup of schema {SCHEMA_VERSION} or older"):
        Store(path)


def test_a_store_that_cannot_be_kept_is_not_migrated(tmp_path: Path) -> None:
    path = fixture_copy(4, tmp_path)
    os.mkdir(f"{path}.schema-4.part")  # in the way of the copy
    before = dump(path)
    with pytest.raises(Exception, match="cannot keep .* before upgrading its schema from 4"):
        Store(path)
    assert dump(path) == before
