"""High availability with real daemons: a primary and a backup controller on one PostgreSQL
store; kill -9 of the active one in the middle of a submission burst. Clients and agents
that find the active controller: ``scontrol ping`` from any host, commands on the standby's
head node, the standby's own /metrics, a hung (SIGSTOP) active controller passed over and
remembered, agents registering at once with a new controller, a job's true end time
across a takeover, and a single controller restarted while a submission waits for it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from harness import Harness
from muster.client import failover
from muster.client.settings import parse_client_settings
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


def ha_cluster(
    pg_schema: tuple[str, str], nodes_per_agent: int = 1, settings: dict[str, str] | None = None
) -> Iterator[Harness]:
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
            **(settings or {}),
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
    assert ping.stdout.splitlines() == [
        f"Slurmctld(primary) at {host} is UP (active)",
        "Slurmctld(backup) at backup1 is UP",
    ]

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
    time.sleep(1.0)  # sleep: the kill lands mid-burst: some acknowledged already, more on their way
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
    assert ping.stdout.splitlines() == [
        f"Slurmctld(primary) at {host} is DOWN",
        "Slurmctld(backup) at backup1 is UP (active)",
    ]
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


@pytest.fixture
def ha_metrics(pg_schema: tuple[str, str]) -> Iterator[Harness]:
    yield from ha_cluster(pg_schema, settings={"MetricsType": "metrics/openmetrics"})


def host_conf(h: Harness, name: str, socket_dir: str, agents: bool) -> str:
    """The cluster's configuration as another host sees it: the controllers' sockets are
    looked for in ``socket_dir`` (only those linked there exist on "that host"), and the
    node agents' only where ``agents``."""
    text = open(h.cluster.conf_path).read()
    os.makedirs(socket_dir, exist_ok=True)
    text = re.sub(r"CtldSocket=\S+", f"CtldSocket={socket_dir}/musterctld.sock", text)
    if not agents:
        text = re.sub(r"AgentSocketDir=\S+", f"AgentSocketDir={socket_dir}/no-agents", text)
    path = os.path.join(h.root, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def scrape(sock: str, path: str) -> tuple[str, list[str]]:
    """(HTTP status, lines) of an unsigned GET, as Prometheus scrapes."""
    out = subprocess.run(
        ["curl", "-s", "-w", "\n%{http_code}", "--unix-socket", sock, f"http://ctld{path}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    *body, code = out.stdout.splitlines()
    return code, body


def timed(h: Harness, argv: list[str], conf: str | None = None) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    out = h.run(argv, env={"MUSTER_CONF": conf} if conf else None)
    return out, time.monotonic() - start


def test_ping_commands_and_metrics_from_every_host_and_agents_back_at_once_after_a_takeover(
    ha_metrics: Harness,
) -> None:
    h = ha_metrics
    cfg = h.cluster.config()
    primary_host = cfg.ctld_addrs[0][0]
    # a compute node (an agent, no controller here) and the standby's head (no agent)
    node_conf = host_conf(h, "node.conf", os.path.join(h.root, "node-host"), agents=True)
    head2_dir = os.path.join(h.root, "head2-host")
    head2_conf = host_conf(h, "head2.conf", head2_dir, agents=False)
    os.symlink(cfg.ctld_socket_for(1), os.path.join(head2_dir, "musterctld.sock.1"))

    up = [f"Slurmctld(primary) at {primary_host} is UP (active)", "Slurmctld(backup) at backup1 is UP"]
    for conf in (None, node_conf, head2_conf):
        ping = h.run(["scontrol", "ping"], env={"MUSTER_CONF": conf} if conf else None)
        assert ping.returncode == 0, ping.stderr
        assert ping.stdout.splitlines() == up, conf

    # every command on the standby's head reaches the active controller
    on_head2 = h.run(["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true"], env={"MUSTER_CONF": head2_conf})
    assert on_head2.returncode == 0, on_head2.stderr
    assert h.wait_job(int(on_head2.stdout.strip()))["state"] == "COMPLETED"
    assert h.run(["squeue"], env={"MUSTER_CONF": head2_conf}).returncode == 0

    # the standby serves its own metrics: up, and in standby
    code, body = scrape(cfg.ctld_socket_for(1), "/metrics")
    assert code == "200"
    assert "muster_controller_standby 1.0" in body and "muster_controller_active 0.0" in body
    code, body = scrape(cfg.ctld_socket_for(0), "/metrics/muster")
    assert code == "200" and "muster_controller_active 1.0" in body

    primary = h.cluster._alive("musterctld")
    assert primary is not None
    os.kill(primary, signal.SIGKILL)
    killed = time.monotonic()
    wait_mode(h, 1, "active", TIMEOUT + 10)
    took = time.monotonic() - killed
    # the agents register with the new controller at once, and it schedules
    first = time.monotonic()
    after = h.sbatch("-o", "/dev/null", "--wrap", "true")
    assert h.wait_job(after, timeout=30)["state"] == "COMPLETED"
    print(f"backup active {took:.2f}s after kill -9; a new job ran {time.monotonic() - first:.2f}s after that")
    nodes = h.cluster.api("GET", "/v1/nodes")["nodes"]
    assert all(n["registered"] for n in nodes), nodes

    ping = h.run(["scontrol", "ping"], env={"MUSTER_CONF": node_conf})
    assert ping.stdout.splitlines() == [
        f"Slurmctld(primary) at {primary_host} is DOWN",
        "Slurmctld(backup) at backup1 is UP (active)",
    ]
    on_head2 = h.run(["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true"], env={"MUSTER_CONF": head2_conf})
    assert on_head2.returncode == 0, on_head2.stderr


def test_a_hung_active_controller_is_passed_over_and_remembered(ha_metrics: Harness) -> None:
    h = ha_metrics
    ends = h.sbatch("-o", "/dev/null", "--wrap", "touch began; sleep 1")  # ends while no controller is active
    started = h.wait_state(ends, "RUNNING", 30)["start_time"]
    deadline = time.monotonic() + 30
    while not os.path.exists(os.path.join(h.workdir, "began")):  # its script runs
        assert time.monotonic() < deadline
        time.sleep(0.05)
    primary = h.cluster._alive("musterctld")
    assert primary is not None
    os.kill(primary, signal.SIGSTOP)  # hung: it accepts connections and answers nothing
    try:
        first, took = timed(h, ["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true"])
        assert first.returncode == 0, first.stderr  # waited for the backup to take over
        print(f"sbatch during the takeover of a SIGSTOPped controller: {took:.2f}s")
        second, quick = timed(h, ["squeue", "-h", "-o", "%i"])
        assert second.returncode == 0, second.stderr
        print(f"the next command: {quick:.2f}s")
        # it went straight to the active controller: what the first found is remembered
        # (this user's memory of this configuration's controllers, client.failover)
        settings = parse_client_settings(open(h.cluster.conf_path).read(), h.cluster.conf_path)
        active, hung = failover.recall(settings, time.monotonic())
        assert active == 1 and list(hung) == [0]
        assert h.cluster.controller_modes()[1] == "active"
        third, quick = timed(h, ["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true"])
        assert third.returncode == 0, third.stderr
        assert int(third.stdout) == int(first.stdout) + 1
        print(f"a submission after that: {quick:.2f}s")
    finally:
        os.kill(primary, signal.SIGCONT)
    wait_mode(h, 0, "standby", 30)
    # the job's end is stamped when it happened (its agent's report), not when a controller
    # could hear of it, SlurmctldTimeout later
    done = h.wait_job(ends)
    assert done["state"] == "COMPLETED"
    print(f"job of 1 s: recorded {done['end_time'] - started:.2f}s from start to end across the takeover")
    assert done["end_time"] - started < TIMEOUT / 2


@pytest.fixture
def single() -> Iterator[Harness]:
    h = Harness(
        ClusterShape(nodes=1, gpus_per_node=0, cpus_per_node=2, mem_per_node=1000),
        settings={"MessageTimeout": "20"},
    )
    h.up()
    try:
        yield h
    finally:
        h.down()


def test_a_submission_waits_for_a_controller_being_restarted(single: Harness) -> None:
    h = single
    pid = h.cluster._alive("musterctld")
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while h.cluster._alive("musterctld") is not None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    errors = os.path.join(h.root, "sbatch.err")
    with open(errors, "w") as err_file:
        submit = subprocess.Popen(
            ["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true"],
            cwd=h.workdir,
            env=h.env,
            stdout=subprocess.PIPE,
            stderr=err_file,
            text=True,
        )
    try:
        # it keeps trying, and says so once, while the controller is away
        deadline = time.monotonic() + 15
        while "retrying" not in h.read(errors):
            assert submit.poll() is None, h.read(errors)
            assert time.monotonic() < deadline
            time.sleep(0.1)
        h.cluster.start()
        out, _ = submit.communicate(timeout=60)
    finally:
        if submit.poll() is None:
            submit.kill()
            submit.wait()
    assert submit.returncode == 0, h.read(errors)
    assert "Unable to contact slurm controller (connect failure)" in h.read(errors)
    assert h.wait_job(int(out.strip()))["state"] == "COMPLETED"


@pytest.fixture
def ha_hang(pg_schema: tuple[str, str], tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    """An HA pair whose controllers stop (SIGSTOP) before the launch they would send next
    once ``$MUSTER_TEST_STOP_BEFORE_LAUNCH`` (a file) exists: one-shot, it is removed."""
    monkeypatch.setenv("MUSTER_TEST_STOP_BEFORE_LAUNCH", str(tmp_path / "stop-before-launch"))
    yield from ha_cluster(pg_schema)


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")


def test_a_launch_hung_in_a_stopped_controller_is_sent_by_the_next_one_and_runs_once(ha_hang: Harness) -> None:
    # the controller stops between committing the start and sending it; the backup takes
    # over, launches it at the node's first heartbeat; woken, the old one sends its launch
    # too: the agent answers it as done (the run ended, its report delivered) and runs nothing
    h = ha_hang
    flag = os.environ["MUSTER_TEST_STOP_BEFORE_LAUNCH"]
    open(flag, "w").close()
    runs = os.path.join(h.workdir, "runs")
    job_id = h.sbatch("-o", "/dev/null", "--wrap", f"date +%s.%N >> {runs}")
    primary = h.cluster._alive("musterctld")
    assert primary is not None
    deadline = time.monotonic() + 30
    while os.path.exists(flag) or not _stopped(primary):
        assert time.monotonic() < deadline, "the controller did not stop before the launch"
        time.sleep(0.05)
    stopped = time.time()
    try:
        wait_mode(h, 1, "active", TIMEOUT + 20)
        job = h.wait_job(job_id, timeout=60)
        assert (job["state"], job["restart_count"]) == ("COMPLETED", 0), job
        took = float(h.read(runs).split()[0]) - stopped
        print(f"job {job_id} started {took:.2f} s after its controller stopped (SlurmctldTimeout={TIMEOUT})")
    finally:
        os.kill(primary, signal.SIGCONT)
    wait_mode(h, 0, "standby", 30)
    node = job["alloc"][0]["node"]
    agent_log = h.cluster._logfile(next(a for a, nodes in h.cluster.agents().items() if node in nodes))
    deadline = time.monotonic() + 15
    repeated, started = f"job {job_id}: launch repeated; it already ran here", f"job {job_id}: started pid"
    while repeated not in (text := h.read(agent_log)) and text.count(started) < 2:
        assert time.monotonic() < deadline, "the woken controller's launch did not reach the agent"
        time.sleep(0.1)
    assert text.count(started) == 1 and len(h.read(runs).split()) == 1  # ran once
    acct = h.run(["sacct", "-D", "-X", "-n", "-P", "-j", str(job_id), "--format=JobID,State"])
    assert acct.stdout.split() == [f"{job_id}|COMPLETED"], acct.stdout
