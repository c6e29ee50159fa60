"""High availability with real daemons: a primary and a backup controller on one PostgreSQL
store; kill -9 of the active one in the middle of a submission burst."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from harness import Harness
from muster.cluster.local import ClusterShape
from stores import NO_PG, pg_dsn

pytestmark = pytest.mark.integration

TIMEOUT = 10  # SlurmctldTimeout of these clusters


def pg_url(dsn: str, schema: str) -> str:
    """A libpq URL for muster.conf (one word) with ``schema`` as the search path."""
    from psycopg.conninfo import conninfo_to_dict

    d = conninfo_to_dict(dsn)
    auth = str(d.get("user", "postgres")) + (f":{d['password']}" if d.get("password") else "")
    host = d.get("host", "127.0.0.1")
    return f"postgresql://{auth}@{host}:{d.get('port', 5432)}/{d.get('dbname', 'postgres')}?options=-csearch_path%3D{schema}"


@pytest.fixture
def pg_schema() -> Iterator[tuple[str, str]]:
    dsn = pg_dsn()
    if dsn is None:
        pytest.skip(NO_PG)
    import psycopg

    schema = "ha_" + uuid.uuid4().hex[:10]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield dsn, schema
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def ha_cluster(pg_schema: tuple[str, str], nodes_per_agent: int = 1) -> Iterator[Harness]:
    dsn, schema = pg_schema
    h = Harness(
        ClusterShape(
            nodes=2,
            gpus_per_node=2,
            cpus_per_node=8,
            mem_per_node=8000,
            nodes_per_agent=nodes_per_agent,
            backup_controllers=1,
        ),
        settings={
            "AccountingStorageURL": pg_url(dsn, schema),
            "SlurmctldTimeout": str(TIMEOUT),
            "SlurmdTimeout": "30",
            "MessageTimeout": "3",
        },
    )
    h.up()
    h.pg = (dsn, schema)  # type: ignore[attr-defined]
    try:
        yield h
    finally:
        h.down()


@pytest.fixture
def ha(pg_schema: tuple[str, str]) -> Iterator[Harness]:
    yield from ha_cluster(pg_schema)


@pytest.fixture
def ha_hosted(pg_schema: tuple[str, str]) -> Iterator[Harness]:
    """Both nodes hosted by one agent process: their heartbeats travel together."""
    yield from ha_cluster(pg_schema, nodes_per_agent=2)


def stored_jobs(h: Harness) -> list[tuple[int, str]]:
    import json

    import psycopg

    dsn, schema = h.pg  # type: ignore[attr-defined]
    with psycopg.connect(f"{dsn} options=-csearch_path={schema}") as conn:
        rows = conn.execute("SELECT job_id, data FROM jobs ORDER BY job_id").fetchall()
    return [(int(r[0]), json.loads(r[1])["spec"]["name"]) for r in rows]


def wait_mode(h: Harness, index: int, mode: str, timeout: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if h.cluster.controller_modes()[index] == mode:
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"controller {index} not {mode} after {timeout}s: {h.cluster.controller_modes()}")


def test_kill_9_of_the_active_controller_mid_burst_loses_and_duplicates_nothing(ha: Harness) -> None:
    h = ha
    assert h.cluster.controller_modes() == ["active", "standby"]
    ping = h.run(["scontrol", "ping"])
    assert ping.returncode == 0
    host = h.cluster.config().ctld_addrs[0][0]
    assert ping.stdout.splitlines() == [f"Slurmctld(primary) at {host} is UP", "Slurmctld(backup) at backup1 is UP"]

    runner = h.sbatch("-J", "runner", "-o", "runner.out", "--wrap", "sleep 6; echo finished")
    h.wait_state(runner, "RUNNING", 30)

    # Several sbatch processes, each submitting jobs with names of their own, one by one.
    procs = []
    for p in range(4):
        script = (
            f"for i in $(seq 1 12); do sbatch --parsable -J burst{p}-$i -o /dev/null --wrap true "
            "|| echo FAILED $i >&2; done"
        )
        procs.append(
            subprocess.Popen(
                ["/bin/sh", "-c", script],
                cwd=h.workdir,
                env=h.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    time.sleep(1.0)  # some acknowledged already, more on their way
    primary = h.cluster._alive("musterctld")
    assert primary is not None
    os.kill(primary, signal.SIGKILL)
    took = wait_mode(h, 1, "active", TIMEOUT)
    print(f"backup active {took:.2f}s after kill -9 of the primary")

    acked: list[int] = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0
        assert "FAILED" not in err, err
        acked += [int(line.split(";")[0]) for line in out.split()]
    assert len(acked) == 48

    stored = stored_jobs(h)
    ids = [job_id for job_id, _name in stored]
    names = [name for _id, name in stored]
    assert sorted(set(acked)) == sorted(acked)  # no id given twice
    assert set(acked) <= set(ids)  # every acknowledged job exists ...
    assert sorted(names) == sorted(["runner"] + [f"burst{p}-{i}" for p in range(4) for i in range(1, 13)])
    assert len(ids) == 49  # ... exactly once: no submission made twice

    # the job that ran through the failover completes and is accounted once
    job = h.wait_job(runner, timeout=60)
    assert job["state"] == "COMPLETED"
    assert h.read("runner.out").strip() == "finished"
    sacct = h.run(["sacct", "-X", "-n", "-P", "-j", str(runner), "-o", "JobID,State"])
    assert sacct.stdout.split() == [f"{runner}|COMPLETED"]

    # the burst's jobs run on the new active controller
    for job_id in acked:
        h.wait_job(job_id, timeout=60)

    # agents heartbeat to the new controller: nodes registered and up there
    nodes = h.cluster.api("GET", "/v1/nodes")["nodes"]
    assert all(n["registered"] and n["state"] not in ("DOWN", "UNKNOWN") for n in nodes), nodes

    ping = h.run(["scontrol", "ping"])
    assert ping.stdout.splitlines() == [f"Slurmctld(primary) at {host} is DOWN", "Slurmctld(backup) at backup1 is UP"]
    config = h.run(["scontrol", "show", "config"])
    assert config.stdout.splitlines()[-2:] == ping.stdout.splitlines()


def test_takeover_moves_the_active_role_and_back(ha: Harness) -> None:
    h = ha
    before = h.sbatch("--wrap", "true", "-o", "/dev/null")
    with open(h.cluster.conf_path, "a") as f:  # reconfigured on the active controller ...
        f.write("PartitionName=extra Nodes=node1 MaxTime=10 State=UP\n")
    out = h.run(["scontrol", "reconfigure"])
    assert out.returncode == 0, out.stderr
    out = h.run(["scontrol", "takeover"])
    assert out.returncode == 0, out.stderr
    assert h.cluster.controller_modes() == ["standby", "active"]
    after = h.sbatch("--wrap", "true", "-o", "/dev/null", "-p", "extra")  # ... and the backup knows it
    assert after == before + 1
    assert h.wait_job(after)["state"] == "COMPLETED"
    step = h.run(["srun", "-N2", "-l", "echo", "hi"])  # srun and its steps on the backup
    assert step.returncode == 0, step.stderr
    assert sorted(step.stdout.split("\n")[:2]) == ["0: hi", "1: hi"]
    out = h.run(["scontrol", "takeover", "0"])  # fail back to the primary
    assert out.returncode == 0, out.stderr
    assert h.cluster.controller_modes() == ["active", "standby"]
    assert h.wait_job(before)["state"] == "COMPLETED"
    bad = h.run(["scontrol", "takeover", "7"])
    assert bad.returncode == 1 and "invalid controller index" in bad.stderr


def test_a_standby_answers_503_in_slurms_words(ha: Harness) -> None:
    from muster.protocol import client

    cfg = ha.cluster.config()
    with pytest.raises(client.ApiError) as e:
        client.request("GET", "/v1/jobs", unix_path=cfg.ctld_socket_for(1))
    assert e.value.status == 503 and e.value.message == "Slurm backup controller in standby mode"
    answer: Any = client.request("GET", "/v1/ping", unix_path=cfg.ctld_socket_for(1))
    assert answer["mode"] == "standby"


def test_a_deposed_controller_commits_nothing(pg_schema: tuple[str, str]) -> None:
    """The fence: once another controller bumped the epoch, the old one's commits fail."""
    from muster.core.errors import StorageError
    from muster.ctld.lease_pg import PgLease
    from muster.ctld.store_pg import PgStore

    dsn, schema = pg_schema
    scoped = f"{dsn} options=-csearch_path={schema}"
    first, second = PgLease(scoped, "c"), PgLease(scoped, "c")
    assert first.try_lock() and not second.try_lock()
    epoch = first.take("a#0", 10.0)
    store = PgStore(scoped)
    store.fence_epoch = epoch
    store.set_meta("k", "1")  # the active controller commits
    first.close()  # its lock session ends (as when the process dies) ...
    # ... and the lock is free for the standby once the server has ended that session
    # (its backend exits after the client has gone: not at the same instant)
    deadline = time.monotonic() + 10
    while not second.try_lock():
        assert time.monotonic() < deadline, "the lock of a closed session was never freed"
        time.sleep(0.05)
    second.take("b#1", 10.0)
    with pytest.raises(StorageError, match="no longer the active one"):
        store.set_meta("k", "2")
    assert store.get_meta("k") == "1"
    store.close()
    second.close()


def test_a_hung_active_controller_is_replaced_after_its_lease_expires_and_steps_down_on_waking(
    ha: Harness,
) -> None:
    h = ha
    job = h.sbatch("-o", "/dev/null", "--wrap", "sleep 1")
    primary = h.cluster._alive("musterctld")
    assert primary is not None
    os.kill(primary, signal.SIGSTOP)  # hung: its sessions stay open, its lock held
    try:
        took = wait_mode(h, 1, "active", TIMEOUT + 10)
        print(f"backup active {took:.2f}s after SIGSTOP of the primary (SlurmctldTimeout={TIMEOUT})")
        after = h.sbatch("-o", "/dev/null", "--wrap", "true")
        assert after == job + 1
    finally:
        os.kill(primary, signal.SIGCONT)
    wait_mode(h, 0, "standby", 30)  # woken, it learns it was deposed and serves no more
    assert h.cluster.controller_modes() == ["standby", "active"]
    assert h.wait_job(job)["state"] == "COMPLETED"
    assert h.wait_job(after)["state"] == "COMPLETED"
    assert [i for i, _name in stored_jobs(h)] == [job, after]


def test_musterrestd_follows_the_active_controller(ha: Harness) -> None:
    import httpx

    from restworld import free_port

    h = ha
    url = h.cluster.start_rest("127.0.0.1", free_port())
    out = h.run(["scontrol", "token"])
    assert out.returncode == 0, out.stderr
    headers = {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": out.stdout.strip().split("=", 1)[1]}
    v = "/slurm/v0.0.40"
    with httpx.Client(base_url=url, headers=headers, timeout=60) as c:
        pings = c.get(f"{v}/ping").json()["pings"]
        assert [(p["mode"], p["pinged"]) for p in pings] == [("primary", "UP"), ("backup", "UP")]
        job = h.sbatch("-o", "/dev/null", "--wrap", "true")
        primary = h.cluster._alive("musterctld")
        assert primary is not None
        os.kill(primary, signal.SIGKILL)
        r = c.get(f"{v}/job/{job}")  # waits out the takeover
        assert r.status_code == 200, r.text
        assert r.json()["jobs"][0]["job_id"] == job
        pings = c.get(f"{v}/ping").json()["pings"]
        assert [(p["mode"], p["pinged"]) for p in pings] == [("primary", "DOWN"), ("backup", "UP")]


def test_hosted_nodes_heartbeat_to_the_new_active_controller(ha_hosted: Harness) -> None:
    h = ha_hosted
    job = h.sbatch("-N2", "-o", "hosted.out", "--wrap", "sleep 3; echo ok")
    h.wait_state(job, "RUNNING", 30)
    primary = h.cluster._alive("musterctld")
    assert primary is not None
    os.kill(primary, signal.SIGKILL)
    wait_mode(h, 1, "active", TIMEOUT)
    assert h.wait_job(job)["state"] == "COMPLETED"
    deadline = time.monotonic() + 30
    while True:
        nodes = h.cluster.api("GET", "/v1/nodes")["nodes"]
        if all(n["registered"] and n["state"] == "IDLE" for n in nodes):
            break
        assert time.monotonic() < deadline, nodes
        time.sleep(0.2)
