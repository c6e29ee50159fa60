"""``muster store-copy`` between SQLite files: every row and counter, one transaction,
checked; refusals leave both ends as they were. (Into and out of PostgreSQL, with real
controllers: tests/integration/test_store_copy.py.)"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from muster.cluster import store_copy
from muster.cluster.store_copy import CopyError, copy_store, parse_endpoint, store_tables
from muster.ctld.store import SCHEMA_VERSION, Store

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "stores"


def dump(path: str | Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every table's rows, sorted (row order on disk is not content)."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        return {n: sorted(db.execute(f'SELECT * FROM "{n}"'), key=repr) for n in names}


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "src" / "muster.db"
    path.parent.mkdir()
    shutil.copyfile(FIXTURES / f"schema-{SCHEMA_VERSION}.db", path)
    return path


def test_locations_name_their_kind() -> None:
    assert parse_endpoint("sqlite:/x/muster.db").target == "/x/muster.db"
    assert parse_endpoint("sqlite:///x/muster.db").target == "/x/muster.db"
    assert parse_endpoint("./muster.db").kind == "sqlite"
    url = parse_endpoint("postgresql://muster:pw@db:5432/muster")
    assert url.kind == "postgresql" and str(url) == "postgresql://muster:***@db:5432/muster"
    assert parse_endpoint("host=db dbname=muster").kind == "postgresql"
    with pytest.raises(CopyError, match="an empty store location"):
        parse_endpoint(" ")


def test_the_tables_are_those_the_migrations_create() -> None:
    tables = {t.name: t for t in store_tables(SCHEMA_VERSION)}
    assert list(tables)[:3] == ["meta", "jobs", "events"]
    assert tables["events"].serial == "seq" and tables["node_events"].serial == "seq"
    assert tables["steps"].key == ("job_id", "attempt", "step_id") and tables["steps"].serial is None
    assert tables["meta"].text_key == (True,)
    assert [t.name for t in store_tables(1)] == ["meta", "jobs", "events", "nodes"]


def test_a_copy_holds_every_row_and_counter_and_the_ids_continue(source: Path, tmp_path: Path) -> None:
    dest = tmp_path / "dst" / "muster.db"
    done = copy_store(parse_endpoint(str(source)), parse_endpoint(f"sqlite:{dest}"))
    assert done.schema == SCHEMA_VERSION and done.next_job_id == 7 and done.kept is None
    assert done.rows["jobs"] == 6 and done.rows["events"] == sum(1 for _ in dump(source)["events"])
    assert dump(dest) == dump(source)  # sqlite_sequence too: event numbers go on from the same place
    assert oct(os.stat(dest).st_mode & 0o777) == "0o600"
    assert not os.path.exists(f"{dest}.part")
    store = Store(str(dest))
    assert store.max_job_id() == 6 and store.get_meta("next_job_id") == "7"


def test_an_old_schema_travels_as_it_is_and_migrates_where_it_lands(tmp_path: Path) -> None:
    src = tmp_path / "old.db"
    shutil.copyfile(FIXTURES / "schema-2.db", src)
    dest = tmp_path / "new.db"
    assert copy_store(parse_endpoint(str(src)), parse_endpoint(str(dest))).schema == 2
    assert dump(dest) == dump(src)
    Store(str(dest)).close()
    assert ("schema_version", str(SCHEMA_VERSION)) in dump(dest)["meta"]


def test_a_destination_with_a_store_is_replaced_only_when_told(source: Path, tmp_path: Path) -> None:
    dest = tmp_path / "muster.db"
    Store(str(dest)).close()  # what a controller started once leaves: empty, it may go
    copy_store(parse_endpoint(str(source)), parse_endpoint(str(dest)))
    other = tmp_path / "other.db"
    shutil.copyfile(FIXTURES / "schema-4.db", other)
    before = dump(dest)
    with pytest.raises(CopyError, match=r"already holds a muster store \(schema 5, 6 jobs\); --overwrite replaces it"):
        copy_store(parse_endpoint(str(other)), parse_endpoint(str(dest)))
    assert dump(dest) == before
    done = copy_store(parse_endpoint(str(other)), parse_endpoint(str(dest)), overwrite=True)
    assert done.kept == f"{dest}.pre-copy" and dump(done.kept) == before
    assert dump(dest) == dump(other)


def test_a_store_a_process_has_open_is_refused(source: Path, tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); db.execute('SELECT 1 FROM meta').fetchall();"
            "print('open', flush=True); sys.stdin.read()",
            str(source),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "open\n"
        with pytest.raises(CopyError, match=rf"\(pid {holder.pid}\) has {source} open; stop it before copying"):
            copy_store(parse_endpoint(str(source)), parse_endpoint(str(tmp_path / "copy.db")))
        assert not (tmp_path / "copy.db").exists()
        with pytest.raises(CopyError, match=rf"\(pid {holder.pid}\) has {source} open"):  # as a destination too
            copy_store(parse_endpoint(str(FIXTURES / "schema-5.db")), parse_endpoint(str(source)), overwrite=True)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(10)


def test_a_state_directory_a_controller_holds_is_refused_and_the_copy_holds_it(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from muster.ctld.statelock import StateLocked, hold

    state_dir = str(source.parent)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from muster.ctld.statelock import hold; hold(sys.argv[1], 0, 'musterctld');"
            "print('held', flush=True); sys.stdin.read()",
            state_dir,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(CopyError, match=rf"musterctld \(pid {holder.pid}\) runs on {state_dir}; stop it"):
            copy_store(parse_endpoint(str(source)), parse_endpoint(str(tmp_path / "copy.db")))
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(10)
    seen: list[str] = []
    real = store_copy._transfer

    def during(*args: Any) -> None:  # a controller starting while the copy runs is refused
        with pytest.raises(StateLocked) as err:
            hold(state_dir, 0, "musterctld")
        seen.append(err.value.holder)
        real(*args)

    monkeypatch.setattr(store_copy, "_transfer", during)
    copy_store(parse_endpoint(str(source)), parse_endpoint(str(tmp_path / "copy.db")))
    assert seen == [f"muster-store-copy (pid {os.getpid()})"]
    os.close(hold(state_dir, 0, "musterctld"))  # and let go after it


def test_a_copy_that_fails_half_way_writes_nothing(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = store_copy._Sqlite.insert

    def insert(self: Any, table: str, cols: list[str], rows: Any) -> None:
        if table == "steps":
            raise sqlite3.OperationalError("disk I/O error")
        real(self, table, cols, rows)

    monkeypatch.setattr(store_copy._Sqlite, "insert", insert)
    dest = tmp_path / "muster.db"
    with pytest.raises(CopyError, match="failed, nothing was written: disk I/O error"):
        copy_store(parse_endpoint(str(source)), parse_endpoint(str(dest)))
    assert sorted(os.listdir(tmp_path)) == ["src"]  # no copy, no .part


def test_the_check_finds_a_row_the_copy_lost(source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = store_copy._Sqlite.insert

    def lossy(self: Any, table: str, cols: list[str], rows: Any) -> None:
        real(self, table, cols, list(rows)[:-1] if table == "events" else rows)

    monkeypatch.setattr(store_copy._Sqlite, "insert", lossy)
    dest = tmp_path / "muster.db"
    with pytest.raises(CopyError, match="table events: .* rows match, then one end has a row the other lacks"):
        copy_store(parse_endpoint(str(source)), parse_endpoint(str(dest)))
    assert not dest.exists()


def test_what_cannot_be_copied_is_refused(source: Path, tmp_path: Path) -> None:
    with pytest.raises(CopyError, match="the same store"):
        copy_store(parse_endpoint(str(source)), parse_endpoint(f"sqlite:{source}"))
    with pytest.raises(CopyError, match="No such file"):
        copy_store(parse_endpoint(str(tmp_path / "nosuch.db")), parse_endpoint(str(tmp_path / "x.db")))
    junk = tmp_path / "junk.db"
    junk.write_text("not a database\n")
    with pytest.raises(CopyError, match="is not a muster state database"):
        copy_store(parse_endpoint(str(junk)), parse_endpoint(str(tmp_path / "x.db")))
    with contextlib.closing(sqlite3.connect(source)) as db:
        db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION + 1),))
        db.commit()
    with pytest.raises(CopyError, match=f"has schema {SCHEMA_VERSION + 1}, newer than this muster"):
        copy_store(parse_endpoint(str(source)), parse_endpoint(str(tmp_path / "x.db")))
    assert not (tmp_path / "x.db").exists()


def test_the_command_needs_a_side_and_says_what_it_copied(source: Path, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "muster.cli.muster", "store-copy"]
    bare = subprocess.run(cmd, capture_output=True, text=True)
    assert bare.returncode == 2 and "store-copy needs --from STORE or --to STORE" in bare.stderr
    dest = tmp_path / "copy.db"
    run = subprocess.run([*cmd, "--from", str(source), "--to", f"sqlite:{dest}"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"muster: copied sqlite:{source} to sqlite:{dest} (schema {SCHEMA_VERSION}): ")
    assert "  jobs           6\n" in run.stdout and run.stdout.endswith("muster: the next job id is 7\n")
    again = subprocess.run([*cmd, "--from", str(source), "--to", str(dest)], capture_output=True, text=True)
    assert again.returncode == 1 and again.stderr.startswith(f"muster: error: {dest} already holds a muster store")
