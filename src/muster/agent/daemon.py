"""Wiring of musterd: state directory, GPUs, supervisor, controller link, HTTP server.

``AgentDaemon(settings).serve()`` runs until SIGTERM/SIGINT. Stopping is graceful and,
like slurmd's, leaves the jobs running: the server stops accepting, the background loops
are cancelled, and the job records stay on disk for the next agent to adopt or report
(see ``supervisor``). ``muster down`` cancels jobs itself when it means to.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import ssl
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from muster import __version__
from muster.agent import cgroups, gpus, hardware, jobcontainer, nodeident
from muster.agent.affinity import CpuLedger, task_affinity
from muster.agent.app import build_app
from muster.agent.cgroupfs import CgroupUnusable, NodeCgroups
from muster.agent.containers import Containers
from muster.agent.env import EnvContext
from muster.agent.gpuhealth import GpuFault, GpuHealth, default_fault_file
from muster.agent.hooks import Hooks
from muster.agent.link import ControllerLink
from muster.agent.metrics import AgentCollector
from muster.agent.preflight import Preflight
from muster.agent.progress import ProgressWatch
from muster.agent.state import StateDir
from muster.agent.steps import StepRunner
from muster.agent.supervisor import Supervisor
from muster.agent.zygote import Zygote
from muster.core.clock import Clock, SystemClock
from muster.core.confhash import config_hash
from muster.core.config import Config, NodeConf
from muster.core.hostlist import expand
from muster.core.topoconf import topology_addr
from muster.protocol.httpd import SignedClient, bind_tcp, bind_unix, body_limit, make_server
from muster.protocol.tls import TLSError, daemon_contexts

__all__ = ["AgentDaemon", "AgentSettings", "StartupError", "heartbeat_interval"]

log = logging.getLogger("musterd")

UNIX_PATH_MAX = 107


class StartupError(Exception):
    """musterd cannot start; ``str()`` is what it prints after ``musterd: error:``."""


@dataclass(slots=True)
class AgentSettings:
    config: Config
    node: NodeConf
    key: bytes
    state_dir: str
    conf_path: str
    gpu_mode: str = "auto"


def heartbeat_interval(config: Config) -> float:
    """The interval this agent beats at (``Config.heartbeat_interval``, the key's one reader)."""
    return config.heartbeat_interval


def socket_path(config: Config, node: str, state_dir: str) -> str:
    return os.path.join(config.agent_socket_dir or state_dir, f"musterd-{node}.sock")


def _over_time(config: Config) -> float:
    """``OverTimeLimit`` (minutes past the limit before the kill; UNLIMITED is not honoured)."""
    raw = (config.get("OverTimeLimit") or "").strip()
    return 60.0 * int(raw) if raw.isdigit() else 0.0


def _boot_time() -> float | None:
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except OSError:
        pass
    return None


class AgentDaemon:
    def __init__(self, settings: AgentSettings, clock: Clock | None = None) -> None:
        self.settings = settings
        self.config = settings.config
        self.node = settings.node
        self.clock = clock or SystemClock()
        self.state = StateDir(settings.state_dir)
        self.start_time = self.clock.now()
        self.config_hash = file_config_hash(settings.conf_path)  # again at SIGHUP (``main.reconfigure``)
        self.inventory = gpus.GpuInventory()
        # The machine's CPUs and memory, found in prepare when the agent detects hardware for
        # real (--gpu-detect nvidia); None: it emulates the configured node (auto, emulate).
        self.hardware: hardware.Hardware | None = None
        self.gpu_health: GpuHealth | None = None  # set once the GPUs are known (prepare)
        self._gpu_faults: set[GpuFault] = set()  # reported to the controller already
        self.progress = ProgressWatch(self.state.root)  # MUSTER_PROGRESS files of jobs here
        self._lock_fd: int | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._server: Any = None
        self.stop_requested = False
        # set by a process hosting several nodes: their heartbeats travel together
        self.send_heartbeat: Callable[[dict[str, Any]], Awaitable[Any]] | None = None
        self.client: SignedClient | None = None
        self._tls: tuple[ssl.SSLContext, ssl.SSLContext] | None = None  # (server, client): TLSType=tls/muster
        self.link: ControllerLink | None = None
        # One ledger of the host's CPUs for batch scripts and steps alike; batch scripts
        # and tasks are pinned by default only under TaskPlugin=task/affinity.
        self.cpus = CpuLedger()
        bind_by_default = task_affinity(self.config)
        self.hooks = Hooks(self.config, self.node.name)  # Prolog, Epilog, HealthCheckProgram
        self.supervisor = Supervisor(
            node=self.node.name,
            state=self.state,
            clock=self.clock,
            env_ctx=EnvContext(
                node=self.node.name,
                cluster=self.config.cluster_name,
                conf_path=os.path.abspath(settings.conf_path),
                ctld_addr=self.config.ctld_addr,
                ctld_port=self.config.ctld_port,
                def_mem_per_cpu=self.config.def_mem_per_cpu,
                topology_addr=topology_addr(self.config.topology, self.node.name)[0],
                topology_pattern=topology_addr(self.config.topology, self.node.name)[1],
            ),
            kill_wait=float(self.config.kill_wait),
            over_time=_over_time(self.config),
            notify=self._notify,
            # a job's signals reach its steps' tasks once, not its srun processes too
            signal_steps=lambda job_id, sig: self.steps.signal(job_id, sig),
            cpus=self.cpus if bind_by_default else None,
            hooks=self.hooks,
        )
        self.supervisor.spawner = Zygote.shared()
        self.steps = StepRunner(  # job steps (srun): launched straight from srun
            node=self.node.name,
            key=settings.key,
            clock=self.clock,
            env_ctx=self.supervisor.env_ctx,
            kill_wait=float(self.config.kill_wait),
            cpus=self.cpus,
            bind_default="task" if bind_by_default else "none",
            state=self.state,
            hooks=self.hooks,
            reattach_wait=float(self.config.slurmd_timeout),  # a restarted agent waits this for srun
        )

    # --- startup ----------------------------------------------------------------------

    def prepare(self) -> list[Any]:
        """Everything that can fail before serving: state dir, lock, GPUs, sockets."""
        try:
            self.state.create()
        except OSError as exc:
            raise StartupError(f"cannot create the state directory {self.state.root}: {exc.strerror}") from None
        self._lock()
        self.supervisor.instance = self.state.instance_id()
        self.inventory = gpus.detect(self.node.gpus, self.node.gpu_type, self.settings.gpu_mode)
        # the pre-flight gate (--preflight, Preflight=YES): its GPU check knows real GPUs
        self.supervisor.preflight = Preflight.from_config(
            self.config, self.node.name, real_gpus=self.inventory.source != "emulated"
        )
        if self.settings.gpu_mode == "nvidia":
            self.hardware = hardware.probe()
        self.gpu_health = GpuHealth(
            self.inventory, default_fault_file(self.state.root, self.config.get("GpuFaultFile"))
        )
        self._setup_cgroups()
        self._setup_job_container()
        self._setup_containers()
        with open(os.path.join(self.state.root, "musterd.pid"), "w") as f:
            f.write(f"{os.getpid()}\n")
        try:  # an emulated node's jobs see its host name (NodeHostnames)
            nodeident.configure(self.config, self.node, self.state.root)
        except OSError as exc:
            raise StartupError(str(exc)) from None
        path = socket_path(self.config, self.node.name, self.state.root)
        if len(path.encode()) > UNIX_PATH_MAX:
            raise StartupError(f"socket path {path} is too long for a Unix socket; set AgentSocketDir")
        if self.config.tls.enabled:
            try:
                self._tls = daemon_contexts(self.config.tls.node(self.node.name))
            except TLSError as exc:
                raise StartupError(str(exc)) from None
        try:
            tcp = bind_tcp(self.node.addr, self.node.port)
        except OSError as exc:
            raise StartupError(f"cannot listen on {self.node.addr}:{self.node.port}: {exc.strerror}") from None
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            unix = bind_unix(path)
        except OSError as exc:
            tcp.close()
            raise StartupError(f"cannot listen on {path}: {exc.strerror}") from None
        if self.supervisor.spawner is not None:
            self.supervisor.spawner.start()  # forks the batch scripts' monitors
        log.info(
            "musterd %s for node %s: listening on %s:%s and %s; state in %s",
            __version__,
            self.node.name,
            self.node.addr,
            self.node.port,
            path,
            self.state.root,
        )
        return [tcp, unix]

    def _setup_cgroups(self) -> None:
        """Jobs in cgroups (ProctrackType=proctrack/cgroup, TaskPlugin=task/cgroup, with
        cgroup.conf beside the config). A node that cannot confine them as configured
        runs none: it says why with its first heartbeat and the controller drains it."""
        cfg = self.config
        if not cgroups.tracking_wanted(cfg.get("ProctrackType"), cfg.get("TaskPlugin")):
            return
        path = cgroups.conf_path_beside(self.settings.conf_path)
        try:
            with open(path) as f:
                text = f.read()
        except FileNotFoundError:
            text = ""
        except OSError as exc:
            raise StartupError(f"cannot read {path}: {exc.strerror}") from None
        try:
            conf = cgroups.constraints_wanted(cgroups.parse_cgroup_conf(text, path), cfg.get("TaskPlugin"))
        except cgroups.CgroupConfError as exc:
            raise StartupError(str(exc)) from None
        try:
            # muster/<node>_<instance>: emulated clusters sharing a host never share a cgroup
            name = f"{self.node.name}_{self.supervisor.instance}"
            self.supervisor.cgroups = NodeCgroups.probe(conf, name, self.inventory.count, self.node.real_memory)
        except CgroupUnusable as exc:
            self.supervisor.refuse = f"cgroup: {exc}"
            self.steps.confine = self.supervisor.confine_step  # refuses steps too
            log.error("node %s cannot confine jobs, it runs none: %s", self.node.name, exc)
            return
        log.info("node %s: jobs confined by %s", self.node.name, self.supervisor.cgroups.describe())
        self.steps.confine = self.supervisor.confine_step

    def _setup_job_container(self) -> None:
        """JobContainerType=job_container/tmpfs: each job's private /tmp, as
        job_container.conf beside the config says (``agent.jobcontainer``). Read at start."""
        kind = (self.config.get("JobContainerType") or "job_container/none").strip().lower()
        if kind == "job_container/none":
            return
        if kind != jobcontainer.TMPFS:
            raise StartupError(f"JobContainerType={kind}: muster knows job_container/tmpfs and job_container/none")
        path = jobcontainer.conf_path_beside(self.settings.conf_path)
        try:
            with open(path) as f:
                text = f.read()
        except OSError as exc:
            raise StartupError(f"JobContainerType={kind} needs {path}: {exc.strerror}") from None
        try:
            container = jobcontainer.parse_conf(text, path, self.node.name)
        except jobcontainer.JobContainerError as exc:
            raise StartupError(str(exc)) from None
        self.supervisor.container = container
        self.steps.private_dirs = container.prepare
        log.info("node %s: jobs get a private %s under %s", self.node.name, ",".join(container.dirs), container.base)

    def _setup_containers(self) -> None:
        """oci.conf beside the config: this node runs container tasks (``agent.containers``).
        A bad oci.conf or a missing runtime is reported with the first heartbeat (the
        controller drains the node) and container tasks are refused here."""
        cg = self.supervisor.cgroups
        gpu_files = cg.conf.gpu_files if cg is not None else tuple(expand(cgroups.DEFAULT_GPU_FILES))
        spool = os.path.join(self.state.root, "containers")
        found = Containers.configure(self.settings.conf_path, spool, self.node.name, gpu_files)
        if found is None:
            return
        self.supervisor.oci = self.steps.containers = found
        if found.broken is not None:
            log.error("node %s cannot run containers: %s", self.node.name, found.broken)
        else:
            log.info("node %s: container tasks run by %s", self.node.name, found.runtime)

    def _lock(self) -> None:
        path = os.path.join(self.state.root, "musterd.lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StartupError(f"another musterd uses {self.state.root}") from None
        self._lock_fd = fd

    def registration(self) -> dict[str, Any]:
        return {
            "node": self.node.name,
            "addr": self.node.addr,
            "port": self.node.port,
            **self._resources(),
            "gpus": self.inventory.count,
            "gpu_type": self.inventory.gpu_type,
            "gpu_source": self.inventory.source,
            "gpu_list": self.inventory.describe(),
            "running": self.supervisor.running_attempts(),
            "agent_start_time": self.start_time,
            "boot_time": _boot_time(),
            "version": __version__,
            "config_hash": self.config_hash,
            "containment": self.containment(),
        }

    def containment(self) -> str:
        """What confines this node's jobs, said at registration (docs/containment.md):
        its cgroups' mechanisms, ``none`` (not configured), or why it cannot."""
        sup = self.supervisor
        if sup.cgroups is not None:
            return sup.cgroups.containment()
        if sup.refuse is not None:
            return f"unusable: {sup.refuse}"
        return cgroups.NO_CONTAINMENT

    def _resources(self) -> dict[str, Any]:
        """What the node has: the machine's own figures, or the configuration's when
        emulating (the controller then takes them as given: ``emulated``)."""
        hw, node = self.hardware, self.node
        if hw is None:
            return {
                "cpus": node.cpus,
                "sockets": node.sockets,
                "cores_per_socket": node.cores_per_socket,
                "threads_per_core": node.threads_per_core,
                "real_memory": node.real_memory,
                "emulated": True,
            }
        return {
            "cpus": hw.cpus,
            "sockets": hw.sockets * hw.boards,
            "cores_per_socket": hw.cores_per_socket,
            "threads_per_core": hw.threads_per_core,
            "real_memory": hw.real_memory,
            "emulated": False,
        }

    @property
    def uses_tls(self) -> bool:
        """Whether this node's links are TLS (known once ``prepare`` ran)."""
        return self._tls is not None

    def _notify(self) -> None:
        if self.link is not None:
            self.link.wake()

    def _register_again(self, controller: int | None) -> None:
        """A controller that started or took over asks for this node: register with it now."""
        if self.link is not None:
            self.link.register_again(controller)

    def _status_extra(self) -> dict[str, Any]:
        return {
            "pending_reports": len(self.state.reports()),
            "registered": bool(self.link and self.link.registered),
        }

    # --- running ----------------------------------------------------------------------

    @asynccontextmanager
    async def lifespan(self, app: Any) -> Any:
        await self.start()
        try:
            yield
        finally:
            await self.stop()

    async def start(self) -> None:
        cfg = self.config
        self.client = SignedClient(
            self.settings.key,
            self.clock,
            timeout=float(cfg.message_timeout),
            sender=self.node.name,
            tls=self._tls[1] if self._tls else None,
        )
        base = self.client.url(cfg.ctld_addr, cfg.ctld_port)
        # with backup controllers, posts to ``base`` reach whichever is active
        self.client.use_controllers([self.client.url(addr, cfg.ctld_port) for _h, addr in cfg.ctld_addrs])
        self.link = ControllerLink(
            client=self.client,
            base_url=base,
            node=self.node.name,
            registration=self.registration,
            supervisor=self.supervisor,
            state=self.state,
            interval=heartbeat_interval(cfg),
        )
        self.link.send_heartbeat = self.send_heartbeat
        self.link.config_hash = self.config_hash
        self.hooks.on_fault = self.link.add_fault
        if self.supervisor.refuse is not None:  # the controller drains the node with this reason
            self.link.add_fault({"kind": "cgroup", "reason": self.supervisor.refuse})
        self.steps.on_fault = self.link.add_fault
        if self.steps.containers is not None and self.steps.containers.broken is not None:
            self.link.add_fault({"kind": "container", "reason": self.steps.containers.broken})
        self.link.progress_source = self._progress_reports
        client = self.client
        self.steps.report = lambda path, body: client.post(base + path, body)
        self.supervisor.recover()
        self.steps.recover()  # steps a previous agent ran: taken back, srun reconnects
        self._tasks = [
            asyncio.create_task(self.supervisor.run_limits(), name="limits"),
            asyncio.create_task(self.link.run(), name="heartbeat"),
            asyncio.create_task(self.link.deliver(), name="reports"),
            asyncio.create_task(self.steps.hold_all_when(self._stopping), name="steps"),  # steps outlive the agent
            asyncio.create_task(self._health_checks(), name="health"),
            asyncio.create_task(self._gpu_checks(), name="gpu-health"),
        ]

    async def _health_checks(self) -> None:
        """HealthCheckProgram at start, then every HealthCheckInterval seconds (when the
        node's state is one HealthCheckNodeState names); the verdict travels with the
        heartbeats, and the controller drains or returns the node to service. The loop
        follows SIGHUP: a program added runs at once (then on its interval), one removed
        stops (a failure it reported is withdrawn), a new interval applies from now."""
        hooks = self.hooks
        while True:
            hooks.health_changed.clear()
            if hooks.health_program is not None:
                if hooks.health_due(busy=bool(self.supervisor.jobs or self.steps.steps)):
                    result = await hooks.run_health_check()
                    assert self.link is not None
                    self.link.set_health(result.ok, result.reason)
            elif self.link is not None and self.link.health is not None and not self.link.health.get("ok"):
                self.link.set_health(True, "")  # no program any more: nothing says the node is unwell
            interval = hooks.health_interval if hooks.health_program is not None else 0.0
            try:  # the interval, or until a reconfigure changes the check
                await asyncio.wait_for(hooks.health_changed.wait(), interval if interval > 0 else None)
            except TimeoutError:
                pass

    def _progress_reports(self) -> list[dict[str, Any]]:
        """What jobs here reported of their progress since the last heartbeat."""
        active = {(j, a) for j, a in self.supervisor.running_attempts()}
        active.update((s.job_id, s.attempt) for s in self.steps.steps.values())
        return self.progress.poll(self.clock.now(), active)

    async def _gpu_checks(self) -> None:
        """Check the GPUs at start, then every GpuHealthCheckInterval seconds (default 60;
        0: only at start). Each new fault goes to the controller, which drains the node
        and requeues its jobs; a fault that clears may be reported again if it returns."""
        if self.gpu_health is None or not self.inventory.gpus:
            return
        interval = float(self.config.get_int("GpuHealthCheckInterval", 60))
        while True:
            # nvidia-smi may take seconds: not on the event loop
            found = await asyncio.to_thread(self.gpu_health.check)
            self.note_gpu_faults(found)
            if interval <= 0:
                return
            await asyncio.sleep(interval)

    def note_gpu_faults(self, faults: list[GpuFault]) -> list[GpuFault]:
        """One check's faults; returns those reported to the controller now (the new ones)."""
        found = set(faults)
        new = sorted(found - self._gpu_faults)
        self._gpu_faults = found
        for fault in new:
            log.error("GPU health: %s", fault.reason)
            if self.link is not None:
                self.link.add_fault({"kind": "gpu", "reason": fault.reason, "gpu": fault.index})
        return new

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.supervisor.aclose()
        if self.supervisor.cgroups is not None:
            self.supervisor.cgroups.remove_node()  # only if no job is left in it
        if self.client is not None:
            await self.client.aclose()
        log.info("musterd stopped; %d job(s) left running", len(self.supervisor.jobs))

    def _stopping(self) -> bool:
        return self.stop_requested or bool(self._server is not None and self._server.should_exit)

    def request_stop(self) -> None:
        self.stop_requested = True
        if self._server is not None:
            self._server.should_exit = True

    async def serve(self, hosted: bool = False, sockets: list[Any] | None = None) -> None:
        """Serve until stopped; ``hosted``: one of several nodes of this process (``host``),
        whose signals the process handles, with the ``sockets`` its ``prepare`` bound."""
        if sockets is None:
            sockets = self.prepare()
        metrics = None
        if (self.config.get("MetricsType") or "").lower() == "metrics/openmetrics":
            metrics = AgentCollector(self).render
        app = build_app(
            self.supervisor,
            self.settings.key,
            self.clock,
            self.lifespan,
            self._status_extra,
            self.steps,
            metrics,
            require_cert=self._tls is not None,
            relay_tls=self._tls[1] if self._tls else None,
            contact=self._register_again,
        )
        server = self._server = make_server(
            app,
            body_limit=body_limit(self.config.max_script_size),
            tls=self._tls[0] if self._tls else None,
            hosted=hosted,
        )
        try:
            if not self.stop_requested:
                await server.serve(sockets=sockets)
        finally:
            for sock in sockets:
                sock.close()
            try:
                os.unlink(socket_path(self.config, self.node.name, self.state.root))
            except OSError:
                pass


def file_config_hash(path: str) -> str | None:
    """``core.confhash`` of the file at ``path``; None when it cannot be read (the agent
    then says nothing of its configuration, and is not reported)."""
    try:
        with open(path, "rb") as f:
            return config_hash(f.read())
    except OSError:
        return None
