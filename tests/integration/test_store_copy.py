"""A cluster's store moved SQLite -> PostgreSQL -> SQLite with ``muster store-copy``: users
see the same accounting on the other side and job ids go on; refused while a controller
runs on either end. Every old schema's fixture, copied into PostgreSQL as it is, migrates
there; a store of a newer schema stops musterctld with the way back."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import Harness
from muster.cluster.local import ClusterShape
from muster.ctld.store import SCHEMA_VERSION, Store
from stores import NO_PG, pg_dsn

pytestmark = pytest.mark.integration

MUSTER = [sys.executable, "-m", "muster.cli.muster"]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "stores"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A database of its own on the test server, as a libpq string."""
    dsn = pg_dsn()
    if dsn is None:
        pytest.skip(NO_PG)
    import psycopg

    database = "muster_copy_" + uuid.uuid4().hex[:10]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    try:
        yield re.sub(r"dbname=\S+", f"dbname={database}", dsn)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def ok(run: subprocess.CompletedProcess[str]) -> str:
    assert run.returncode == 0, (run.returncode, run.stdout, run.stderr)
    return run.stdout


def observe(h: Harness) -> dict[str, str]:
    """What users see of the jobs: accounting with the steps, and the queue."""
    return {
        "sacct": ok(h.run(["sacct", "-n", "-P", "-a", "-o", "JobID,JobName,State,ExitCode,Account,Partition"])),
        "squeue": ok(h.run(["squeue", "-h", "-o", "%i %T %r %j"])),
        "assoc": ok(h.run(["sacctmgr", "-n", "-P", "show", "assoc", "format=account,user,fairshare"])),
    }


def set_store(h: Harness, url: str | None) -> None:
    """Point the cluster's config at PostgreSQL (``url``) or back at its SQLite file."""
    with open(h.cluster.conf_path) as f:
        lines = [ln for ln in f if not ln.startswith("AccountingStorageURL=")]
    if url is not None:
        lines.append(f'AccountingStorageURL="{url}"\n')
    with open(h.cluster.conf_path, "w") as f:
        f.writelines(lines)


def test_a_cluster_moves_to_postgresql_and_back_with_its_history(pg_url: str) -> None:
    h = Harness(ClusterShape(nodes=2, gpus_per_node=0, cpus_per_node=2, mem_per_node=2000))
    h.up()
    try:
        for words in ("add account physics Fairshare=5", "add user root account=physics"):
            ok(h.run(["sacctmgr", "-i", *words.split()]))
        done = h.sbatch("-A", "physics", "-J", "finished", "--wrap", "srun true; srun -n1 true")
        assert h.wait_job(done)["state"] == "COMPLETED"
        failed = h.sbatch("-J", "broken", "--wrap", "exit 3")
        assert h.wait_job(failed)["state"] == "FAILED"
        held = h.sbatch("-H", "-J", "waiting", "--wrap", "true")
        before = observe(h)
        assert f"{done}.0|true|COMPLETED" in before["sacct"] and f"{done}.1|" in before["sacct"]
        assert "waiting" in before["squeue"]
        db = os.path.join(h.cluster.config().state_save_location, "muster.db")

        refused = h.run([*MUSTER, "store-copy", "--to", pg_url])
        assert refused.returncode == 1 and refused.stderr.startswith("muster: error: musterctld (pid ")
        assert "stop it before copying its store" in refused.stderr

        h.cluster.stop()
        copied = ok(h.run([*MUSTER, "store-copy", "--to", pg_url]))
        assert copied.startswith(f"muster: copied sqlite:{db} to {pg_url} (schema {SCHEMA_VERSION}): ")
        assert f"muster: the next job id is {held + 1}\n" in copied
        set_store(h, pg_url)
        h.up()
        assert observe(h) == before  # the same history, read from PostgreSQL

        busy = h.run([*MUSTER, "store-copy", "--from", pg_url, "--to", os.path.join(h.root, "x.db")])
        assert busy.returncode == 1 and "a controller has the store in" in busy.stderr
        assert not os.path.exists(os.path.join(h.root, "x.db"))
        on_pg = h.sbatch("-J", "on-pg", "--wrap", "srun true")
        assert on_pg == held + 1  # ids go on, they do not start again at 1
        assert h.wait_job(on_pg)["state"] == "COMPLETED"
        there = observe(h)

        h.cluster.stop()
        back = h.run([*MUSTER, "store-copy", "--to", f"sqlite:{db}"])  # the config's store is the source
        assert back.returncode == 1 and f"{db} already holds a muster store" in back.stderr
        back = ok(h.run([*MUSTER, "store-copy", "--to", f"sqlite:{db}", "--overwrite"]))
        assert f"muster: the store it replaced is kept in {db}.pre-copy" in back
        set_store(h, None)
        h.up()
        assert observe(h) == there
        assert h.sbatch("-J", "home-again", "--wrap", "true") == on_pg + 1
    finally:
        h.down()


def rows(conn: Any, table: str, cols: list[str]) -> list[tuple[Any, ...]]:
    names = ", ".join(f'"{c}"' for c in cols)
    return sorted((tuple(r) for r in conn.execute(f'SELECT {names} FROM "{table}"').fetchall()), key=repr)


@pytest.mark.parametrize("version", list(range(1, SCHEMA_VERSION + 1)))
def test_every_old_schema_copied_into_postgresql_migrates_there(version: int, pg_url: str, tmp_path: Path) -> None:
    import psycopg

    from muster.ctld.store_pg import PgStore

    old = tmp_path / "old.db"
    shutil.copyfile(FIXTURES / f"schema-{version}.db", old)
    out = subprocess.run([*MUSTER, "store-copy", "--from", str(old), "--to", pg_url], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert f"(schema {version})" in out.stdout
    Store(str(old)).close()  # the same file migrated on SQLite: what PostgreSQL must now hold
    PgStore(pg_url).close()  # the controller's open: migrates
    with contextlib.closing(sqlite3.connect(old)) as lite, psycopg.connect(pg_url) as pg:
        tables = [r[0] for r in lite.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            if table == "sqlite_sequence":
                continue
            cols = [r[1] for r in lite.execute(f'PRAGMA table_info("{table}")')]
            want = rows(lite, table, cols)
            if table == "meta":  # the backup SQLite kept of itself is not PostgreSQL's
                want = [r for r in want if r[0] not in ("upgrade_backup", "upgraded_from_schema")]
            assert rows(pg, table, cols) == want, table
        jobs = pg.execute("SELECT state FROM jobs ORDER BY job_id").fetchall()
        assert [j[0] for j in jobs] == ["COMPLETED", "FAILED", "CANCELLED", "PENDING", "PENDING", "RUNNING"]
        nxt = pg.execute("SELECT nextval(pg_get_serial_sequence('events', 'seq'))").fetchone()[0]
        assert nxt == lite.execute("SELECT MAX(seq) FROM events").fetchone()[0] + 1


def test_a_store_of_a_newer_schema_stops_the_controller_with_the_way_back() -> None:
    h = Harness(ClusterShape(nodes=1, gpus_per_node=0, cpus_per_node=1, mem_per_node=1000))
    h.up()
    try:
        h.cluster.stop()
        db = os.path.join(h.cluster.config().state_save_location, "muster.db")
        shutil.copyfile(FIXTURES / f"schema-{SCHEMA_VERSION - 1}.db", db)
        Store(db).close()  # an upgrade: keeps muster.db.schema-N
        with contextlib.closing(sqlite3.connect(db)) as conn:  # then a newer muster's schema
            conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION + 1),))
            conn.commit()
        with open(db, "rb") as f:
            raw = f.read()
        run = h.run(["musterctld", "--conf", h.cluster.conf_path], timeout=60)
        assert run.returncode == 1
        assert run.stderr.startswith(
            f"musterctld: error: state database {db} has schema {SCHEMA_VERSION + 1}, newer than this muster's "
        )
        assert f"`muster restore {db}.schema-{SCHEMA_VERSION - 1}`" in run.stderr
        assert "Traceback" not in run.stderr
        with open(db, "rb") as f:
            assert f.read() == raw
        restored = ok(h.run([*MUSTER, "restore", f"{db}.schema-{SCHEMA_VERSION - 1}"]))  # the way back works
        assert f"(schema {SCHEMA_VERSION - 1})" in restored
        h.up()
        assert {"waiting", "queued"} <= set(ok(h.run(["squeue", "-h", "-o", "%j"])).split())
    finally:
        h.down()


def test_a_controller_does_not_open_a_postgresql_store_while_it_is_copied(pg_url: str, tmp_path: Path) -> None:
    from muster.cluster.store_copy import CopyError, _Pg, copy_store, parse_endpoint
    from muster.core.errors import StorageError
    from muster.ctld.store_pg import PgStore

    copying = _Pg(parse_endpoint(pg_url), read_only=False)  # a copy into it, under way
    try:
        with pytest.raises(StorageError, match="is being copied .muster store-copy.; start again when it ends"):
            PgStore(pg_url)
    finally:
        copying.close()
    store = PgStore(pg_url)  # the copy is over: it opens, and holds its shared lock
    try:
        with pytest.raises(CopyError, match="a controller has the store in .* open .musterctld.; stop it"):
            copy_store(parse_endpoint(str(FIXTURES / "schema-5.db")), parse_endpoint(pg_url), overwrite=True)
    finally:
        store.close()
    assert copy_store(parse_endpoint(str(FIXTURES / "schema-5.db")), parse_endpoint(pg_url), overwrite=True).rows


def test_a_postgresql_store_of_a_newer_schema_is_refused_untouched(pg_url: str) -> None:
    import psycopg

    from muster.ctld.store import SchemaTooNew
    from muster.ctld.store_pg import PgStore

    PgStore(pg_url).close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE meta SET value=%s WHERE key='schema_version'", (str(SCHEMA_VERSION + 1),))
    with pytest.raises(SchemaTooNew) as err:
        PgStore(pg_url)
    assert f"has schema {SCHEMA_VERSION + 1}, newer than this muster's ({SCHEMA_VERSION})" in str(err.value)
    assert "PostgreSQL: pg_restore of its pg_dump" in str(err.value)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (
            str(SCHEMA_VERSION + 1),
        )


def test_a_store_moves_between_postgresql_databases_and_the_password_file_reaches_libpq(
    pg_url: str, tmp_path: Path
) -> None:
    import psycopg

    from muster.core.config import parse_config
    from muster.ctld.store_pg import PgStore, dsn_from_config

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA second")
    first = copy_via_cli([*MUSTER, "store-copy", "--from", str(FIXTURES / "schema-4.db"), "--to", pg_url])
    assert "(schema 4)" in first
    second = f"{pg_url} options=-csearch_path=second"
    moved = copy_via_cli([*MUSTER, "store-copy", "--from", pg_url, "--to", second])
    assert "(schema 4)" in moved and "muster: the next job id is 7" in moved

    secret = tmp_path / "dbpass"
    secret.write_text("not-needed-by-trust\n")
    secret.chmod(0o600)
    conf = tmp_path / "muster.conf"
    conf.write_text(
        "ClusterName=t\nNodeName=node1 CPUs=1 RealMemory=100\nPartitionName=p Nodes=ALL Default=YES\n"
        f'AccountingStorageURL="{second}"\nAccountingStoragePassFile={secret}\n'
    )
    dsn = dsn_from_config(parse_config(conf.read_text(), str(conf)))
    assert dsn is not None and "password=not-needed-by-trust" in dsn
    store = PgStore(dsn)  # libpq takes the composed string; the copy migrates on open
    try:
        assert store.max_job_id() == 6 and store.get_meta("schema_version") == str(SCHEMA_VERSION)
        assert "not-needed" not in store.path
    finally:
        store.close()


def copy_via_cli(argv: list[str]) -> str:
    out = subprocess.run(argv, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_postgresql_store_of_a_newer_schema_is_not_overwritten(pg_url: str) -> None:
    import psycopg

    from muster.cluster.store_copy import CopyError, copy_store, parse_endpoint

    copy_via_cli([*MUSTER, "store-copy", "--from", str(FIXTURES / "schema-5.db"), "--to", pg_url])
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE meta SET value=%s WHERE key='schema_version'", (str(SCHEMA_VERSION + 1),))
    with pytest.raises(CopyError, match=f"holds a store of schema {SCHEMA_VERSION + 1}, newer than this muster"):
        copy_store(parse_endpoint(str(FIXTURES / "schema-4.db")), parse_endpoint(pg_url), overwrite=True)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM jobs").fetchone() == (6,)
