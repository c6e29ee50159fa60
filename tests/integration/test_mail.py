"""--mail-type with real daemons: the controller runs MailProg (here a script that appends
its argv and environment to a file) with Slurm's subjects and recipients; an automatic
drain mails AdminMail; a MailProg that hangs stalls nothing."""

from __future__ import annotations

import json
import os
import pathlib
import re
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from harness import Harness, wait_for
from muster.cluster.local import ClusterShape

pytestmark = pytest.mark.integration

MAILPROG = """#!/usr/bin/python3
import json, os, sys, time
env = {k: v for k, v in os.environ.items() if k.startswith(("SLURM_", "MUSTER_"))}
with open(%(log)r, "a") as f:
    f.write(json.dumps({"argv": sys.argv[1:], "env": env}) + "\\n")
if os.path.exists(%(hang)r):
    time.sleep(3600)
"""
# A Prolog that fails for one job name only: its node is drained (a node's fault).
PROLOG = '#!/bin/sh\n[ "$SLURM_JOB_NAME" = drainme ] && exit 1\nexit 0\n'


@pytest.fixture(scope="module")
def mc() -> Iterator[Harness]:
    h = Harness(ClusterShape(nodes=2, gpus_per_node=0, cpus_per_node=4, mem_per_node=8000))
    log, hang = os.path.join(h.root, "mail.log"), os.path.join(h.root, "mail.hang")
    prog, prolog = os.path.join(h.root, "mailprog"), os.path.join(h.root, "prolog")
    for path, text in ((prog, MAILPROG % {"log": log, "hang": hang}), (prolog, PROLOG)):
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o755)
    h.settings = {
        **(h.settings or {}),
        "MailProg": prog,
        "MailDomain": "example.org",
        "AdminMail": "ops",
        "Prolog": prolog,
        "MetricsType": "metrics/openmetrics",
    }
    h.up()
    try:
        yield h
    finally:
        h.down()


def mails(h: Harness) -> list[dict[str, Any]]:
    try:
        with open(os.path.join(h.root, "mail.log")) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def wait_mails(h: Harness, match: Callable[[dict[str, Any]], bool], count: int, timeout: float = 60) -> list[Any]:

    def enough() -> list[Any] | None:
        got = [m for m in mails(h) if match(m)]
        return got if len(got) >= count else None

    try:
        return wait_for(enough, timeout, interval=0.1, what=f"{count} mails")
    except AssertionError:
        got = [m for m in mails(h) if match(m)]
        raise AssertionError(f"{len(got)} of {count} mails: {mails(h)}") from None


def of_job(job_id: int) -> Callable[[dict[str, Any]], bool]:
    return lambda m: m["env"].get("SLURM_JOB_ID") == str(job_id)


def subject(m: dict[str, Any]) -> str:
    assert m["argv"][0] == "-s"
    return str(m["argv"][1])


def test_begin_and_end_go_to_the_submitting_user_at_maildomain(mc: Harness) -> None:
    job_id = mc.sbatch("-J", "train", "--mail-type=BEGIN,END", "--wrap", "true")
    user = mc.wait_job(job_id)["user"]
    began, ended = wait_mails(mc, of_job(job_id), 2)
    assert re.fullmatch(rf"Slurm Job_id={job_id} Name=train Began, Queued time \d\d:\d\d:\d\d", subject(began))
    assert re.fullmatch(
        rf"Slurm Job_id={job_id} Name=train Ended, Run time \d\d:\d\d:\d\d, COMPLETED, ExitCode 0", subject(ended)
    )
    assert began["argv"][2] == ended["argv"][2] == f"{user}@example.org"
    assert ended["env"]["SLURM_JOB_MAIL_TYPE"] == "Ended" and ended["env"]["SLURM_JOB_STATE"] == "COMPLETED"
    assert ended["env"]["SLURM_JOB_USER"] == user and ended["env"]["SLURM_JOB_NAME"] == "train"
    shown = mc.run(["scontrol", "show", "job", str(job_id)]).stdout
    assert f"MailUser={user} MailType=BEGIN,END" in shown


def test_fail_goes_to_mail_user(mc: Harness) -> None:
    job_id = mc.sbatch("-J", "bad", "--mail-type=FAIL", "--mail-user=bob", "--wrap", "exit 3")
    (m,) = wait_mails(mc, of_job(job_id), 1)
    assert re.fullmatch(rf"Slurm Job_id={job_id} Name=bad Failed, Run time \S+, FAILED, ExitCode 3", subject(m))
    assert m["argv"][2] == "bob@example.org" and m["env"]["SLURM_JOB_EXIT_CODE_MAX"] == "3"


def test_time_limit_50_warns_half_way(mc: Harness) -> None:
    job_id = mc.sbatch("-J", "half", "--time=0:06", "--mail-type=TIME_LIMIT_50", "--wrap", "sleep 4")
    (m,) = wait_mails(mc, of_job(job_id), 1)
    assert re.fullmatch(rf"Slurm Job_id={job_id} Name=half Reached 50% of time limit, Run time \S+", subject(m))
    mc.wait_job(job_id)


def test_array_tasks_each_mail_and_an_array_without_them_mails_once(mc: Harness) -> None:
    each = mc.sbatch("-J", "each", "--array=1-2", "--mail-type=END,ARRAY_TASKS", "--wrap", "true")
    whole = mc.sbatch("-J", "whole", "--array=1-2", "--mail-type=END", "--wrap", "true")
    got = wait_mails(mc, lambda m: m["env"].get("SLURM_ARRAY_JOB_ID") == str(each), 2)
    assert sorted(subject(m).split(" Name=")[0] for m in got) == [
        f"Slurm Array Task Job_id={each}_1 ({each})",
        f"Slurm Array Task Job_id={each}_2 ({each + 1})",
    ]
    (summary,) = wait_mails(mc, lambda m: m["env"].get("SLURM_ARRAY_JOB_ID") == str(whole), 1)
    assert (
        subject(summary)
        == f"Slurm Array Summary Job_id={whole}_* ({whole}) Name=whole Ended, COMPLETED, ExitCode [0-0]"
    )


def test_scontrol_requeue_mails_requeued(mc: Harness) -> None:
    job_id = mc.sbatch("-J", "rq", "--mail-type=REQUEUE", "--wrap", "sleep 60")
    mc.wait_state(job_id, "RUNNING")
    try:
        assert mc.run(["scontrol", "requeue", str(job_id)]).returncode == 0
        (m,) = wait_mails(mc, of_job(job_id), 1)
        assert re.fullmatch(rf"Slurm Job_id={job_id} Name=rq Requeued, Run time \d\d:\d\d:\d\d", subject(m))
    finally:
        mc.run(["scancel", str(job_id)])


def test_a_dependency_never_met_mails_invalid_depend(mc: Harness) -> None:
    first = mc.sbatch("--wrap", "exit 1")
    mc.wait_job(first)
    job_id = mc.sbatch("-J", "dep", f"--dependency=afterok:{first}", "--mail-type=INVALID_DEPEND", "--wrap", "true")
    try:
        (m,) = wait_mails(mc, of_job(job_id), 1)
        assert subject(m) == f"Slurm Job_id={job_id} Name=dep Invalid Dependency"
    finally:
        mc.run(["scancel", str(job_id)])


def test_an_automatic_drain_mails_the_admin_address(mc: Harness) -> None:
    job_id = mc.sbatch("-J", "drainme", "-w", "node2", "--wrap", "true")
    try:
        (m,) = wait_mails(mc, lambda m: m["env"].get("MUSTER_NODE") == "node2", 1)
        assert m["argv"][2] == "ops@example.org" and subject(m).startswith("Muster Node=node2 Drained, Reason=")
        assert m["env"]["MUSTER_EVENT"] == "node_drained"
    finally:
        mc.run(["scancel", str(job_id)])
        mc.run(["scontrol", "update", "NodeName=node2", "State=RESUME"])


def test_the_alerting_rules_read_metrics_the_controller_exports(mc: Harness) -> None:
    """Every metric deploy/prometheus/muster-alerts.yml reads is on this controller's
    /metrics (the TLS expiry only under TLSType=tls/muster: tests/unit/ctld/test_certexpiry.py)."""
    rules = yaml.safe_load((pathlib.Path(__file__).parents[2] / "deploy/prometheus/muster-alerts.yml").read_text())
    exprs = [str(r["expr"]) for g in rules["groups"] for r in g["rules"]]
    wanted = {n for e in exprs for n in re.findall(r"\b((?:slurm|muster)_[a-z_]+)", e)}
    cfg = mc.cluster.config()
    with urllib.request.urlopen(f"http://{cfg.ctld_addr}:{cfg.ctld_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    exported = set(re.findall(r"^# TYPE (\S+) (\S+)", text, re.M))
    names = {n for n, _ in exported} | {f"{n}_total" for n, t in exported if t == "counter"}
    names |= {f"{n}_count" for n, t in exported if t == "histogram"}
    missing = sorted(n for n in wanted if n not in names and not n.startswith("muster_tls_"))
    assert not missing, missing


def test_a_hanging_mailprog_does_not_stall_scheduling(mc: Harness) -> None:
    """Last in the module: the hanging MailProg processes stay until the controller stops."""
    with open(os.path.join(mc.root, "mail.hang"), "w"):
        pass
    jobs = [mc.sbatch("-J", f"hang{i}", "--mail-type=BEGIN,END", "--wrap", "true") for i in range(8)]
    for job_id in jobs:  # 16 mails, 4 MailProg processes hanging: every job still runs and ends
        assert mc.wait_job(job_id, timeout=60)["state"] == "COMPLETED"
    assert len(wait_mails(mc, lambda m: m["env"].get("SLURM_JOB_NAME", "").startswith("hang"), 4)) == 4
    assert mc.run(["squeue"]).returncode == 0
