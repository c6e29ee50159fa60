"""What the controller does for training runs beyond Slurm: GPU faults, progress, hangs,
suspect nodes. ``Training`` is called by ``Controller`` (heartbeats, node failures) and by
the application's node check (``check_hangs``); it returns ``Action`` objects like every
controller method and never performs I/O towards agents itself.

* **GPU faults** (``gpu_fault``): a node whose agent found a failing GPU is drained with the
  agent's reason (``GPU 3: XID 79 (fallen off the bus)``) and every job running on it ends
  NODE_FAIL and is requeued (same id, restart count + 1, unless ``--no-requeue``) with the
  node added to its exclude list, so it runs elsewhere.
* **Progress** (``progress``): heartbeats carry each job attempt's latest step and checkpoint
  on that node; merged per job into ``Job.progress`` (per node too, to find laggards) and
  committed with the job at its first step, at each new checkpoint and at most every
  ``SAVE_EVERY`` seconds otherwise, so a restart of the controller keeps them.
* **Hangs** (``check_hangs``): a running job with a hang timeout (``--hang-timeout``, else
  its partition's ``HangTimeout=``) that reported a step and then nothing for that long is
  sent SIGUSR1 on all its nodes (time to dump its stacks: ``faulthandler``, py-spy), and, if
  it still reports nothing within ``hang_grace`` (a quarter of the timeout, 5 to 60 s), it is
  requeued with reason Hung (ended FAILED with reason Hung under ``--no-requeue``). The
  nodes that hosted the stalled ranks (those behind the others, or all that reported when
  none is behind) are noted as suspects and excluded from the job's next attempt.
* **Suspect nodes** (``incident``): a node that hosts a hung or failed run ``SUSPECT_COUNT``
  times within ``SUSPECT_WINDOW`` seconds is drained, the reason naming the jobs
  (``suspect: hung or failed ranks of jobs 12,15``). Incidents are kept in memory only.
"""

from __future__ import annotations

import logging
import signal
from typing import Any

from muster.core import lifecycle
from muster.core.errors import StorageError
from muster.core.job import Job
from muster.core.lifecycle import JobEvent
from muster.core.states import JobState, Reason
from muster.core.timefmt import TimeFormatError, parse_time_limit
from muster.ctld.actions import Action, SignalJob, Terminate
from muster.ctld.state import ClusterState

__all__ = ["Training", "hang_grace"]

log = logging.getLogger("musterctld")

SAVE_EVERY = 60.0  # seconds between commits of a job's progress (checkpoints: at once)
SUSPECT_COUNT = 2
SUSPECT_WINDOW = 24 * 3600.0
HANG_SIGNAL = signal.SIGUSR1


def hang_grace(timeout: float) -> float:
    """Seconds between the hang signal and the requeue."""
    return min(60.0, max(5.0, timeout / 4))


class Training:
    def __init__(self, ctl: ClusterState) -> None:
        self.ctl = ctl
        self.incidents: dict[str, list[tuple[float, int, str]]] = {}
        self._saved: dict[int, float] = {}  # job id -> when its progress was last committed
        # ids of the jobs that reported progress (only those can hang): ``check_hangs``
        # looks at them, not at every job; None until built from memory at the first check
        self._reporting: set[int] | None = None

    # --- GPU faults --------------------------------------------------------------------

    def gpu_fault(self, node: str, reason: str) -> list[Action]:
        """A GPU of ``node`` failed: drain the node, requeue its jobs elsewhere."""

        now = self.ctl.clock.now()
        self.ctl.drain(node, reason[:1024], now)
        actions: list[Action] = []
        for job in self._jobs_on(node):
            attempt, nodes = job.restart_count, job.nodes
            try:
                self._fail_over(job, [node], f"{reason} on {node}", now)
            except StorageError:
                continue
            actions.append(Terminate(job.job_id, attempt, nodes, "node_fail"))
            log.warning("job %s: requeued off %s (%s)", job.job_id, node, reason)
        return actions

    def _jobs_on(self, node: str) -> list[Job]:
        return [
            j
            for i in self.ctl.job_ids_on(node)
            if (j := self.ctl.jobs.get(i)) is not None and j.state is JobState.RUNNING and node in j.nodes
        ]

    def _fail_over(self, job: Job, bad: list[str], why: str, now: float) -> None:
        """End the running attempt NODE_FAIL and requeue it (when allowed) avoiding ``bad``."""
        with self.ctl.atomic(job):
            job.system_comment = why[:1024]
            if self._may_requeue(job):
                self.avoid(job, bad)
            self.ctl.node_failed_job(job, now, why)

    def _may_requeue(self, job: Job) -> bool:
        return job.spec.requeue if job.spec.requeue is not None else bool(self.ctl.config.job_requeue)

    def avoid(self, job: Job, bad: list[str]) -> None:
        """Add ``bad`` to the job's exclude list, unless that leaves its partitions too few
        nodes for it (then it may wait for those nodes to be repaired instead)."""
        exclude = list(job.spec.exclude)
        for name in bad:
            if name not in exclude:
                exclude.append(name)
        parts = job.spec.partitions or [job.partition]
        pool = {n for p in parts if (conf := self.ctl.config.partition(p)) is not None for n in conf.nodes}
        if len(pool - set(exclude)) >= max(1, job.shape.nodes):
            job.spec.exclude = exclude

    # --- progress ----------------------------------------------------------------------

    def progress(self, node: str, reports: list[Any]) -> None:
        """Merge a heartbeat's progress reports into the jobs they are about."""
        now = self.ctl.clock.now()
        for r in reports:
            if not isinstance(r, dict):
                continue
            try:
                job = self.ctl.jobs.get(int(r["job_id"]))
                attempt = int(r.get("attempt") or 0)
            except (KeyError, TypeError, ValueError):
                continue
            if job is None or job.restart_count != attempt or node not in job.nodes:
                continue  # an earlier attempt's late report
            if job.state is not JobState.RUNNING:
                # the last words of an attempt that ended before its heartbeat came
                closed = job.attempts[-1] if job.attempts else None
                if closed is None or closed.get("attempt") != attempt:
                    continue
                self._merge(job, node, r)
                closed.update(
                    {k: (job.progress or {}).get(k) for k in ("first", "step", "step_time", "ckpt_step", "ckpt_time")}
                )
                important = True
            else:
                important = self._merge(job, node, r)
                if self._reporting is not None:
                    self._reporting.add(job.job_id)
            last = self._saved.get(job.job_id)
            if important or last is None or now - last >= SAVE_EVERY:
                try:
                    self.ctl.record(
                        now, [(job, "progress", {"node": node, "step": job.progress and job.progress.get("step")})]
                    )
                except StorageError:
                    continue  # memory is back to the store's: the next report tries again
                self._saved[job.job_id] = now

    @staticmethod
    def _merge(job: Job, node: str, r: dict[str, Any]) -> bool:
        """Returns whether the change must be committed now (first step, new checkpoint)."""
        p = dict(job.progress or {})
        nodes = dict(p.get("nodes") or {})
        important = False

        def num(key: str) -> float | None:
            v = r.get(key)
            return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

        first, step, step_time = num("first"), num("step"), num("step_time")
        ckpt, ckpt_time = num("ckpt_step"), num("ckpt_time")
        if first is not None and (p.get("first") is None or first < p["first"]):
            important = p.get("first") is None
            p["first"] = first
        if step is not None and step_time is not None:
            if p.get("step") is None or step >= p["step"]:
                p["step"] = int(step)
            p["step_time"] = max(step_time, p.get("step_time") or 0.0)
            nodes[node] = [int(step), step_time]
        if ckpt is not None and ckpt_time is not None and (p.get("ckpt_step") is None or ckpt > p["ckpt_step"]):
            p["ckpt_step"], p["ckpt_time"] = int(ckpt), ckpt_time
            important = True
        p["nodes"] = nodes
        job.progress = p
        return important

    # --- hangs -------------------------------------------------------------------------

    def hang_timeout(self, job: Job) -> float | None:
        if job.spec.hang_timeout:
            return float(job.spec.hang_timeout)
        conf = self.ctl.config.partition(job.partition)
        raw = conf.params.get("HangTimeout") if conf is not None else None
        if not raw:
            return None
        try:
            seconds = parse_time_limit(raw)
        except TimeFormatError:
            return None
        return float(seconds) if seconds else None

    def check_hangs(self) -> list[Action]:
        """Signal, then requeue, the jobs whose progress stopped (see the module docstring)."""

        now = self.ctl.clock.now()
        actions: list[Action] = []
        if self._reporting is None:  # first check: the jobs loaded from the store
            self._reporting = {j.job_id for j in self.ctl.jobs.values() if j.progress}
        for job_id in sorted(self._reporting):
            job = self.ctl.jobs.get(job_id)
            p = job.progress if job is not None else None
            if job is None or not p or job.state is not JobState.RUNNING:
                # ended or requeued: a next attempt starts without progress, and joins
                # again with its first report
                self._reporting.discard(job_id)
                continue
            if p.get("step_time") is None:
                continue
            timeout = self.hang_timeout(job)
            if timeout is None:
                continue
            if any(
                not self.ctl.nodes[n].responding or self.ctl.nodes[n].silent for n in job.nodes if n in self.ctl.nodes
            ):
                continue  # a silent node is the node check's business, not a hang
            quiet = now - float(p["step_time"])
            signalled = p.get("hang_signalled")
            if signalled is not None and float(p["step_time"]) > float(signalled) - timeout:
                # it reported again since it was signalled: not hung after all
                p.pop("hang_signalled", None)
                signalled = None
            if quiet < timeout:
                continue
            if signalled is None:
                p["hang_signalled"] = now
                log.warning(
                    "job %s: no progress for %.0f s (hang timeout %.0f s; last step %s); "
                    "sending SIGUSR1, requeue in %.0f s",
                    job.job_id,
                    quiet,
                    timeout,
                    p.get("step"),
                    hang_grace(timeout),
                )
                actions.append(SignalJob(job.job_id, job.nodes, int(HANG_SIGNAL), batch_only=False))
            elif now - float(signalled) >= hang_grace(timeout):
                try:
                    actions += self._hung(job, now, quiet)
                except StorageError:
                    continue
        return actions

    def suspects(self, job: Job) -> list[str]:
        """The nodes that hosted the stalled ranks: those behind the others, else all that
        reported (else the batch host)."""
        per_node = (job.progress or {}).get("nodes") or {}
        here = {n: v for n, v in per_node.items() if n in job.nodes}
        if not here:
            return [job.batch_host] if job.batch_host else []
        top = max(v[0] for v in here.values())
        behind = sorted(n for n, v in here.items() if v[0] < top)
        return behind or sorted(here)

    def _hung(self, job: Job, now: float, quiet: float) -> list[Action]:

        attempt, nodes = job.restart_count, job.nodes
        bad = self.suspects(job)
        why = (
            f"Hung: no progress for {quiet:.0f} s after step {(job.progress or {}).get('step')} "
            f"(suspect nodes: {','.join(bad)})"
        )
        with self.ctl.atomic(job):
            job.system_comment = why
            if self._may_requeue(job):
                self.avoid(job, bad)
                lifecycle.requeue(job, now, outcome="Hung")
                kind = "hung"
            else:
                lifecycle.end(job, JobEvent.FAIL, now, completing=True)
                job.exit_code = 1
                kind = "failed"
            job.reason = Reason.HUNG
            self.ctl.record(now, [(job, kind, {"why": why, "nodes": nodes, "attempt": job.restart_count})])
        self.ctl.launching.pop(job.job_id, None)
        log.warning("job %s: %s; %s", job.job_id, why, "requeued" if kind == "hung" else "ended")
        actions: list[Action] = [Terminate(job.job_id, attempt, nodes, "requeue" if kind == "hung" else "hung")]
        for node in bad:
            actions += self.incident(node, job.job_id, "hang", now)
        return actions

    # --- suspect nodes -----------------------------------------------------------------

    def incident(self, node: str, job_id: int, kind: str, now: float) -> list[Action]:
        """``node`` hosted a hung or failed run of ``job_id``; drain it on the repeat."""
        recent = [i for i in self.incidents.get(node, []) if now - i[0] <= SUSPECT_WINDOW]
        recent.append((now, job_id, kind))
        self.incidents[node] = recent[-16:]
        if len(recent) >= SUSPECT_COUNT:
            jobs = ",".join(str(j) for j in sorted({i[1] for i in recent}))
            try:
                if self.ctl.drain(node, f"suspect: hung or failed ranks of jobs {jobs}", now):
                    self.incidents.pop(node, None)
            except StorageError:
                pass
        return []
