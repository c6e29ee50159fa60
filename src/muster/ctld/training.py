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
* **Hangs** (``check_hangs``): a running job that reported a step and then nothing (no
  step, no section begin or end) for its hang timeout, outside a declared slow section
  (``progress.section``), is *judged hung*: the judgement is committed with the job, and
  each of its nodes is asked for evidence (``SignalJob(evidence=True)``: the agent reads
  every process of the job from /proc, py-spy where installed, and sends SIGUSR1 only to
  the processes that catch it, see ``agent.hangevidence``). The evidence comes back with
  the nodes' heartbeats and is stored as ``hang_evidence`` events of the job. Once every
  node's evidence is in, or ``hang_grace`` (a quarter of the timeout, 5 to 60 s) after the
  judgement, the job is requeued with reason Hung (ended FAILED with reason Hung under
  ``--no-requeue``). A judged attempt ends Hung whatever it does meanwhile: a batch
  script that exits during the grace is requeued as Hung by ``judged_end``, never
  COMPLETED. The timeout: ``--hang-timeout``, else its partition's ``HangTimeout=``
  (``0`` there: not watched), else, once the job reported two steps (a step time is
  known), ``auto_timeout``: the requeue comes at most ``max(3 x median step time, 60 s)``
  after the last report. The nodes that hosted the
  stalled ranks (those behind the others; at the same step, those whose ranks' stacks are
  outside the collective the others wait in, ``core.attribution.off_collective``; else all
  that reported) are excluded from the job's next attempt, or replaced in the running job
  (``--spare-nodes``), whose silence then counts from the repair, against twice the
  timeout until its restarted ranks report a step (their start, rendezvous, checkpoint load).
* **Stragglers** (``ctld.stragglers``): each node's pace (its slowest rank's median step
  time) is kept from the reports' ``ranks``, and the nodes of each reporting job are
  judged against each other at every check.
* **Failed nodes** (``incident``): a node that lost a job (node failure) or hosted its hung
  ranks gets a record in the failure ledger (``ClusterState.node_fault``, ``ctld.ledger``,
  stored); a node that keeps failing is quarantined there (``quarantined: ...``). Hangs of
  one user's jobs alone never quarantine a node: a job that hangs wherever it runs is the
  job's fault, not the nodes' (``core.attribution``).
"""

from __future__ import annotations

import logging
import signal
import statistics
from collections.abc import Callable
from typing import Any

from muster.core import lifecycle
from muster.core.attribution import in_collective, off_collective
from muster.core.errors import StorageError
from muster.core.events import EventKind
from muster.core.job import Job
from muster.core.lifecycle import JobEvent
from muster.core.states import JobState, Reason
from muster.core.timefmt import TimeFormatError, parse_time_limit
from muster.ctld import stragglers
from muster.ctld.actions import Action, SignalJob, Terminate
from muster.ctld.replacement import GPU_FAULT, HANG, Replacements
from muster.ctld.state import ClusterState
from muster.sched.snapshot import spares

__all__ = ["Training", "auto_timeout", "hang_grace"]

log = logging.getLogger("musterctld")

SAVE_EVERY = 60.0  # seconds between commits of a job's progress (checkpoints: at once)
HANG_SIGNAL = signal.SIGUSR1  # sent only to the job's processes that catch it
AUTO_FLOOR = 60.0  # seconds: the automatic bound never goes below this
STEP_SAMPLES = 15  # recent seconds-per-step values kept for the median


def hang_grace(timeout: float) -> float:
    """Seconds between the judgement (evidence asked for) and the requeue, at most."""
    return min(60.0, max(5.0, timeout / 4))


def auto_timeout(step_secs: list[float]) -> float | None:
    """A job without a hang timeout of its own: judged hung at ``B - hang_grace(B)`` of
    silence, ``B = max(3 x median step time, 60 s)``, so that it is requeued within ``B``.
    None (not watched) until a step time is known: a job that reported one step only."""
    if not step_secs:
        return None
    bound = max(3 * statistics.median(step_secs), AUTO_FLOOR)
    return bound - hang_grace(bound)


class Training:
    def __init__(self, ctl: ClusterState, replacements: Replacements | None = None) -> None:
        self.ctl = ctl
        # a failed node of a running job that asked for it is replaced in its allocation
        # (``ctld.replacement``); ``liveness`` and ``agents`` reach it through here
        self.replacements = replacements if replacements is not None else Replacements(ctl)
        self._saved: dict[int, float] = {}  # job id -> when its progress was last committed
        # ids of the jobs that reported progress (only those can hang): ``check_hangs``
        # looks at them, not at every job; None until built from memory at the first check
        self._reporting: set[int] | None = None
        # no judgement within a couple of heartbeats of the start or of a stall (``_listening``)
        self._listen_from = ctl.clock.now()
        self._stalls = ctl.stalls
        # a job reported a new checkpoint (``Preemptions.checkpointed``: the handshake)
        self.on_checkpoint: Callable[[Job, float], object] | None = None

    # --- GPU faults --------------------------------------------------------------------

    def gpu_fault(self, node: str, reason: str) -> list[Action]:
        """A GPU of ``node`` failed: drain the node, requeue its jobs elsewhere."""

        now = self.ctl.clock.now()
        self.ctl.node_fault(node, "gpu", now, evidence=reason, drain=reason[:1024])
        actions: list[Action] = []
        for job in self._jobs_on(node):
            attempt, nodes = job.restart_count, job.nodes
            repaired = self.replacements.job_lost_node(job, node, GPU_FAULT, f"{reason} on {node}", now)
            if repaired is not None:
                actions += repaired
                continue
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
        nodes for it (then it may wait for those nodes to be repaired instead; spare nodes,
        never placed on, do not count)."""
        exclude = list(job.spec.exclude)
        for name in bad:
            if name not in exclude:
                exclude.append(name)
        parts = job.spec.partitions or [job.partition]
        pool = {  # the nodes a job is placed on: a partition's SpareNodes= are not (``sched.snapshot``)
            n
            for p in parts
            if (conf := self.ctl.config.partition(p)) is not None
            for n in conf.nodes
            if n not in spares(conf)
        }
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
            if job is not None and isinstance(r.get("evidence"), list):
                self._evidence(job, node, attempt, r["evidence"], now)
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
                before = (job.progress or {}).get("ckpt_step")
                important = self._merge(job, node, r)
                if self._reporting is not None:
                    self._reporting.add(job.job_id)
                if self.on_checkpoint is not None and (job.progress or {}).get("ckpt_step") != before:
                    self.on_checkpoint(job, now)  # commits the job itself when it matters
            last = self._saved.get(job.job_id)
            if important or last is None or now - last >= SAVE_EVERY:
                try:
                    self.ctl.record(
                        now,
                        [(job, EventKind.PROGRESS, {"node": node, "step": job.progress and job.progress.get("step")})],
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
            last, last_time = p.get("step"), p.get("step_time")
            if last is not None and last_time is not None and step > last and step_time > last_time:
                secs = [*(p.get("step_secs") or []), (step_time - last_time) / (step - last)]
                p["step_secs"] = [round(x, 3) for x in secs[-STEP_SAMPLES:]]
            if p.get("step") is None or step >= p["step"]:
                p["step"] = int(step)
            p["step_time"] = max(step_time, p.get("step_time") or 0.0)
            nodes[node] = [int(step), step_time]
        pace = stragglers.node_pace(r.get("ranks"))  # its slowest rank's median step time
        if pace is not None:
            p["pace"] = {**(p.get("pace") or {}), node: pace}
        section, section_time = r.get("section"), num("section_time")
        sections = dict(p.get("sections") or {})
        if isinstance(section, str) and section:
            sections[node] = [section[:64], section_time]
        else:
            sections.pop(node, None)
        if sections:
            p["sections"] = sections
        else:
            p.pop("sections", None)
        active = max(
            (t for t in (p.get("step_time"), section_time, p.get("active_time")) if t is not None), default=None
        )
        if active is not None:
            p["active_time"] = active
        if ckpt is not None and ckpt_time is not None and (p.get("ckpt_step") is None or ckpt > p["ckpt_step"]):
            p["ckpt_step"], p["ckpt_time"] = int(ckpt), ckpt_time
            important = True
        p["nodes"] = nodes
        job.progress = p
        return important

    # --- hangs -------------------------------------------------------------------------

    def hang_timeout(self, job: Job) -> float | None:
        """Seconds of silence after which the job is judged hung; None: not watched."""
        if job.spec.hang_timeout:
            return float(job.spec.hang_timeout)
        conf = self.ctl.config.partition(job.partition)
        raw = conf.params.get("HangTimeout") if conf is not None else None
        if raw:
            try:
                seconds = parse_time_limit(raw)
            except TimeFormatError:
                return None
            if not seconds:
                return None  # HangTimeout=0: this partition's jobs are not watched
            return float(seconds)
        return auto_timeout(list((job.progress or {}).get("step_secs") or []))

    def _listening(self, now: float) -> bool:
        """Whether silence is evidence now: not within a couple of heartbeats of this
        controller's start or of a stall of its own (reports sent meanwhile are still on
        their way, and a judgement is final)."""
        if self.ctl.stalls != self._stalls:
            self._stalls, self._listen_from = self.ctl.stalls, now
        return now - self._listen_from >= max(5.0, 2 * self.ctl.heartbeat_interval)

    def check_hangs(self) -> list[Action]:
        """Judge, then requeue, the jobs whose progress stopped (see the module docstring)."""

        now = self.ctl.clock.now()
        actions: list[Action] = []
        if self._reporting is None:  # first check: the jobs loaded from the store
            self._reporting = {j.job_id for j in self.ctl.jobs.values() if j.progress}
        listening = self._listening(now)
        for job_id in sorted(self._reporting):
            job = self.ctl.jobs.get(job_id)
            p = job.progress if job is not None else None
            if job is None or not p or job.state is not JobState.RUNNING:
                # ended or requeued: a next attempt starts without progress, and joins
                # again with its first report
                self._reporting.discard(job_id)
                continue
            actions += stragglers.check(self.ctl, job, now, self.avoid, self.replacements)  # nodes vs each other
            p = job.progress or {}
            if p.get("step_time") is None:
                continue
            if any(
                not self.ctl.nodes[n].responding or self.ctl.nodes[n].silent for n in job.nodes if n in self.ctl.nodes
            ):
                continue  # a silent node is the node check's business, not a hang
            judged = p.get("hang_judged")
            if judged is not None:
                arrived = set(p.get("evidence") or {})
                if now - float(judged) >= float(p.get("hang_grace") or 5.0) or set(job.nodes) <= arrived:
                    try:
                        repaired = self._replace_hung(job, now)  # --spare-nodes: no requeue
                        actions += repaired if repaired is not None else self._hung(job, now)
                    except StorageError:
                        continue
                continue
            timeout = self.hang_timeout(job)
            if timeout is None:
                continue
            if p.get("sections"):
                continue  # a declared slow section (checkpoint, evaluation): not a hang
            if job.suspended_at is not None:
                continue  # scontrol suspend: a frozen job makes no progress (ctld.suspend)
            if float(p.get("step_time") or 0.0) <= float(p.get("repaired_time") or 0.0):
                timeout *= 2  # hung ranks replaced: the restarted ones start, meet, load first
            # silence since its last progress, or since it was resumed
            quiet = now - max(float(p.get("active_time") or p["step_time"]), job.suspend_time or 0.0)
            if quiet < timeout or not listening:
                continue
            try:
                actions += self._judge(job, now, quiet, timeout)
            except StorageError:
                continue
        return actions

    def _judge(self, job: Job, now: float, quiet: float, timeout: float) -> list[Action]:
        """The attempt is hung: say so in the store, then ask its nodes for evidence."""
        with self.ctl.atomic(job):
            p = dict(job.progress or {})
            p["hang_judged"], p["hang_quiet"], p["hang_grace"] = now, round(quiet, 1), hang_grace(timeout)
            job.progress = p
            self.ctl.record(
                now, [(job, EventKind.HANG_JUDGED, {"quiet": quiet, "timeout": timeout, "step": p.get("step")})]
            )
        self._saved[job.job_id] = now
        log.warning(
            "job %s: judged hung: no progress for %.0f s (hang timeout %.0f s; last step %s); "
            "collecting evidence on %s, requeue within %.0f s",
            job.job_id,
            quiet,
            timeout,
            p.get("step"),
            ",".join(job.nodes),
            hang_grace(timeout),
        )
        return [SignalJob(job.job_id, list(job.nodes), int(HANG_SIGNAL), batch_only=False, evidence=True)]

    def judged_end(self, job: Job, by: str | None) -> list[Action] | None:
        """The running attempt of ``job`` ended by itself (``by`` None) or at its time limit
        after the controller judged it hung: it ends Hung (requeued), never COMPLETED.
        None: not judged, the end is the ordinary one."""
        if job.state is not JobState.RUNNING or not (job.progress or {}).get("hang_judged"):
            return None
        if by not in (None, "timeout"):
            return None
        attempt = job.restart_count
        actions = self._hung(job, self.ctl.clock.now())
        self.ctl.release_resources(job, attempt)
        return actions

    def _evidence(self, job: Job, node: str, attempt: int, evidence: list[Any], now: float) -> None:
        """One node's evidence of a hung attempt: a ``hang_evidence`` event of the job, and
        its count in the attempt's progress (or its summary, when it was requeued already)."""
        procs = [e for e in evidence if isinstance(e, dict)][:256]
        where: dict[str, Any] | None = None
        if job.restart_count == attempt and job.state is JobState.RUNNING:
            where = job.progress
        else:
            where = next((a for a in reversed(job.attempts) if a.get("attempt") == attempt), None)
            if where is None and job.restart_count == attempt:
                where = job.progress
        with self.ctl.atomic(job):
            if where is not None:
                counts = dict(where.get("evidence") or {})
                counts[node] = len(procs)
                where["evidence"] = counts
                # the ranks (processes that report progress: their stacks) inside a collective
                stacks = [str(e["python"]) for e in procs if isinstance(e.get("python"), str)]
                if stacks:
                    inside = sum(1 for text in stacks if in_collective(text))
                    where["collective"] = {**(where.get("collective") or {}), node: [inside, len(stacks) - inside]}
            self.ctl.record(
                now, [(job, EventKind.HANG_EVIDENCE, {"node": node, "attempt": attempt, "processes": procs})]
            )
        log.info("job %s: hang evidence of attempt %s from %s: %d process(es)", job.job_id, attempt, node, len(procs))

    def _replace_hung(self, job: Job, now: float) -> list[Action] | None:
        """A hung job with ``--spare-nodes`` whose evidence singles out nodes (behind the
        others, or outside the collective; not its batch host): those nodes are replaced in the running job instead of
        a requeue (``ctld.replacement``, cause ``hang``), its steps there stopped, and the
        judgement withdrawn (its next srun reports anew). None: requeued as before."""
        bad = self.suspects(job)
        left = job.spec.spare_nodes - len(job.replacements)
        if not bad or left < len(bad) or job.batch_host in bad or not self._stalled_behind(job):
            return None
        actions: list[Action] = []
        why = f"hung ranks: no progress after step {(job.progress or {}).get('step')}"
        for node in bad:
            done = self.replacements.job_lost_node(job, node, HANG, f"{why} on {node}", now)
            if done is None:
                return None  # what was replaced stays; the hang requeues the job as before
            actions += done
        with self.ctl.atomic(job):
            p = {k: v for k, v in (job.progress or {}).items() if k not in ("hang_judged", "hang_quiet", "hang_grace")}
            p["active_time"] = now  # silence is counted from the repair
            p["repaired_time"] = now  # twice the timeout until the restarted ranks report
            p.pop("evidence", None)
            p.pop("collective", None)
            job.progress = p
            self.ctl.record(now, [(job, EventKind.PROGRESS, {"hang": "replaced", "nodes": bad})])
        for node in bad:
            actions += self.incident(node, job.job_id, "hang", now, why, behind=True)
        return actions

    def suspects(self, job: Job) -> list[str]:
        """The nodes that hosted the stalled ranks: those behind the others, else those whose
        ranks never entered the collective the others wait in, else all that reported (else
        the batch host)."""
        per_node = (job.progress or {}).get("nodes") or {}
        here = {n: v for n, v in per_node.items() if n in job.nodes}
        if not here:
            return [job.batch_host] if job.batch_host else []
        top = max(v[0] for v in here.values())
        behind = sorted(n for n, v in here.items() if v[0] < top)
        return behind or self._off_collective(job) or sorted(here)

    @staticmethod
    def _off_collective(job: Job) -> list[str]:
        """The nodes whose ranks never entered the collective the others wait in (their
        stacks in the evidence: ``core.attribution.off_collective``)."""
        ranks = (job.progress or {}).get("collective") or {}
        return off_collective({n: v for n, v in ranks.items() if n in job.nodes and isinstance(v, list)})

    def _hung(self, job: Job, now: float) -> list[Action]:
        p = job.progress or {}
        attempt, nodes = job.restart_count, job.nodes
        bad = self.suspects(job)
        quiet = float(p.get("hang_quiet") or 0.0)
        counts = p.get("evidence") or {}
        found = ", ".join(f"{n}: {c}" for n, c in sorted(counts.items())) or "none yet"
        why = (
            f"Hung: no progress for {quiet:.0f} s after step {p.get('step')} "
            f"(suspect nodes: {','.join(bad)}; evidence of processes: {found})"
        )
        with self.ctl.atomic(job):
            job.system_comment = why
            if self._may_requeue(job):
                self.avoid(job, bad)
                lifecycle.requeue(job, now, outcome="Hung", reason=Reason.HUNG)
                kind = EventKind.HUNG
            else:
                lifecycle.end(job, JobEvent.FAIL, now, completing=True, reason=Reason.HUNG)
                job.exit_code = 1
                kind = EventKind.FAILED
            closed = next((a for a in reversed(job.attempts) if a.get("attempt") == attempt), None)
            if closed is not None:  # what ``scontrol show job`` says of it (HangEvidence=)
                closed["evidence"] = dict(counts)
                closed["hang_judged"] = p.get("hang_judged")
            self.ctl.record(now, [(job, kind, {"why": why, "nodes": nodes, "attempt": job.restart_count})])
        self.ctl.launch_answered(job.job_id)
        log.warning("job %s: %s; %s", job.job_id, why, "requeued" if kind == "hung" else "ended")
        actions: list[Action] = [Terminate(job.job_id, attempt, nodes, "requeue" if kind == "hung" else "hung")]
        behind = self._stalled_behind(job)  # the evidence singles these nodes out
        for node in bad:
            actions += self.incident(node, job.job_id, "hang", now, why, behind=behind)
        return actions

    # --- failed nodes ------------------------------------------------------------------

    @classmethod
    def _stalled_behind(cls, job: Job) -> bool:
        """Whether the evidence singles out some of the job's nodes (``suspects``' first two
        cases): their ranks stopped behind the others', or never entered their collective."""
        per_node = (job.progress or {}).get("nodes") or {}
        return len({v[0] for n, v in per_node.items() if n in job.nodes}) > 1 or bool(cls._off_collective(job))

    def incident(
        self, node: str, job_id: int, kind: str, now: float, evidence: str = "", *, behind: bool = False
    ) -> list[Action]:
        """``node`` hosted a hung (``kind`` "hang") or failed run of ``job_id``: a record of
        the failure ledger, which quarantines a node that keeps failing (``node_fault``)."""
        job = self.ctl.jobs.get(job_id)
        try:
            self.ctl.node_fault(
                node,
                "hang" if kind == "hang" else "node_fail",
                now,
                job=job,
                job_id=job_id,
                evidence=evidence or kind,
                behind=behind,
            )
        except StorageError:
            pass
        return []
