"""What the controller mails (``ctld.mailnotes``) on a manual clock, and how MailProg is
run (``ctld.mailer``): bounded, never blocking, failures logged once."""

from __future__ import annotations

import asyncio
import logging
import os
import pathlib
import stat
from typing import Any

import pytest

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.errors import InvalidRequest
from muster.core.job import JobSpec, NodeAlloc
from muster.ctld.controller import Controller, Identity
from muster.ctld.mailer import Mailer
from muster.ctld.mailnotes import Mail, MailNotes
from muster.ctld.store import Store
from waiting import wait_until

CONF = """
ClusterName=t
SlurmdTimeout=10
MailDomain=example.org
AdminMail=ops
NodeName=node[1-4] CPUs=32 RealMemory=128000 Gres=gpu:8
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)


@pytest.fixture
def ctl(tmp_path: pathlib.Path) -> Controller:
    c = Controller(parse_config(CONF, "t.conf"), Store(str(tmp_path / "m.db")), ManualClock(1000.0))
    c.load()
    for name in c.nodes:
        c.agents.register({"node": name, "gpus": 8, "running": []})
    return c


@pytest.fixture
def sent(ctl: Controller) -> list[Mail]:
    out: list[Mail] = []
    ctl.mail = MailNotes(ctl, out.append, ctl.clock.now())
    return out


def start(ctl: Controller, job: Any, nodes: tuple[str, ...] = ("node1",)) -> None:
    class S:
        job_id, partition, backfilled = job.job_id, "gpu", False
        alloc = [NodeAlloc(n, 1, 0, []) for n in nodes]

    ctl.launches.apply_starts([S()], ctl.clock.now())
    ctl.launches.launch_done(job.job_id)


def advance(ctl: Controller, seconds: float) -> None:
    assert isinstance(ctl.clock, ManualClock)
    ctl.clock.advance(seconds)


def subjects(sent: list[Mail]) -> list[str]:
    return [m.subject for m in sent]


def test_begin_and_end_carry_slurms_subjects_env_and_maildomain(ctl: Controller, sent: list[Mail]) -> None:
    job = ctl.queue.submit(JobSpec(name="train", mail_type=["BEGIN", "END"], time_limit=600), ALICE)
    advance(ctl, 5)
    start(ctl, job)
    advance(ctl, 65)
    ctl.launches.job_done({"job_id": job.job_id, "exit_code": 0, "node": "node1"})
    assert subjects(sent) == [
        f"Slurm Job_id={job.job_id} Name=train Began, Queued time 00:00:05",
        f"Slurm Job_id={job.job_id} Name=train Ended, Run time 00:01:05, COMPLETED, ExitCode 0",
    ]
    assert {m.recipient for m in sent} == {"alice@example.org"}
    began, ended = (m.env for m in sent)
    assert began["SLURM_JOB_MAIL_TYPE"] == "Began" and began["SLURM_JOB_QUEUED_TIME"] == "00:00:05"
    assert began["SLURM_JOB_ID"] == str(job.job_id) and began["SLURM_JOB_USER"] == "alice"
    assert ended["SLURM_JOB_STATE"] == "COMPLETED" and ended["SLURM_JOB_EXIT_CODE_MAX"] == "0"
    assert ended["SLURM_JOB_RUN_TIME"] == "00:01:05" and ended["SLURM_CLUSTER_NAME"] == "t"


def test_a_failure_mails_fail_and_mail_user_is_kept_whole(ctl: Controller, sent: list[Mail]) -> None:
    job = ctl.queue.submit(JobSpec(name="x", mail_type=["FAIL"], mail_user="bob@lab.net"), ALICE)
    ok = ctl.queue.submit(JobSpec(name="y", mail_type=["FAIL"]), ALICE)
    start(ctl, job)
    start(ctl, ok, ("node2",))
    advance(ctl, 1)
    ctl.launches.job_done({"job_id": job.job_id, "exit_code": 3, "node": "node1"})
    ctl.launches.job_done({"job_id": ok.job_id, "exit_code": 0, "node": "node2"})
    assert subjects(sent) == [f"Slurm Job_id={job.job_id} Name=x Failed, Run time 00:00:01, FAILED, ExitCode 3"]
    assert sent[0].recipient == "bob@lab.net"


def test_no_mail_type_no_mail(ctl: Controller, sent: list[Mail]) -> None:
    job = ctl.queue.submit(JobSpec(name="quiet"), ALICE)
    start(ctl, job)
    ctl.launches.job_done({"job_id": job.job_id, "exit_code": 1, "node": "node1"})
    assert sent == []


def test_time_limit_shares_are_mailed_once_each(ctl: Controller, sent: list[Mail]) -> None:
    job = ctl.queue.submit(JobSpec(name="t", mail_type=["TIME_LIMIT_50", "TIME_LIMIT_90"], time_limit=100), ALICE)
    start(ctl, job)
    assert ctl.mail is not None
    for _ in range(12):
        advance(ctl, 8)
        ctl.mail.time_limits(ctl.clock.now())
    assert subjects(sent) == [
        f"Slurm Job_id={job.job_id} Name=t Reached 50% of time limit, Run time 00:00:56",
        f"Slurm Job_id={job.job_id} Name=t Reached 90% of time limit, Run time 00:01:36",
    ]


def test_a_share_passed_before_the_controller_started_is_not_mailed_again(ctl: Controller, sent: list[Mail]) -> None:
    job = ctl.queue.submit(JobSpec(name="t", mail_type=["TIME_LIMIT_50"], time_limit=100), ALICE)
    start(ctl, job)
    advance(ctl, 70)
    restarted = MailNotes(ctl, sent.append, ctl.clock.now())  # as a new controller would
    restarted.watch_running()
    restarted.time_limits(ctl.clock.now())
    assert sent == []


def test_requeue_and_hung_mail_requeued(ctl: Controller, sent: list[Mail]) -> None:
    job = ctl.queue.submit(JobSpec(name="r", mail_type=["REQUEUE"]), ALICE)
    start(ctl, job)
    advance(ctl, 12)
    ctl.queue.requeue_job(job, ALICE)
    assert subjects(sent) == [f"Slurm Job_id={job.job_id} Name=r Requeued, Run time 00:00:12"]
    assert sent[0].env["SLURM_JOB_MAIL_TYPE"] == "Requeued"


def test_a_hung_job_mails_its_user_when_fail_is_asked(ctl: Controller, sent: list[Mail]) -> None:
    from muster.ctld.training import hang_grace

    job = ctl.queue.submit(JobSpec(name="stuck", mail_type=["FAIL"], hang_timeout=10), ALICE)
    start(ctl, job)

    def beat(seconds: float) -> None:  # the nodes keep answering; the job's progress stops
        advance(ctl, seconds)
        for name, node in ctl.nodes.items():
            ctl.agents.heartbeat({"node": name, "running": [list(k) for k in node.allocs]})
        ctl.liveness.check_nodes()

    r = {"job_id": job.job_id, "attempt": 0, "first": ctl.clock.now(), "step": 1, "step_time": ctl.clock.now()}
    ctl.agents.heartbeat({"node": "node1", "running": [[job.job_id, 0]], "progress": [r]})
    beat(11)
    beat(hang_grace(10))
    assert [m.subject for m in sent] == [f"Slurm Job_id={job.job_id} Name=stuck Requeued, Run time 00:00:16, Hung"]
    assert sent[0].env["MUSTER_EVENT"] == "hung" and sent[0].env["MUSTER_REASON"].startswith("Hung: no progress")


def test_invalid_dependency_is_mailed_once(ctl: Controller, sent: list[Mail]) -> None:
    job = ctl.queue.submit(JobSpec(name="d", mail_type=["INVALID_DEPEND"]), ALICE)
    assert ctl.mail is not None
    ctl.mail.dependency_never([job.job_id])
    ctl.mail.dependency_never([job.job_id])
    assert subjects(sent) == [f"Slurm Job_id={job.job_id} Name=d Invalid Dependency"]


def test_an_array_is_mailed_as_a_whole_unless_array_tasks(ctl: Controller, sent: list[Mail]) -> None:
    whole = ctl.queue.submit(JobSpec(name="a", array="0-1", mail_type=["BEGIN", "END"]), ALICE)
    a = whole.array_job_id
    tasks = [ctl.jobs[i] for i in sorted(ctl.arrays.tasks[a].values())]
    for t, node in zip(tasks, ("node1", "node2"), strict=True):
        start(ctl, t, (node,))
    for t, code in zip(tasks, (0, 2), strict=True):
        ctl.launches.job_done({"job_id": t.job_id, "exit_code": code, "node": t.batch_host})
    assert subjects(sent) == [
        f"Slurm Array Summary Job_id={a}_* ({a}) Name=a Began",
        f"Slurm Array Summary Job_id={a}_* ({a}) Name=a Ended, Mixed, ExitCode [0-2]",
    ]
    sent.clear()
    each = ctl.queue.submit(JobSpec(name="b", array="3", mail_type=["BEGIN", "ARRAY_TASKS"]), ALICE)
    start(ctl, each, ("node3",))
    assert subjects(sent) == [
        f"Slurm Array Task Job_id={each.array_job_id}_3 ({each.job_id}) Name=b Began, Queued time 00:00:00"
    ]
    assert sent[0].env["SLURM_ARRAY_TASK_ID"] == "3"


def test_array_tasks_started_and_ended_in_one_commit_make_one_summary_each(ctl: Controller, sent: list[Mail]) -> None:
    from muster.core import lifecycle

    first = ctl.queue.submit(JobSpec(name="c", array="0-2", mail_type=["BEGIN", "END"]), ALICE)
    a = first.array_job_id
    tasks = [ctl.jobs[i] for i in sorted(ctl.arrays.tasks[a].values())]

    class S:
        def __init__(self, job: Any, node: str) -> None:
            self.job_id, self.partition, self.backfilled = job.job_id, "gpu", False
            self.alloc = [NodeAlloc(node, 1, 0, [])]

    ctl.launches.apply_starts([S(t, n) for t, n in zip(tasks, ("node1", "node2", "node3"), strict=True)], 1000.0)
    advance(ctl, 3)
    for t in tasks:  # as a group commit of their agents' reports does it (ctld.commits)
        lifecycle.finish(t, 0, 0, ctl.clock.now())
        ctl.release_resources(t)
    ctl.record(ctl.clock.now(), [(t, "completed", {"exit_code": 0}) for t in tasks])
    assert subjects(sent) == [
        f"Slurm Array Summary Job_id={a}_* ({a}) Name=c Began",
        f"Slurm Array Summary Job_id={a}_* ({a}) Name=c Ended, COMPLETED, ExitCode [0-0]",
    ]


def test_an_automatic_drain_mails_the_admin_address(ctl: Controller, sent: list[Mail]) -> None:
    ctl.drain("node2", "launch failed: no such directory")
    assert [(m.recipient, m.subject) for m in sent] == [
        ("ops@example.org", "Muster Node=node2 Drained, Reason=launch failed: no such directory")
    ]
    assert sent[0].env["MUSTER_EVENT"] == "node_drained" and sent[0].env["MUSTER_NODE"] == "node2"


def test_a_node_judged_down_mails_the_admin_address(ctl: Controller, sent: list[Mail]) -> None:
    advance(ctl, 30)
    for name in ("node1", "node2", "node3"):
        ctl.agents.heartbeat({"node": name, "running": []})
    ctl.liveness.check_nodes()
    assert [(m.recipient, m.subject) for m in sent] == [
        ("ops@example.org", "Muster Node=node4 Down, Reason=Not responding for 30 s, 0 job(s) on it")
    ]


def test_an_unknown_mail_type_is_refused_at_submission(ctl: Controller) -> None:
    from muster.core.errors import InvalidRequest

    with pytest.raises(InvalidRequest, match="SOON"):
        ctl.queue.submit(JobSpec(name="x", mail_type=["SOON"]), ALICE)
    assert not ctl.jobs


@pytest.mark.parametrize("user", ["-oProxyCommand=x", "a b", "a\nCc: b", ""])
def test_a_mail_user_mailprog_could_read_as_an_option_is_refused(ctl: Controller, user: str) -> None:
    from muster.core.errors import InvalidRequest

    with pytest.raises(InvalidRequest, match="--mail-user"):
        ctl.queue.submit(JobSpec(name="x", mail_type=["END"], mail_user=user), ALICE)


def test_a_job_name_cannot_break_the_subject_into_headers(ctl: Controller, sent: list[Mail]) -> None:
    with pytest.raises(InvalidRequest, match="Invalid job name"):  # refused at submission now...
        ctl.queue.submit(JobSpec(name="x\nBcc: evil@example.org", mail_type=["BEGIN"]), ALICE)
    job = ctl.queue.submit(JobSpec(name="x", mail_type=["BEGIN"]), ALICE)
    job.spec.name = "x\nBcc: evil@example.org"  # ...but a job recorded before may hold one
    start(ctl, job)
    assert sent[0].subject.startswith(f"Slurm Job_id={job.job_id} Name=x Bcc: evil@example.org Began")


# --- running MailProg -----------------------------------------------------------------------


def _prog(tmp_path: pathlib.Path, body: str) -> str:
    path = tmp_path / "mailprog"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _mailer(prog: str, **kw: Any) -> Mailer:
    config = parse_config(CONF + f"MailProg={prog}\n", "t.conf")
    return Mailer(lambda: config, **kw)


def test_mailprog_gets_subject_recipient_and_environment(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "out"
    mailer = _mailer(_prog(tmp_path, f'printf "%s|%s|%s|%s\\n" "$1" "$2" "$3" "$SLURM_JOB_ID" >> {out}\n'))

    async def go() -> None:
        mailer.send(Mail("alice@example.org", "Slurm Job_id=7 Name=x Began", {"SLURM_JOB_ID": "7"}))
        await wait_until(lambda: not (mailer.queue or mailer.workers), what="the mail sent")

    asyncio.run(go())
    assert out.read_text() == "-s|Slurm Job_id=7 Name=x Began|alice@example.org|7\n"
    assert mailer.sent_count == 1


def test_a_hanging_mailprog_is_killed_and_its_failure_logged_once(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    mailer = _mailer(_prog(tmp_path, "exec sleep 600\n"), processes=2, timeout=0.3)
    seen: list[int] = []

    async def go() -> None:
        for i in range(5):
            mailer.send(Mail("a", f"m{i}"))
        assert len(mailer.workers) == 2  # the cap: the others wait in the queue

        def drained() -> bool:
            seen.append(len(mailer.running))
            return not (mailer.queue or mailer.workers)

        await wait_until(drained, what="the five mails given up")

    with caplog.at_level(logging.ERROR, logger="musterctld"):
        asyncio.run(go())
    assert max(seen) <= 2
    assert mailer.failures_count == 5 and mailer.sent_count == 0
    errors = [r for r in caplog.records if "MailProg" in r.getMessage()]
    assert len(errors) == 1 and "killed after 0.3 s" in errors[0].getMessage()


def test_a_missing_mailprog_and_a_full_queue_never_raise(tmp_path: pathlib.Path) -> None:
    mailer = _mailer(str(tmp_path / "nowhere"), queue=2)
    for i in range(3):  # no event loop: the messages stay queued, the third is dropped
        mailer.send(Mail("a", f"m{i}"))
    assert len(mailer.queue) == 2

    async def go() -> None:
        mailer.send(Mail("a", "m3"))  # dropped too: still full
        mailer.queue.clear()
        mailer.send(Mail("a", "m4"))
        await wait_until(lambda: not (mailer.queue or mailer.workers), what="the mail tried")

    asyncio.run(go())
    assert mailer.failures_count == 1
    assert not os.path.exists(tmp_path / "nowhere")


def test_stopping_kills_what_mailprog_runs(tmp_path: pathlib.Path) -> None:
    mailer = _mailer(_prog(tmp_path, "exec sleep 600\n"))

    async def go() -> int:
        mailer.send(Mail("a", "m"))
        await wait_until(lambda: mailer.running, what="MailProg running")
        (proc,) = mailer.running
        await mailer.stop()
        return await asyncio.wait_for(proc.wait(), 5)

    assert asyncio.run(go()) == -9
