"""What the controller mails, and to whom: Slurm's ``--mail-type`` notices and muster's own.

``MailNotes`` turns what the controller committed into ``Mail`` values and hands each to
a sink (``ctld.mailer.Mailer`` runs ``MailProg`` for it). It does no I/O and reads no
clock: ``now`` is given. Where its hooks are called:

* ``committed``: by ``ClusterState.record`` after every commit that succeeded (a change
  that was not committed is never mailed). The event kinds of the log map to Slurm's types:
  ``start`` -> BEGIN; a job that ended -> END (COMPLETED, CANCELLED) or FAIL (every other
  final state; END when only END was asked), ``timeout`` also TIME_LIMIT; ``requeue``,
  ``hung`` and ``preempted`` back to PENDING -> REQUEUE (``hung``: also when only FAIL was
  asked, the subject ending ``Hung``: muster judged the job stalled).
* ``dependency_never``: by the scheduling loop, for jobs whose dependency can never be met
  -> INVALID_DEPEND, once per job attempt.
* ``time_limits``: by the controller's mail tick, every second -> TIME_LIMIT_50/80/90
  once per attempt; a share of the limit already passed before the controller started is
  not mailed again after a restart.
* ``node_event``: by ``ClusterState.drain`` (a node drained by automation: launch or
  Prolog failures, health check, GPU faults, suspect nodes) and by ``liveness`` (a node
  DOWN after SlurmdTimeout of silence) -> to ``AdminMail``. Further events (a node
  replaced, quarantined) call it with their own word.

Subjects are Slurm's (``Slurm Job_id=12 Name=train Began, Queued time 00:00:01``,
``... Ended, Run time 00:01:00, COMPLETED, ExitCode 0``, ``Slurm Array Summary
Job_id=7_* (7) Name=x Ended, COMPLETED, ExitCode [0-0]``); the environment is what Slurm
gives its MailProg (``SLURM_JOB_ID``, ``SLURM_JOB_MAIL_TYPE``, ``SLURM_JOB_STATE``, ...).
Recipients: ``--mail-user``, else the submitting user; ``MailDomain`` appended to a name
without ``@``. An array without ARRAY_TASKS is mailed as a whole: Began when its first
task starts, Ended or Failed when its last task ends; its tasks' other notices (REQUEUE,
TIME_LIMIT*, INVALID_DEPEND) are mailed per task. STAGE_OUT is accepted and never sent
(muster has no burst buffers).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from muster.core import mailtypes as mt
from muster.core.conftypes import Config
from muster.core.job import Job
from muster.core.outputs import PatternFields, resolve_paths
from muster.core.states import JobState
from muster.core.timetext import format_hms

__all__ = ["Mail", "MailNotes"]

log = logging.getLogger("musterctld")

# Final states whose subject carries the exit code (Slurm's mails show it for these).
_WITH_EXIT_CODE = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED})
# Final states that END (not FAIL) reports.
_ENDED = frozenset({JobState.COMPLETED, JobState.CANCELLED})
# Event kinds of the log that may end a job (``state._AFTER``), and those after which it
# may be back in PENDING for another run (a ``node_fail`` requeued is followed by a
# ``requeue`` in the same commit, which is the one mailed).
_ENDING = frozenset(
    {
        "completed",
        "failed",
        "timeout",
        "out_of_memory",
        "node_fail",
        "deadline",
        "cancel",
        "cancelled",
        "preempted",
        "launch_failed",
    }
)
_REQUEUED = frozenset({"requeue", "hung", "preempted", "launch_failed"})
# Slurm's words for each mail type (the subject's verb and SLURM_JOB_MAIL_TYPE).
WORDS = {
    mt.BEGIN: "Began",
    mt.END: "Ended",
    mt.FAIL: "Failed",
    mt.REQUEUE: "Requeued",
    mt.INVALID_DEPEND: "Invalid Dependency",
    mt.STAGE_OUT: "Staged Out",
    mt.TIME_LIMIT: "Reached time limit",
    mt.TIME_LIMIT_90: "Reached 90% of time limit",
    mt.TIME_LIMIT_80: "Reached 80% of time limit",
    mt.TIME_LIMIT_50: "Reached 50% of time limit",
}
DEFAULT_MAIL_PROGS = ("/bin/mail", "/usr/bin/mail")


@dataclass(frozen=True, slots=True)
class Mail:
    """One message: ``MailProg -s <subject> <recipient>``, with ``env`` added."""

    recipient: str
    subject: str
    env: dict[str, str] = field(default_factory=dict)


class _Memory(Protocol):
    """What the notes read of the controller's memory (``ClusterState`` provides it)."""

    config: Config
    jobs: dict[int, Job]

    @property
    def arrays(self) -> Any: ...


def mail_domain(config: Config) -> str:
    return (config.get("MailDomain") or "").strip().lstrip("@")


def address(name: str, config: Config) -> str:
    """``name``, with ``@MailDomain`` when it has no domain of its own."""
    domain = mail_domain(config)
    return f"{name}@{domain}" if domain and "@" not in name else name


class MailNotes:
    def __init__(self, memory: _Memory, send: Callable[[Mail], None], started: float) -> None:
        self.memory = memory
        self.send = send
        self.started = started  # the controller's start: older time-limit shares are not re-sent
        # running jobs asking for TIME_LIMIT_50/80/90 -> the shares mailed for their attempt
        self.watch: dict[int, tuple[int, set[str]]] = {}
        self.invalid_sent: set[tuple[int, int]] = set()
        # arrays mailed as a whole whose end went out: (array job id, its tasks' restarts)
        # (tasks that end together are committed together: one mail for them all)
        self.arrays_ended: set[tuple[int, int]] = set()

    # --- hooks ---------------------------------------------------------------------------

    def committed(self, now: float, changes: Iterable[tuple[Job, str, dict[str, Any]]]) -> None:
        """Mail what these committed changes call for. Never raises: a fault here is
        logged, and the commit it follows stands."""
        try:
            for job, kind, data in changes:
                if job.spec.mail_type:
                    self._change(job, kind, data)
        except Exception:
            log.exception("mail: could not prepare the notices of a commit")

    def dependency_never(self, job_ids: Iterable[int]) -> None:
        """These pending jobs' dependencies can never be met (``INVALID_DEPEND``)."""
        for job_id in job_ids:
            job = self.memory.jobs.get(job_id)
            if job is None or mt.INVALID_DEPEND not in job.spec.mail_type:
                continue
            key = (job_id, job.restart_count)
            if key in self.invalid_sent:
                continue
            self.invalid_sent.add(key)
            self._mail(job, mt.INVALID_DEPEND, "", {})
        if len(self.invalid_sent) > 10_000:  # forget the jobs that left memory
            self.invalid_sent = {k for k in self.invalid_sent if k[0] in self.memory.jobs}

    def watch_running(self) -> None:
        """Watch the running jobs that ask for time-limit warnings (at start-up)."""
        for job in self.memory.jobs.values():
            if job.state is JobState.RUNNING:
                self._watch(job)

    def time_limits(self, now: float) -> None:
        """Mail TIME_LIMIT_50/80/90 for the watched jobs that passed those shares."""
        for job_id, (attempt, sent) in list(self.watch.items()):
            job = self.memory.jobs.get(job_id)
            if job is None or job.state is not JobState.RUNNING or job.restart_count != attempt:
                del self.watch[job_id]
                continue
            if job.start_time is None or not job.time_limit:
                continue
            for kind, share in mt.TIME_SHARES.items():
                if kind in sent or kind not in job.spec.mail_type:
                    continue
                at = job.start_time + share * job.time_limit
                if now < at:
                    continue
                sent.add(kind)
                if at >= self.started:
                    self._mail(job, kind, f", Run time {format_hms(now - job.start_time)}", self._run_env(job, now))

    def node_event(self, word: str, node: str, reason: str) -> None:
        """Tell the administrators (``AdminMail``) what automation did to a node: ``word``
        is ``Drained`` or ``Down`` today (``Replaced``, ``Quarantined`` when those exist)."""
        try:
            config = self.memory.config
            to = (config.get("AdminMail") or "").strip()
            if not to:
                return
            env = {
                "SLURM_CLUSTER_NAME": config.cluster_name,
                "MUSTER_EVENT": f"node_{word.lower()}",
                "MUSTER_NODE": node,
                "MUSTER_REASON": reason,
            }
            self.send(Mail(address(to, config), _one_line(f"Muster Node={node} {word}, Reason={reason}"), env))
        except Exception:
            log.exception("mail: could not prepare the notice of node %s", node)

    # --- job changes ---------------------------------------------------------------------

    def _change(self, job: Job, kind: str, data: dict[str, Any]) -> None:
        types = job.spec.mail_type
        if kind == "start":
            self._watch(job)
            if mt.BEGIN in types:
                queued = max(0.0, (job.start_time or 0.0) - job.submit_time)
                env = {"SLURM_JOB_QUEUED_TIME": format_hms(queued)}
                self._mail(job, mt.BEGIN, f", Queued time {format_hms(queued)}", env)
        elif job.state.is_terminal and kind in _ENDING:
            self.watch.pop(job.job_id, None)
            if kind == "timeout" and mt.TIME_LIMIT in types:
                self._mail(job, mt.TIME_LIMIT, f", Run time {format_hms(_run_time(job))}", self._end_env(job))
            self._ended(job, data)
        elif job.state is JobState.PENDING and kind in _REQUEUED:
            self.watch.pop(job.job_id, None)
            hung = kind == "hung"
            if mt.REQUEUE in types or (hung and mt.FAIL in types):
                ran = _last_run(job)
                env = {"SLURM_JOB_RUN_TIME": format_hms(ran)}
                if hung:
                    env.update(MUSTER_EVENT="hung", MUSTER_REASON=str(data.get("why") or ""))
                self._mail(job, mt.REQUEUE, f", Run time {format_hms(ran)}" + (", Hung" if hung else ""), env)

    def _ended(self, job: Job, data: dict[str, Any]) -> None:
        types = job.spec.mail_type
        if job.array_job_id is not None and mt.ARRAY_TASKS not in types:
            self._array_ended(job)
            return
        kind = _end_type(job.state in _ENDED, types)
        if kind is None:
            return
        tail = f", Run time {format_hms(_run_time(job))}, {job.state}"
        if job.state in _WITH_EXIT_CODE:
            tail += f", ExitCode {job.exit_code}"
        env = self._end_env(job)
        if str(data.get("why") or "").startswith("Hung"):
            env.update(MUSTER_EVENT="hung", MUSTER_REASON=str(data["why"]))
        self._mail(job, kind, tail, env)

    def _array_ended(self, job: Job) -> None:
        """An array without ARRAY_TASKS: one notice when its last task ends."""
        tasks = self._tasks(job)
        if any(not t.state.is_terminal for t in tasks):
            return
        key = (job.array_job_id or 0, sum(t.restart_count for t in tasks))
        if key in self.arrays_ended:
            return  # another task of this commit's already mailed it
        self.arrays_ended = _remember(self.arrays_ended, key)
        states = {t.state for t in tasks}
        codes = [t.exit_code for t in tasks]
        lo, hi = min(codes, default=0), max(codes, default=0)
        state = str(next(iter(states))) if len(states) == 1 else "Mixed"
        kind = _end_type(states <= _ENDED, job.spec.mail_type)
        if kind is None:
            return
        env = {"SLURM_JOB_EXIT_CODE_MIN": str(lo), "SLURM_JOB_EXIT_CODE_MAX": str(hi), "SLURM_JOB_STATE": state}
        self._mail(job, kind, f", {state}, ExitCode [{lo}-{hi}]", env, summary=True)

    def _watch(self, job: Job) -> None:
        if job.time_limit and any(k in job.spec.mail_type for k in mt.TIME_SHARES):
            self.watch[job.job_id] = (job.restart_count, set())

    def _tasks(self, job: Job) -> list[Job]:
        """The array's tasks in memory (a task purged from memory has ended long ago)."""
        ids = self.memory.arrays.tasks.get(job.array_job_id, {}).values()
        return [t for i in ids if (t := self.memory.jobs.get(i)) is not None]

    # --- one message ---------------------------------------------------------------------

    def _mail(self, job: Job, kind: str, tail: str, env: dict[str, str], summary: bool = False) -> None:
        word = WORDS[kind]
        name = job.spec.name
        array = job.array_job_id
        if array is not None and mt.ARRAY_TASKS not in job.spec.mail_type and kind in (mt.BEGIN, mt.END, mt.FAIL):
            if kind == mt.BEGIN:
                tasks = self._tasks(job)
                if job.restart_count or any(_began_before(t, job) for t in tasks):
                    return  # not the array's first task to start
                tail = ""
            summary = True
        if summary and array is not None:
            subject = f"Slurm Array Summary Job_id={array}_* ({array}) Name={name} {word}{tail}"
        elif array is not None:
            subject = f"Slurm Array Task Job_id={array}_{job.array_task_id} ({job.job_id}) Name={name} {word}{tail}"
        else:
            subject = f"Slurm Job_id={job.job_id} Name={name} {word}{tail}"
        config = self.memory.config
        full = {**self._job_env(job, config), "SLURM_JOB_MAIL_TYPE": word, **env}
        self.send(Mail(address(job.spec.mail_user or job.user, config), _one_line(subject), full))

    def _job_env(self, job: Job, config: Config) -> dict[str, str]:
        """What Slurm gives every MailProg call about the job (PrologSlurmctld's set)."""
        spec = job.spec
        fields = PatternFields(
            job_id=job.job_id,
            job_name=spec.name,
            user=job.user,
            node=job.batch_host or "",
            node_index=0,
            array_job_id=job.array_job_id,
            array_task_id=job.array_task_id,
        )
        out, err = resolve_paths(fields, spec.workdir, spec.stdout, spec.stderr)
        env = {
            "SLURM_CLUSTER_NAME": config.cluster_name,
            "SLURM_JOB_ID": str(job.job_id),
            "SLURM_JOBID": str(job.job_id),
            "SLURM_JOB_NAME": spec.name,
            "SLURM_JOB_USER": job.user,
            "SLURM_JOB_UID": str(job.uid),
            "SLURM_JOB_GROUP": job.group,
            "SLURM_JOB_GID": str(job.gid),
            "SLURM_JOB_PARTITION": job.partition,
            "SLURM_JOB_ACCOUNT": spec.account or "",
            "SLURM_JOB_NODELIST": ",".join(job.nodes),
            "SLURM_JOB_STATE": str(job.state),
            "SLURM_JOB_WORK_DIR": spec.workdir,
            "SLURM_JOB_STDOUT": out,
            "SLURM_JOB_STDERR": err,
            "SLURM_JOB_STDIN": spec.stdin or "/dev/null",
        }
        if job.time_limit:
            env["SLURM_JOB_TIME_LIMIT"] = format_hms(job.time_limit)
        if job.array_job_id is not None:
            env.update(
                SLURM_ARRAY_JOB_ID=str(job.array_job_id),
                SLURM_ARRAY_TASK_ID=str(job.array_task_id),
                SLURM_ARRAY_TASK_COUNT=str(job.array_task_count or ""),
                SLURM_ARRAY_TASK_MIN=str(job.array_task_min or 0),
                SLURM_ARRAY_TASK_MAX=str(job.array_task_max or 0),
                SLURM_ARRAY_TASK_STEP=str(job.array_task_step or 1),
            )
        return env

    @staticmethod
    def _run_env(job: Job, now: float) -> dict[str, str]:
        return {"SLURM_JOB_RUN_TIME": format_hms(now - (job.start_time or now))}

    @staticmethod
    def _end_env(job: Job) -> dict[str, str]:
        env = {"SLURM_JOB_RUN_TIME": format_hms(_run_time(job)), "SLURM_JOB_EXIT_CODE_MAX": str(job.exit_code)}
        if job.exit_signal:
            env["SLURM_JOB_TERM_SIGNAL_MAX"] = str(job.exit_signal)
        return env


def _began_before(t: Job, job: Job) -> bool:
    """Task ``t`` of ``job``'s array began before it: an earlier start (the lower job id
    first among tasks started in one pass), or a run already requeued."""
    if t is job:
        return False
    if t.restart_count > 0:
        return True
    return t.start_time is not None and (t.start_time, t.job_id) < (job.start_time or 0.0, job.job_id)


def _remember(keys: set[tuple[int, int]], key: tuple[int, int]) -> set[tuple[int, int]]:
    """``keys`` with ``key``, bounded: the older half is forgotten past 10,000 arrays."""
    if len(keys) >= 10_000:
        keys = set(sorted(keys)[5_000:])
    keys.add(key)
    return keys


def _one_line(text: str) -> str:
    """A subject with no line breaks or control characters (a job name may carry them, and
    a mail program would read what follows a line break as headers)."""
    return "".join(c if c.isprintable() else " " for c in text)


def _end_type(ended: bool, types: list[str]) -> str | None:
    """Slurm's choice: END for a job that completed or was cancelled; FAIL for any other
    end, or END when only END was asked."""
    if ended:
        return mt.END if mt.END in types else None
    if mt.FAIL in types:
        return mt.FAIL
    return mt.END if mt.END in types else None


def _run_time(job: Job) -> float:
    if job.start_time is None or job.end_time is None:
        return 0.0
    return max(0.0, job.end_time - job.start_time)


def _last_run(job: Job) -> float:
    """How long the attempt that just ended ran (``core.goodput``'s summary of it)."""
    last = job.attempts[-1] if job.attempts else None
    if not last or last.get("start") is None or last.get("end") is None:
        return 0.0
    return max(0.0, float(last["end"]) - float(last["start"]))
