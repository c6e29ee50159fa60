"""Issue 16 with real daemons: /metrics scraped with Prometheus's own parser while jobs run,
fail and are requeued, every count compared with what squeue and sinfo say at that moment;
the probes; sdiag and its --reset; the daemons' JSON logs; an agent's GPU metrics."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness import Harness
from muster.cluster.local import ClusterShape
from waiting import wait_for

pytestmark = pytest.mark.integration

NOBODY = 65534


@pytest.fixture(scope="module")
def mcluster() -> Iterator[Harness]:
    h = Harness(
        ClusterShape(nodes=3, gpus_per_node=4, cpus_per_node=8, mem_per_node=16000),
        settings={"MetricsType": "metrics/openmetrics", "LogFormat": "json"},
    )
    h.up()
    try:
        yield h
    finally:
        h.down()


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def scrape(h: Harness, path: str = "/metrics") -> dict[tuple[str, tuple], float]:
    cfg = h.cluster.config()
    status, text = get(f"http://{cfg.ctld_addr}:{cfg.ctld_port}{path}")  # no credential: a scraper has none
    assert status == 200, text
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def sdiag(h: Harness, *args: str, uid: int | None = None):  # noqa: ANN201 - CompletedProcess
    return h.run([sys.executable, "-m", "muster.cli.sdiag", *args], uid=uid)


def _word(state: str) -> str:
    return {"NODE_FAIL": "node_failed", "BOOT_FAIL": "boot_failed"}.get(state, state.lower())


def compare_with_squeue_and_sinfo(h: Harness) -> dict[tuple[str, tuple], float]:
    """Scrape, run squeue and sinfo, scrape again; the two scrapes must agree (nothing
    moved meanwhile) and every count must equal what the commands show. Returns the scrape."""
    before = scrape(h)
    squeue = h.run(["squeue", "-t", "all", "-h", "-o", "%i %P %T %u"])
    sinfo = h.run(["sinfo", "-N", "-h", "-o", "%N %T %C"])
    complete = h.run(["sinfo", "-N", "-h", "-O", "NodeList:20,StateComplete:40"])
    by_filter = {
        metric: len(h.run(["sinfo", "-N", "-h", "-t", word, "-o", "%N"]).stdout.split())
        for word, metric in (
            ("idle", "idle"),
            ("mixed", "mixed"),
            ("alloc", "alloc"),
            ("down", "down"),
            ("drain", "drain"),
        )
    }
    m = scrape(h)
    assert squeue.returncode == 0 and sinfo.returncode == 0 and complete.returncode == 0, sinfo.stderr + complete.stderr
    stable = (
        "slurm_jobs",
        "slurm_nodes",
        "slurm_partition_jobs",
        "slurm_user_jobs",
        "slurm_node_",
        "muster_node_state",
    )
    assert {k: v for k, v in before.items() if k[0].startswith(stable)} == {
        k: v for k, v in m.items() if k[0].startswith(stable)
    }, "the cluster changed during the comparison"
    rows = [line.split() for line in squeue.stdout.splitlines()]
    states = Counter(_word(r[2]) for r in rows)
    assert m[("slurm_jobs", ())] == len(rows)
    for word in ("pending", "running", "completed", "failed", "cancelled", "timeout", "node_failed"):
        assert m[(f"slurm_jobs_{word}", ())] == states[word], word
    for (part, word), n in Counter((r[1], _word(r[2])) for r in rows).items():
        assert m[(f"slurm_partition_jobs_{word}", (("partition", part),))] == n
    for (user, word), n in Counter((r[3], _word(r[2])) for r in rows).items():
        assert m[(f"slurm_user_jobs_{word}", (("username", user),))] == n
    nodes = [line.split() for line in sinfo.stdout.splitlines()]
    assert m[("slurm_nodes", ())] == len(nodes)
    for name, state, cpus in nodes:
        assert m[("muster_node_state", (("node", name), ("state", state)))] == 1
        assert m[("slurm_node_cpus_alloc", (("node", name),))] == int(cpus.split("/")[0])
    words = Counter(state.rstrip("*") for _n, state, _c in nodes)
    assert m[("slurm_nodes_drain", ())] == words["drained"] + words["draining"]
    assert m[("slurm_nodes_down", ())] == words["down"]
    assert m[("slurm_nodes_noresp", ())] == sum(1 for _n, state, _c in nodes if state.endswith("*"))
    # base states, whatever the flags: StateComplete's first word (idle+drain, down*+drain...)
    bases = Counter(line.split()[1].split("+")[0].rstrip("*") for line in complete.stdout.splitlines())
    for word, metric in {"idle": "idle", "mixed": "mixed", "allocated": "alloc", "down": "down"}.items():
        assert m[(f"slurm_nodes_{metric}", ())] == bases[word], (word, complete.stdout)
    for metric, n in by_filter.items():  # what `sinfo -t STATE` counts
        assert m[(f"slurm_nodes_{metric}", ())] == n, metric
    return m


def test_every_count_equals_squeue_and_sinfo_while_jobs_run_fail_and_requeue(mcluster: Harness) -> None:
    h = mcluster
    done = h.sbatch("--wrap", "true")
    failed = h.sbatch("--wrap", "exit 3")
    running = h.sbatch("--gres=gpu:2", "-c", "2", "--wrap", "sleep 120")
    requeued = h.sbatch("--wrap", "sleep 120")
    h.wait_state(running, "RUNNING")
    h.wait_state(requeued, "RUNNING")
    assert h.run(["scontrol", "requeuehold", str(requeued)]).returncode == 0
    waiting = h.sbatch("-N3", "--gres=gpu:4", "--wrap", "true")  # cannot fit while the others run
    h.wait_job(done)
    h.wait_job(failed)
    h.wait_job(requeued, lambda j: j["state"] == "PENDING" and not j["completing"])
    assert h.run(["scontrol", "update", "NodeName=node3", "State=DRAIN", "Reason=metrics test"]).returncode == 0
    try:
        h.wait_passes()  # a pass after the drain has considered the pending jobs
        m = compare_with_squeue_and_sinfo(h)
        assert m[("slurm_jobs_completed", ())] >= 1 and m[("slurm_jobs_failed", ())] >= 1
        assert m[("slurm_jobs_pending", ())] >= 2
        assert m[("slurm_jobs_requeued", ())] == 1 and m[("slurm_jobs_held", ())] == 1
        assert m[("slurm_nodes_drain", ())] == 1
        job = h.job(running)
        assert m[("slurm_node_gpus_alloc", (("node", job["nodelist"]),))] >= 2
        assert m[("muster_job_requeues_total", (("reason", "scontrol"),))] == 1
        assert m[("muster_sched_phase_seconds_count", (("phase", "4.placement"),))] >= 1
        assert (
            "muster_node_heartbeat_lag_seconds",
            (("node", job["nodelist"]),),
        ) in m
        # the agent's own /metrics: its GPUs, the ones the job holds
        cfg = h.cluster.config()
        node = next(n for n in cfg.nodes if n.name == job["nodelist"])
        status, text = get(f"http://{node.addr}:{node.port}/metrics")
        assert status == 200, text
        agent = {
            (s.name, s.labels.get("gpu")): s.value for f in text_string_to_metric_families(text) for s in f.samples
        }
        assert agent[("muster_agent_gpus", None)] == 4
        assert agent[("muster_agent_gpus_alloc", None)] == m[("slurm_node_gpus_alloc", (("node", node.name),))]
        assert sum(agent[("muster_agent_gpu_healthy", str(i))] for i in range(4)) == 4
    finally:
        h.run(["scontrol", "update", "NodeName=node3", "State=RESUME"])
        h.run(["scancel", str(running), str(requeued), str(waiting)])


def test_the_probes_answer_without_a_credential(mcluster: Harness) -> None:
    cfg = mcluster.cluster.config()
    for path in ("/livez", "/readyz", "/healthz"):
        assert get(f"http://{cfg.ctld_addr}:{cfg.ctld_port}{path}") == (200, "ok\n")
    status, _ = get(f"http://{cfg.ctld_addr}:{cfg.ctld_port}/metrics/nosuch")
    assert status == 404
    assert "slurm_nodes_idle" in get(f"http://{cfg.ctld_addr}:{cfg.ctld_port}/metrics/nodes")[1]
    # everything else over TCP still wants a credential
    assert get(f"http://{cfg.ctld_addr}:{cfg.ctld_port}/v1/diag")[0] == 401


def test_slurm_26_05_gpu_families_count_a_running_gpu_job(mcluster: Harness) -> None:
    """Slurm 26.05's GPU names on their endpoints, read with Prometheus's parser (scrape)."""
    h = mcluster
    job_id = h.sbatch("--gres=gpu:3", "--wrap", "sleep 120")
    try:
        h.wait_state(job_id, "RUNNING")
        job = h.job(job_id)

        def three_allocated() -> dict[tuple[str, tuple], float] | None:
            nodes = scrape(h, "/metrics/nodes")
            return nodes if nodes[("slurm_nodes_gpus_alloc", ())] == 3 else None

        # earlier tests' jobs may still be completing (they hold their GPUs until then)
        nodes = wait_for(three_allocated, 60, interval=0.2, what="3 GPUs allocated in /metrics/nodes")
        assert nodes[("slurm_nodes_gpus_total", ())] == 12
        assert nodes[("slurm_node_gpus_alloc", (("node", job["nodelist"]),))] == 3
        assert nodes[("slurm_node_gpus", (("node", job["nodelist"]),))] == 4
        parts = scrape(h, "/metrics/partitions")
        label = (("partition", job["partition"]),)
        assert parts[("slurm_partition_jobs_gpus_alloc", label)] == 3
        assert parts[("slurm_partition_gpus", label)] == 12
        ua = scrape(h, "/metrics/jobs-users-accts")
        assert ua[("slurm_user_jobs_gpus_alloc", (("username", job["user"]),))] == 3
        assert ua[("slurm_account_jobs_gpus_alloc", (("account", job["account"] or job["user"]),))] == 3
        assert scrape(h, "/metrics/jobs")[("slurm_jobs_gpus_alloc", ())] == 3
    finally:
        h.run(["scancel", str(job_id)])


def test_sdiag_shows_the_counts_and_only_an_admin_may_reset_them(mcluster: Harness) -> None:
    h = mcluster
    h.wait_job(h.sbatch("--wrap", "true"))
    out = sdiag(h)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    submitted = int(next(x for x in lines if x.startswith("Jobs submitted:")).split(":")[1])
    assert submitted >= 1
    for header in ("Main schedule statistics (microseconds):", "Backfilling stats"):
        assert header in lines
    assert any(x.split()[0] == "REQUEST_SUBMIT_BATCH_JOB" for x in lines if "ave_time:" in x)
    denied = sdiag(h, "--reset", uid=NOBODY)
    assert denied.returncode == 1
    assert denied.stderr.strip() == "slurm_reset_statistics: Access/permission denied"
    assert sdiag(h).stdout.count(f"Jobs submitted: {submitted}") == 1  # nothing was reset
    reset = sdiag(h, "-r")
    assert reset.returncode == 0 and reset.stdout == "Reset scheduling statistics\n"
    assert "Jobs submitted: 0" in sdiag(h).stdout.splitlines()


def test_both_daemons_log_one_json_object_per_line(mcluster: Harness) -> None:
    h = mcluster
    h.wait_job(h.sbatch("--wrap", "true"))
    ctld = h.cluster._logfile("musterctld")
    agent = h.cluster._logfile("node1")
    lines = [json.loads(x) for x in open(ctld).read().splitlines() if x.strip()]
    assert all({"time", "level", "logger", "message"} <= set(x) for x in lines)
    passes = [x for x in lines if x["message"].startswith("pass ")]
    assert passes and all({"pass_id", "phases_ms", "counts"} <= set(x) for x in passes)
    allocated = [x for x in lines if x["message"].startswith("sched: Allocate JobId=")]
    assert allocated and all("job_id" in x and "pass_id" in x for x in allocated)
    agent_lines = [json.loads(x) for x in open(agent).read().splitlines() if x.strip()]
    assert agent_lines and all(x["node"] == "node1" and x["daemon"] == "musterd" for x in agent_lines)
    assert os.path.getsize(ctld) > 0


def test_a_node_failure_and_its_requeue_are_counted(tmp_path_factory: pytest.TempPathFactory) -> None:
    h = Harness(
        ClusterShape(nodes=3, gpus_per_node=2, cpus_per_node=4, mem_per_node=8000),
        settings={"MetricsType": "metrics/openmetrics", "SlurmdTimeout": "4", "KillWait": "2"},
    )
    h.up()
    try:
        job_id = h.sbatch("--requeue", "--wrap", 'touch "ran-${SLURM_RESTART_COUNT:-0}"; sleep 60')
        victim = h.wait_state(job_id, "RUNNING")["nodelist"]
        # its script runs: not a failed launch
        wait_for(lambda: os.path.exists(os.path.join(h.workdir, "ran-0")), 30, what="the first attempt's script")
        time.sleep(2.0)  # and the controller has the agent's answer to the launch (else: a failed launch)
        pid = h.cluster._alive(victim)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        rerun = h.wait_job(job_id, lambda j: j["restart_count"] == 1 and j["state"] == "RUNNING", timeout=30)
        assert rerun["nodelist"] != victim
        m = compare_with_squeue_and_sinfo(h)
        assert m[("slurm_nodes_down", ())] == 1
        assert m[("muster_node_state", (("node", victim), ("state", "down*")))] == 1
        assert m[("muster_job_requeues_total", (("reason", "node_fail"),))] == 1
        assert m[("muster_job_events_total", (("kind", "node_fail"),))] == 1
        assert "Jobs failed:    1" in sdiag(h).stdout.splitlines()
        h.run(["scancel", str(job_id)])
    finally:
        h.down()
