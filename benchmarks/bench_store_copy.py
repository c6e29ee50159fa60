"""How long ``muster store-copy`` takes a store of many jobs, SQLite -> PostgreSQL -> SQLite
(docs/operations.md). The copy includes its check: every row read back from both ends.

The store is the schema fixture (tests/fixtures/stores/schema-N.db: jobs of every state with
their events, accounting records, steps) repeated under new job ids until it holds
``BENCH_STORE_JOBS`` jobs. Needs a PostgreSQL server: ``MUSTER_TEST_PG_DSN`` (libpq keywords;
``eval "$(bash .ci/postgres.sh start DIR)"`` starts one). Figures only; nothing asserted.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid

from muster.cluster.store_copy import copy_store, parse_endpoint
from muster.ctld.store import SCHEMA_VERSION

JOBS = int(os.environ.get("BENCH_STORE_JOBS", "60000"))
FIXTURE = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "stores", f"schema-{SCHEMA_VERSION}.db")


def grow(path: str, jobs: int) -> dict[str, int]:
    """Repeat the fixture's jobs (and their rows in every job table) under new ids."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        base = db.execute("SELECT MAX(job_id) FROM jobs").fetchone()[0]
        cols = {t: [r[1] for r in db.execute(f'PRAGMA table_info("{t}")')] for t in ("jobs", "acct_jobs", "steps")}
        for k in range(1, jobs // base):
            off = k * base
            for t, names in cols.items():
                picked = ", ".join(f"job_id + {off}" if c == "job_id" else f'"{c}"' for c in names)
                quoted = ", ".join(f'"{c}"' for c in names)
                db.execute(f'INSERT INTO "{t}" ({quoted}) SELECT {picked} FROM "{t}" WHERE job_id <= {base}')
            db.execute(
                f"INSERT INTO events(time, job_id, kind, data) SELECT time, job_id + {off}, kind, data "
                f"FROM events WHERE job_id <= {base}"
            )
        db.execute("UPDATE meta SET value=(SELECT MAX(job_id) + 1 FROM jobs) WHERE key='next_job_id'")
        db.commit()
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: db.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}


def main() -> int:
    dsn = os.environ.get("MUSTER_TEST_PG_DSN")
    if not dsn:
        print("bench_store_copy: needs MUSTER_TEST_PG_DSN (a PostgreSQL server; see the docstring)")
        return 0
    import psycopg

    tmp = tempfile.mkdtemp(prefix="muster-bench-copy-")
    database = "muster_bench_" + uuid.uuid4().hex[:8]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    url = re.sub(r"dbname=\S+", f"dbname={database}", dsn)
    try:
        src = os.path.join(tmp, "muster.db")
        shutil.copyfile(FIXTURE, src)
        counts = grow(src, JOBS)
        rows = sum(counts.values())
        size = os.path.getsize(src) / 1e6
        print(f"store: {counts['jobs']} jobs, {rows} rows in all, {size:.1f} MB (SQLite)")
        t0 = time.perf_counter()
        there = copy_store(parse_endpoint(src), parse_endpoint(url))
        t1 = time.perf_counter()
        back = copy_store(parse_endpoint(url), parse_endpoint(os.path.join(tmp, "back.db")))
        t2 = time.perf_counter()
        assert sum(there.rows.values()) == sum(back.rows.values())
        for label, took in (("SQLite -> PostgreSQL", t1 - t0), ("PostgreSQL -> SQLite", t2 - t1)):
            print(f"{label}: {took:.2f} s with the row-for-row check ({rows / took:,.0f} rows/s)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
