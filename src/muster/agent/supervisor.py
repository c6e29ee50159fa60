"""The agent's running batch scripts: start, watch, limit, signal, stop, report.

One ``Tracked`` record per running job (keyed by job id; one attempt runs at a time). Its
life, and what is on disk at each point (see ``state``):

    launch ──► record saved (pid unknown) ──► fork/exec ──► record saved (pid, start ticks)
       │ fails: failure report saved (exit 1), record dropped, launch answers an error
       ▼
    running ── time limit / terminate ──► SIGTERM+SIGCONT to the job's processes,
       │                                   SIGKILL every tick from kill_wait on
       ▼ the script exits (its monitor says so with the status; adopted: a pidfd, or polling)
    leftover processes of the job are SIGKILLed (as Slurm does when the batch step ends;
    ``/proc`` is walked only when the job may have left some: see ``_may_have_leftovers``),
    the report is saved, then the record dropped and the spool removed; the controller link
    is woken to deliver the report.

Signals reach "the job's processes" as ``proctree.job_members`` defines them: the batch
shell's process group at once (``killpg``, so that no member outlives another's death by
accident), then each member that left the group, so that nobody gets a signal twice.

A restarted agent (``recover``) finds the records of the previous one:

* a report already exists for that attempt: the record is stale and is dropped;
* the script still runs (same pid *and* same start time): it is adopted and watched,
  limited and signalled as before. When it ends, its exit status comes from the file its
  monitor wrote (``launcher``: the monitor outlives the agent, as slurmstepd does);
* the script is gone: reported at once, with the status its monitor recorded.

Without a recorded status (a script started by an older agent, or a monitor killed too),
the report says ``terminated_by: "node_fail"`` (or the reason it was being terminated for)
with ``reason: "exit status lost: musterd restarted while the job ran"``: the controller
treats the run as lost and requeues it when the job allows, rather than calling a run whose
outcome nobody saw COMPLETED.

The terminate reasons the agent understands are those of the API (``cancel``, ``timeout``,
``requeue``, ``node_fail``) plus ``cleanup`` (a node that is not the batch host) and
``preempt``; the first reason given wins and is reported as ``terminated_by``.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
from collections.abc import Callable, Mapping
from typing import Any

from muster.agent import cgroups, containers, launcher, limits, proctree, suspend
from muster.agent.affinity import CpuLedger
from muster.agent.cgroupfs import NodeCgroups
from muster.agent.containers import Containers
from muster.agent.env import EnvContext, batch_environment
from muster.agent.hooks import HookResult, Hooks
from muster.agent.jobcontainer import JobContainer
from muster.agent.jobrecord import LOST_STATUS, Tracked, cpus_on, end_report, report_body
from muster.agent.launcher import JOB_FAULT, PROLOG_FAULT, STALE, LaunchError
from muster.agent.ocibundle import ContainerError, Mount
from muster.agent.preflight import PREFLIGHT_FAULT, Preflight
from muster.agent.progress import progress_env
from muster.agent.runstate import RunState
from muster.agent.state import StateDir
from muster.agent.zygote import Zygote
from muster.core.clock import Clock
from muster.core.timefmt import format_timestamp

__all__ = ["LaunchError", "Supervisor", "Tracked"]

log = logging.getLogger(__name__)

TICK = 0.5  # seconds between limit checks at most
TOMBSTONE_SECONDS = 600.0

ProcReader = Callable[[], Mapping[int, proctree.ProcInfo]]
TagReader = Callable[[int], str | None]
Killer = Callable[[int, int], None]


def _with_peak(usage: dict[str, float] | None, peak: int | None) -> dict[str, float] | None:
    """The script's usage with its cgroup's peak memory as its max RSS."""
    if peak is None:
        return usage
    out = dict(usage or {"max_rss_kb": 0, "user_cpu": 0.0, "system_cpu": 0.0})
    out["max_rss_kb"] = max(float(out.get("max_rss_kb") or 0), peak / 1024)
    return out


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Supervisor:
    # the pre-flight gate's settings (``agent.preflight``); set by the daemon once its GPUs are known
    preflight: Preflight | None = None

    def __init__(
        self,
        node: str,
        state: StateDir,
        clock: Clock,
        env_ctx: EnvContext,
        kill_wait: float,
        over_time: float = 0.0,
        notify: Callable[[], None] = lambda: None,
        proc_reader: ProcReader = proctree.read_proc,
        tag_reader: TagReader = proctree.read_tag,
        kill: Killer = _kill,
        killpg: Killer = _killpg,
        instance: str | None = None,
        signal_steps: Callable[[int, int], bool] = lambda job_id, sig: False,
        cpus: CpuLedger | None = None,
        hooks: Hooks | None = None,
    ) -> None:
        self.node = node
        # The node's job cgroups (``agent.cgroupfs``); None: jobs are not put in cgroups.
        self.cgroups: NodeCgroups | None = None
        # Why this node must run no job (cgroup confinement configured but impossible)
        self.refuse: str | None = None
        # The jobs' private /tmp (JobContainerType=job_container/tmpfs); None: the machine's
        self.container: JobContainer | None = None
        # oci.conf's containers (``agent.containers``): a job's copies and bundles go at its end
        self.oci: Containers | None = None
        # The site's Prolog and Epilog (``agent.hooks``); None: none configured
        self.hooks = hooks
        self._background: set[asyncio.Task[None]] = set()
        self.state = state
        self.clock = clock
        self.env_ctx = env_ctx
        self.kill_wait = kill_wait
        self.over_time = over_time
        self.notify = notify
        self.proc_reader = proc_reader
        # Signals the job's steps (srun's tasks) on this node; False when it has none here.
        self.signal_steps = signal_steps
        # Pins each batch script to its job's CPUs here (TaskPlugin=task/affinity); None: not
        self.cpus = cpus
        self.tag_reader, self.kill, self.killpg = tag_reader, kill, killpg
        self.jobs: dict[int, Tracked] = {}
        self._launching: set[int] = set()  # and the terminates that overtook those launches:
        self._deferred: dict[int, tuple[str, float | None, int | None]] = {}
        self._tombstones: dict[tuple[int, int], float] = {}
        self._wake = asyncio.Event()
        self.instance = instance or "musterd"
        self.spawner: Zygote | None = None  # forks the monitors (``agent.zygote``); None: forked here

    def tag(self, t: Tracked) -> str:
        """The value of ``MUSTER_JOB_TAG`` in this run's processes (see ``proctree``)."""
        return f"{self.instance}.{t.job_id}.{t.restart_count}"

    # --- queries ----------------------------------------------------------------------

    def running(self) -> list[int]:
        return sorted(self.jobs)

    def running_attempts(self) -> list[list[int]]:
        """``[[job_id, restart_count], ...]``: what runs here, attempt included."""
        return [[t.job_id, t.restart_count] for t in sorted(self.jobs.values(), key=lambda t: t.job_id)]

    # --- launch -----------------------------------------------------------------------

    async def launch(self, job: dict[str, Any], kill_wait: float | None = None) -> None:
        """Start the batch script; return once it runs. Raises ``LaunchError`` after saving
        a failure report (unless the request was a duplicate or conflicts)."""
        job_id = int(job["job_id"])
        attempt = int(job.get("restart_count") or 0)
        current = self.jobs.get(job_id)
        if current is not None or job_id in self._launching:
            if current is None or current.restart_count == attempt:
                log.info("job %s: launch repeated; it already runs here", job_id)
                return
            raise LaunchError(f"job {job_id} attempt {current.restart_count} still runs on {self.node}", STALE)
        if (job_id, attempt) in self._tombstones:
            raise LaunchError(f"job {job_id} was terminated before it started on {self.node}", STALE)
        if self.state.has_report(job_id, attempt):
            log.info("job %s: launch repeated; it already ran here", job_id)
            return

        now = self.clock.now()
        t = Tracked(
            job_id=job_id,
            restart_count=attempt,
            job=job,
            uid=int(job["uid"]) if isinstance(job.get("uid"), int) else -1,
            kill_wait=float(kill_wait if kill_wait is not None else self.kill_wait),
            started_at=now,
        )
        self._launching.add(job_id)
        try:
            try:
                try:
                    self.state.save_job(t.record_text(), t.job_id)
                except OSError as exc:
                    raise LaunchError(
                        f"cannot write the job's record under {self.state.root}: {exc.strerror or exc}"
                    ) from None
                if self.hooks is not None:
                    prolog = await self.hooks.ensure_prolog(job)
                    if not prolog.ok:
                        raise LaunchError(prolog.reason, PROLOG_FAULT)
                if self.preflight is not None and self.preflight.wanted(job):  # the pre-flight gate
                    verdict = await self.preflight.run(job, self.state.spool_for(job_id))
                    if not verdict.ok:
                        raise LaunchError(verdict.reason, PREFLIGHT_FAULT)
                if self.refuse is not None:
                    raise LaunchError(self.refuse)
                try:
                    plan = self._plan(job, self.tag(t))
                except (KeyError, TypeError, ValueError) as exc:
                    raise LaunchError(f"malformed job: {exc!r}", JOB_FAULT) from None
                t.uid, t.stderr_path = plan.uid, plan.stderr
                if self.cpus is not None:
                    plan.cpus = self.cpus.job_cpus(job_id, cpus_on(job, self.node))
                    t.pinned = True
                if self.cgroups is not None:
                    plan.cgroup_procs = self._confine(job, plan.cpus)
                if self.container is not None:
                    try:
                        plan.private_dirs = self.container.prepare(job_id)
                    except OSError as exc:
                        raise LaunchError(f"cannot make the job's private directories: {exc}") from None
                await self._containerize(job, plan)
                plan.exit_path = self.state.exit_path(job_id, attempt)
                try:
                    t.started = await launcher.start(plan, self.spawner)
                except OSError as exc:  # fork, pipe: the node is out of something
                    raise LaunchError(f"cannot spawn the job: {exc.strerror or exc}") from None
            except LaunchError as exc:
                log.warning("job %s: launch failed (%s fault): %s", job_id, exc.fault, exc)
                self._unpin(t)
                t.launch_failed()
                self._launch_failed(t, exc)
                raise
            assert t.started is not None
            t.begin(t.started.pid, proctree.process_start_ticks(t.started.pid))
            self.jobs[job_id] = t
            self.state.save_job(t.record_text(), t.job_id)
        finally:
            self._launching.discard(job_id)
            deferred = self._deferred.pop(job_id, None)
        log.info("job %s: started pid %s as uid %s", job_id, t.pid, t.uid)
        t.task = asyncio.create_task(self._watch(t), name=f"job-{job_id}")
        self._wake.set()
        if deferred is not None:  # cancelled while it was starting: it ends now
            self.terminate(job_id, *deferred)

    async def _containerize(self, job: dict[str, Any], plan: launcher.LaunchPlan) -> None:
        """``sbatch --container`` / ``--container-image``: the script runs in its container,
        as Slurm's batch step (and pyxis's) does; the runtime is exec'd as root in its place.
        Preparing an image takes a while: done off the loop. Raises ``LaunchError``."""
        try:
            request = containers.batch_request(plan.env, plan.workdir)
        except ContainerError as exc:
            raise LaunchError(str(exc), JOB_FAULT) from None
        if request is None:
            return
        oci = self.oci
        if oci is None:
            raise LaunchError(f"containers are not configured on {self.node} (no oci.conf)", JOB_FAULT)
        mine: dict[str, Any] = next((a for a in job.get("alloc") or [] if a.get("node") == self.node), {})
        who = containers.identity(plan.uid, plan.gid, plan.groups, plan.umask)
        # the script lives in the job's spool directory: there, read-only, inside too
        spool = Mount(plan.spool, plan.spool, readonly=True)

        def prepare() -> list[str]:
            return oci.prepare(
                request,
                job_id=plan.job_id,
                step_id=containers.BATCH_STEP,
                task=0,
                argv=plan.argv,
                env=plan.env,
                host_cwd=plan.workdir,
                who=who,
                gpus=[int(g) for g in mine.get("gpu_ids") or []],
                user=str(job.get("user") or plan.uid),
                binds=(spool,) if plan.spool else (),
            )

        try:
            argv = await asyncio.to_thread(prepare)
        except containers.NodeFault as exc:
            raise LaunchError(f"{exc} on {self.node}") from None
        except ContainerError as exc:
            raise LaunchError(str(exc), JOB_FAULT) from None
        except OSError as exc:
            raise LaunchError(f"cannot prepare the container on {self.node}: {exc.strerror or exc}") from None
        plan.exe, plan.argv = argv[0], argv
        plan.env = {"PATH": os.environ.get("PATH") or "/usr/sbin:/usr/bin:/sbin:/bin"}
        plan.workdir = "/"
        plan.container, plan.hide = True, oci.masks

    def _confine(self, job: dict[str, Any], cpus: list[int] | None) -> tuple[str, ...]:
        """The job's cgroup here, with its limits; the files its script joins."""
        assert self.cgroups is not None
        mine: dict[str, Any] = next((a for a in job.get("alloc") or [] if a.get("node") == self.node), {})
        limits = cgroups.job_limits(
            self.cgroups.conf,
            int(mine.get("mem") or 0) or self.cgroups.node_mem_mb,  # none asked: the node's
            cpus,
            [int(g) for g in mine.get("gpu_ids") or []],
            self.cgroups.devices,
        )
        try:
            return self.cgroups.create_job(int(job["job_id"]), limits)
        except OSError as exc:
            raise LaunchError(f"cannot set up the job's cgroup: {exc.strerror or exc}") from None

    def confine_step(self, grant: Mapping[str, Any], step_id: int, task: int = 0) -> tuple[str, ...]:
        """A job step's task's cgroup here (in the step's, in the job's, made with the
        job's limits if it is the job's first here); the files the task joins. Raises
        ``OSError``."""
        if self.refuse is not None:
            raise OSError(errno.EPERM, self.refuse)
        if self.cgroups is None:
            return ()
        job = grant.get("job") or {}
        nodes = list(job.get("nodes") or [])
        here = nodes.index(self.node) if self.node in nodes else -1
        mems, gpu_ids = list(job.get("mem") or []), list(job.get("gpu_ids") or [])
        if 0 <= here < len(gpu_ids):
            gpus = [int(g) for g in gpu_ids[here]]
        else:  # a controller that does not say the job's GPUs: the step's own
            step = grant.get("step") or {}
            snodes = list(step.get("nodes") or [])
            sgpus = list(step.get("gpus") or [])
            at = snodes.index(self.node) if self.node in snodes else -1
            gpus = [int(g) for g in sgpus[at]] if 0 <= at < len(sgpus) else []
        mem = (int(mems[here] or 0) if 0 <= here < len(mems) else 0) or self.cgroups.node_mem_mb
        limits = cgroups.job_limits(self.cgroups.conf, mem, None, gpus, self.cgroups.devices)
        return self.cgroups.create_job(int(grant["job_id"]), limits, step=str(step_id), task=task)

    def _sweep_cgroup(self, job_id: int) -> None:
        """The job ended and no batch script of it runs here (steps only): kill what is
        left in its cgroup and remove it."""
        cg = self.cgroups
        if cg is None or job_id in self._launching or not os.path.isdir(cg.job_dir(job_id)):
            return

        def sweep() -> None:
            cg.kill_all(job_id)
            if not cg.remove_job(job_id):
                log.warning("job %s: its cgroup could not be removed yet", job_id)

        self.spawn(asyncio.to_thread(sweep))

    def spawn(self, work: Any) -> None:
        """Run a coroutine in the background, holding on to it until it is done."""
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _launch_failed(self, t: Tracked, exc: LaunchError) -> None:
        """Leave a report of the failed launch for the controller (the launch's answer says
        it too; whichever arrives first counts). A node that cannot even write that (its
        state directory broken) still answers the launch, which is enough."""
        try:
            self.state.save_report(
                end_report(self.node, t, 1, 0, None, self.clock.now(), reason=str(exc), launch_failure=exc.fault)
            )
        except OSError as err:
            log.error("job %s: cannot save the report of its failed launch: %s", t.job_id, err)
        for cleanup in (self.state.drop_job, self.state.clean_spool):
            try:
                cleanup(t.job_id)
            except OSError:
                pass
        self.notify()

    def _plan(self, job: dict[str, Any], tag: str) -> launcher.LaunchPlan:
        entry = launcher.user_entry(job)
        ctx = EnvContext(
            node=self.env_ctx.node,
            cluster=self.env_ctx.cluster,
            conf_path=self.env_ctx.conf_path,
            ctld_addr=self.env_ctx.ctld_addr,
            ctld_port=self.env_ctx.ctld_port,
            def_mem_per_cpu=self.env_ctx.def_mem_per_cpu,
            user_home=entry.pw_dir,
            user_shell=entry.pw_shell,
            topology_addr=self.env_ctx.topology_addr,
            topology_pattern=self.env_ctx.topology_pattern,
        )
        job = {**job, "user": job.get("user") or entry.pw_name}
        env = batch_environment(job, ctx)
        env[proctree.TAG_VAR.decode().rstrip("=")] = tag
        env.update(progress_env(self.state.root, job))
        nodes = [a.get("node") for a in job.get("alloc") or []]
        index = nodes.index(self.node) if self.node in nodes else 0
        return launcher.prepare(job, env, self.state.spool_for(int(job["job_id"])), self.node, index)

    # --- control ----------------------------------------------------------------------

    def terminate(
        self,
        job_id: int,
        reason: str,
        kill_wait: float | None = None,
        restart_count: int | None = None,
    ) -> bool:
        """TERM now, KILL from ``kill_wait`` on. False when the job does not run here; then,
        for the batch host's reasons, a report is saved so the controller hears an end."""
        t = self.jobs.get(job_id)
        if t is not None and restart_count is not None and t.restart_count != restart_count:
            # Meant for another attempt (e.g. the cleanup of a run before a requeue): the
            # attempt running here now must not be touched.
            log.info(
                "job %s: terminate for attempt %s ignored; attempt %s runs here", job_id, restart_count, t.restart_count
            )
            return False
        suspend.thaw_for_end(self.cgroups, job_id)  # a frozen job could not see its SIGTERM
        if t is None:
            self._terminate_absent(job_id, reason, restart_count, kill_wait)
            self._sweep_cgroup(job_id)
            if self.container is not None and job_id not in self._launching:
                self.container.remove(job_id)  # steps only here: the job's private /tmp
            if self.oci is not None and job_id not in self._launching:
                self.oci.remove(job_id)  # and its containers
            return False
        wait = float(kill_wait if kill_wait is not None else t.kill_wait)
        if t.stop(reason, self.clock.monotonic() + wait):  # the first stop: TERM now
            log.info("job %s: terminating (%s), SIGKILL in %.0fs", job_id, reason, wait)
            self._write_banner(t, reason)
            self._signal_job(t, signal.SIGTERM)
            self._signal_job(t, signal.SIGCONT)
            self.state.save_job(t.record_text(), t.job_id)
        self._wake.set()
        return True

    def _terminate_absent(self, job_id: int, reason: str, restart_count: int | None, kill_wait: float | None) -> None:
        if reason == "cleanup" or restart_count is None:
            return
        if job_id in self._launching:  # it overtook its launch: the job ends once it runs
            log.info("job %s: terminate (%s) arrived while it was starting; applied once it runs", job_id, reason)
            self._deferred[job_id] = (reason, kill_wait, restart_count)
            return
        if self.state.has_report(job_id, restart_count):
            return  # it ended here already; its report is on its way
        now = self.clock.now()
        self._prune_tombstones(now)
        self._tombstones[(job_id, restart_count)] = now
        report = report_body(self.node, job_id, restart_count, 0, 0, reason, now, now)
        report["reason"] = f"job was not running on {self.node}"
        self.state.save_report(report)
        self.notify()

    def _prune_tombstones(self, now: float) -> None:
        for key, when in list(self._tombstones.items()):
            if now - when > TOMBSTONE_SECONDS:
                del self._tombstones[key]

    def signal(self, job_id: int, sig: int, batch_only: bool = False, whole_job: bool = False) -> bool:
        """``scancel --signal``: with ``batch_only`` (``-b``) the batch shell alone; else the
        job's tasks, never the batch shell (see ``_signal_tasks``); with ``whole_job`` the
        shell first, then the tasks (a preempted job's warning)."""
        t = self.jobs.get(job_id)
        if t is None:
            return False
        if whole_job:
            if t.pid is not None and self._leader_alive(t):
                self.kill(t.pid, sig)
            self._signal_tasks(t, sig)
        elif batch_only:
            if t.pid is not None and self._leader_alive(t):
                self.kill(t.pid, sig)
        else:
            self._signal_tasks(t, sig)
        return True

    def _signal_tasks(self, t: Tracked, sig: int) -> None:
        """Slurm signals a job's steps and spares the batch shell (whose default action for
        USR1/USR2 would end the job). The shell's other processes get it: a program the
        script runs directly, and srun, which forwards it to its tasks on every node.
        ``signal_steps`` may claim the signal first for steps the node runs without an srun
        process of this job to forward it (it answers False for a batch job's steps)."""
        if self.signal_steps(t.job_id, sig):
            return
        # The job's cgroup also holds its srun steps' tasks (each under its step supervisor,
        # not the batch shell): srun forwards the signal to them, so they are left to it,
        # else each would get it twice.
        steps = self.cgroups.step_task_pids(t.job_id) if self.cgroups is not None else set()
        for pid in self._members(t) - {t.pid} - steps:
            self.kill(pid, sig)

    def stop_tasks(self, job_id: int, sig: int, step_pids: set[int]) -> bool:
        """``scancel --signal=STOP`` / ``CONT``: every task of the job here (its steps'
        ``step_pids`` and those in its cgroup, and the batch script's processes but the
        shell) at once: a stopped srun could not forward it. False: nothing of it here."""
        t = self.jobs.get(job_id)
        pids = set(step_pids)
        if self.cgroups is not None:
            pids |= self.cgroups.step_task_pids(job_id)
        if t is not None:
            pids |= self._members(t) - {t.pid}
        for pid in sorted(pids - {os.getpid()}):
            self.kill(pid, sig)
        return t is not None or bool(pids)

    def suspend(self, job_id: int, on: bool, step_pids: set[int]) -> str | None:
        """``scontrol suspend`` (``on``) or ``resume`` here: the job's cgroup frozen or
        thawed, or (no cgroup) its processes and ``step_pids`` sent SIGSTOP or SIGCONT; the
        batch script's record notes the time (``agent.suspend``). Returns how ("freezer",
        "SIGSTOP"), or None when nothing of the job is here."""
        t = self.jobs.get(job_id)
        how: str | None = None
        if suspend.freeze(self.cgroups, job_id, on):
            how = "freezer"
        else:
            pids = set(step_pids) | (self._members(t) if t is not None else set())
            if pids:
                suspend.signal_all(pids, on)
                how = "SIGSTOP"
        if t is not None:
            how = how or "SIGSTOP"  # its processes may all have ended: the time is noted all the same
            if suspend.account(t.job, on, self.clock.now()):
                t.job_text = ""
                self.state.save_job(t.record_text(), t.job_id)
                self._wake.set()
        if how is not None:
            log.info("job %s: %s (%s)", job_id, "suspended" if on else "resumed", how)
        return how

    async def preflight_check(self, job: dict[str, Any], allreduce: bool = False) -> HookResult:
        """The pre-flight gate here for ``job`` (``/v1/preflight``), whatever its option: the
        controller asks only for gated jobs. ``allreduce``: with this node's rank of the
        all-reduce across the job's nodes (``agent.allreduce``)."""
        if self.preflight is None:
            return HookResult(True)
        return await self.preflight.run(job, self.state.spool_for(int(job["job_id"])), allreduce)

    def new_allocation(self, job_id: int, attempt: int, alloc: list[dict[str, Any]]) -> bool:
        """A failed node of the running job was replaced (``ctld.replacement``): its record
        names the repaired allocation (what its Epilog and a restarted agent read)."""
        t = self.jobs.get(job_id)
        if t is None or t.restart_count != attempt:
            return False
        t.job["alloc"], t.job_text = alloc, ""
        self.state.save_job(t.record_text(), t.job_id)
        return True

    def update(self, job_id: int, time_limit: int | None) -> bool:
        """A new time limit (``scontrol update``) for a running job."""
        t = self.jobs.get(job_id)
        if t is None:
            return False
        t.job["time_limit"], t.job_text = time_limit, ""
        t.warned = False
        self.state.save_job(t.record_text(), t.job_id)
        self._wake.set()
        return True

    # --- time limits ------------------------------------------------------------------

    def check_limits(self) -> float:
        """One pass: warnings, time limits, SIGKILL escalation. Returns the seconds until
        something may next be due (at most ``TICK``)."""
        now = self.clock.now()
        mono = self.clock.monotonic()
        soonest = TICK
        for t in list(self.jobs.values()):
            if t.state is RunState.TERMINATING:
                assert t.kill_at is not None  # Tracked.check: a stopping run has its SIGKILL time
                if mono >= t.kill_at:
                    self._signal_job(t, signal.SIGKILL)
                else:
                    soonest = min(soonest, t.kill_at - mono)
                continue
            if t.job.get("suspended_at") is not None:
                continue  # scontrol suspend: its time does not run meanwhile
            end = limits.deadline(t.job, t.started_at, self.over_time)
            if end is None:
                continue
            warn = self._warning(t)
            if warn is not None and not t.warned and now >= end - warn.seconds:
                t.warned = True
                self._send_warning(t, warn)
            if now >= end:
                log.info("job %s: time limit reached", t.job_id)
                self.terminate(t.job_id, "timeout")
            else:
                soonest = min(soonest, end - now)
        return max(0.02, soonest)

    async def run_limits(self) -> None:
        while True:
            try:
                delay = self.check_limits()
            except Exception:  # a surprise must not stop limit enforcement for good
                log.exception("time limit check failed")
                delay = TICK
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except TimeoutError:
                pass

    def _warning(self, t: Tracked) -> limits.SignalSpec | None:
        try:
            return limits.parse_signal_spec((t.job.get("spec") or {}).get("signal"))
        except ValueError:
            return None

    def _send_warning(self, t: Tracked, warn: limits.SignalSpec) -> None:
        log.info("job %s: sending signal %s %ss before the limit", t.job_id, warn.signal, warn.seconds)
        if warn.batch_only:
            if t.pid is not None and self._leader_alive(t):
                self.kill(t.pid, warn.signal)
            return
        self._signal_tasks(t, warn.signal)

    # --- processes --------------------------------------------------------------------

    def _members(self, t: Tracked) -> set[int]:
        return self._snapshot(t)[0]

    def _snapshot(self, t: Tracked) -> tuple[set[int], Mapping[int, proctree.ProcInfo]]:
        if t.pid is None:
            return set(), {}
        procs = self.proc_reader()
        members = proctree.job_members(procs, t.pid, self.tag(t), t.uid, exclude={os.getpid()}, tag_of=self.tag_reader)
        if self.cgroups is not None:  # whatever hid from the walk is still in its cgroup
            members |= self.cgroups.pids(t.job_id) - {os.getpid()}
        if t.adopted and not self._leader_alive(t, procs):
            members.discard(t.pid)  # its pid may belong to someone else by now
        return members, procs

    def _leader_alive(self, t: Tracked, procs: Mapping[int, proctree.ProcInfo] | None = None) -> bool:
        if t.pid is None:
            return False
        if not t.adopted:
            return True  # its monitor reaps it only once we release it (launcher.Started)
        if procs is not None:
            info = procs.get(t.pid)
            return info is not None and info.start_ticks == t.start_ticks
        return proctree.process_start_ticks(t.pid) == t.start_ticks

    def _signal_job(self, t: Tracked, sig: int) -> None:
        """Signal the job's process group at once (so that no member can react to the
        death of another first, e.g. the batch shell to its killed child), then every other
        member (those that left the group) one by one; nobody gets the signal twice."""
        members, procs = self._snapshot(t)
        grouped: set[int] = set()
        if t.pid is not None and t.pid in members:
            self.killpg(t.pid, sig)  # the leader lives: its group id cannot be anyone else's
            grouped = {p for p in members if p in procs and procs[p].pgid == t.pid}
        for pid in sorted(members - grouped):
            self.kill(pid, sig)

    def _write_banner(self, t: Tracked, reason: str) -> None:
        """Tell the job's error file why it stops (see ``launcher.append_to_output``)."""
        if reason == "cleanup" or not t.stderr_path:
            return
        line = limits.banner(self.node, t.job_id, reason, format_timestamp(self.clock.now()))
        launcher.append_to_output(t.stderr_path, t.uid, line)

    # --- endings ----------------------------------------------------------------------

    async def _watch(self, t: Tracked) -> None:
        try:
            if t.started is not None:
                status = await t.started.status()  # the script ended; its monitor has not reaped it
            else:
                await self._wait_exit(t)
            # The leader is a zombie (or, adopted, gone): its pid, process group and session
            # still cannot be reused, so sweeping them now is safe.
            ooms: dict[str, int] = {}
            peak = None
            if self.cgroups is not None:
                ooms = self.cgroups.oom_kills(t.job_id)
                # the batch step's own peak (sacct's batch row); the job's where it has none
                mem = self.cgroups.memory(t.job_id, "batch")
                peak = mem.peak_kb * 1024 if mem is not None else self.cgroups.peak_bytes(t.job_id)
                # every process of the job, those that escaped its session included
                await asyncio.to_thread(self.cgroups.kill_all, t.job_id)
            if self._may_have_leftovers(t):
                for pid in self._members(t) - {t.pid}:
                    self.kill(pid, signal.SIGKILL)
            usage = None
            if t.started is not None:
                await t.started.release()
                usage = t.started.usage
            else:
                status = await self._recorded_status(t)
            if self.cgroups is not None:
                usage = _with_peak(usage, peak)
                if not self.cgroups.remove_job(t.job_id):
                    log.warning("job %s: its cgroup could not be removed yet", t.job_id)
            self._finish(t, status, usage, ooms)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("job %s: watching failed", t.job_id)

    def _may_have_leftovers(self, t: Tracked) -> bool:
        """Whether to walk ``/proc`` for leftovers: not when the monitor, their subreaper, has
        no other child (step tasks never carry the job's tag: ``agent.taskenv``)."""
        if t.started is None:
            return True
        return not t.started.alone()

    async def _recorded_status(self, t: Tracked) -> int | None:
        """An adopted script's exit status, from the file its monitor writes as it ends
        (given a moment to appear); None when it was started without one, or it is lost."""
        if not t.monitored:
            return None
        for _ in range(40):
            status = self.state.exit_status(t.job_id, t.restart_count)
            if status is not None:
                return status
            await asyncio.sleep(0.05)
        return None

    async def _wait_exit(self, t: Tracked) -> None:
        assert t.pid is not None
        loop = asyncio.get_running_loop()
        try:
            fd = os.pidfd_open(t.pid)
        except (AttributeError, OSError):
            fd = None
        if fd is not None:
            if t.adopted and not self._leader_alive(t):
                os.close(fd)
                return
            done: asyncio.Future[None] = loop.create_future()
            loop.add_reader(fd, lambda: None if done.done() else done.set_result(None))
            try:
                await done
            finally:
                loop.remove_reader(fd)
                os.close(fd)
            return
        while self._leader_alive(t):  # no pidfd (old kernel): poll
            await asyncio.sleep(0.2)

    def _finish(
        self, t: Tracked, status: int | None, usage: dict[str, float] | None = None, ooms: dict[str, int] | None = None
    ) -> None:
        now = self.clock.now()
        by: str | None
        reason: str | None
        if status is None:
            exit_code, sig = 0, 0
            by, reason = t.terminated_by or "node_fail", LOST_STATUS
        else:
            exit_code, sig = limits.exit_fields(status)
            by, reason = t.terminated_by, None
        if ooms and by is None:  # the kernel's OOM killer struck inside the job's cgroup
            by, reason = "oom", f"{sum(ooms.values())} oom_kill event(s) in the job's cgroup"
            for step, count in sorted(ooms.items()):
                if t.stderr_path and step == "batch":  # a step's: srun prints it (``cli.steprun``)
                    line = cgroups.oom_message(count, f"{t.job_id}.{step}")
                    launcher.append_to_output(t.stderr_path, t.uid, line)
        if t.state is RunState.LAUNCHING:  # a record saved before its fork, taken back
            t.launch_failed()
        else:
            t.exited()
        log.info("job %s: ended exit_code=%s signal=%s terminated_by=%s", t.job_id, exit_code, sig, by)
        self.state.save_report(end_report(self.node, t, exit_code, sig, by, now, reason=reason, usage=usage))
        if self.hooks is not None:  # the job's end here: the site's Epilog
            self.spawn(self.hooks.epilog_once(t.job))
        self._unpin(t)
        if self.container is not None:  # the job's private /tmp goes with it
            self.container.remove(t.job_id)
        if self.oci is not None:  # and its containers
            self.oci.remove(t.job_id)
        self.state.drop_job(t.job_id)
        self.state.drop_exit(t.job_id, t.restart_count)
        self.state.clean_spool(t.job_id)
        if self.jobs.get(t.job_id) is t:
            del self.jobs[t.job_id]
        self.notify()

    # --- restart ----------------------------------------------------------------------

    def recover(self) -> None:
        """Adopt or report what a previous agent left running (see the module docstring)."""
        for rec in self.state.jobs():
            try:
                job_id = int(rec["job_id"])
                attempt = int(rec.get("restart_count") or 0)
            except (KeyError, TypeError, ValueError):
                log.error("ignoring a malformed job record: %r", rec)
                continue
            if self.state.has_report(job_id, attempt):
                self.state.drop_job(job_id)
                continue
            t = Tracked.adopted_from(rec, job_id, attempt, self.kill_wait, self.clock.now(), self.clock.monotonic())
            if t.state is not RunState.LAUNCHING and t.start_ticks is not None and self._leader_alive(t):
                log.info("job %s: still running as pid %s; adopted", job_id, t.pid)
                self.jobs[job_id] = t
                self._adopt_cpus(t)
                t.task = asyncio.create_task(self._watch(t), name=f"job-{job_id}")
            else:
                status = self.state.exit_status(job_id, attempt) if t.monitored else None
                if status is None:
                    log.warning("job %s: gone while musterd was down; reporting it lost", job_id)
                else:
                    log.info("job %s: ended while musterd was down; its monitor kept the status", job_id)
                ooms: dict[str, int] = {}
                if self.cgroups is not None:  # what it left behind is still in its cgroup
                    ooms = self.cgroups.oom_kills(job_id)
                    self.cgroups.kill_all(job_id)  # before the report: a rerun may come here
                    self.cgroups.remove_job(job_id)
                self._finish(t, status, ooms=ooms)
        self._wake.set()

    def _unpin(self, t: Tracked) -> None:
        if t.pinned and self.cpus is not None:
            self.cpus.release(t.job_id)
        t.pinned = False

    def _adopt_cpus(self, t: Tracked) -> None:
        """An adopted batch script keeps holding the CPUs it is pinned to."""
        if self.cpus is None or t.pid is None:
            return
        try:
            pinned = os.sched_getaffinity(t.pid)
        except (AttributeError, OSError):
            return
        t.pinned = self.cpus.adopt(t.job_id, sorted(pinned))

    async def aclose(self) -> None:
        """Stop watching (the jobs themselves keep running: records stay on disk)."""
        tasks = [t.task for t in self.jobs.values() if t.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
