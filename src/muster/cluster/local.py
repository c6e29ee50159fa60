"""Create, start, stop and inspect a local muster cluster on loopback.

Layout of a state directory::

    muster.conf    the config (slurm.conf syntax)      muster.key   cluster key (0600)
    jwt_hs256.key  the JWT key (0600, auth/jwt)
    tls/           the cluster CA and each daemon's certificate (TLSType=tls/muster, the default)
    ctld/          controller state (muster.db, socket) nodes/NAME/ each node's state
    log/           daemon logs                           run/         pid files, agent sockets
    agents.json    how many nodes each agent process hosts (absent: one)

Node K listens on its own loopback address (127.0.0.(K+1) for the first 250 nodes, then
127.0.1.2 and on: Linux routes all of 127.0.0.0/8 to lo) and its own port. By default each
node has its own agent process, as on real machines; ``ClusterShape.nodes_per_agent`` makes
one agent process host that many nodes (``musterd --node node[1-64]``), which is how a
thousand nodes fit one small machine. Such a process is named ``agentK`` (its pid file,
its log); killing it takes all its nodes down, like a rack losing power.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from muster.core import requeuedelay
from muster.core.config import Config, parse_config
from muster.core.hostlist import compress
from muster.core.topoconf import attach_topology, parse_topology, topology_path
from muster.protocol import client
from muster.protocol.signing import generate_key


def generate_jwt_key(path: str) -> None:
    """A new HS256 key for auth/jwt: 32 random bytes, mode 0600 (never overwrites one)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(os.urandom(32))


@dataclass
class ClusterShape:
    nodes: int = 4
    gpus_per_node: int = 8
    cpus_per_node: int = 32
    mem_per_node: int = 128000
    gpu_type: str | None = None
    nodes_per_agent: int = 1  # nodes hosted by one agent process (muster.agent.host)
    backup_controllers: int = 0  # standby controllers (high availability: PostgreSQL store)


@dataclass
class Daemon:
    role: str  # "controller" or "node"
    name: str
    pid: int | None
    address: str
    running: bool
    state: str = ""


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _loopback_alias_works(addr: str) -> bool:
    """Linux routes all of 127.0.0.0/8 to lo; elsewhere only 127.0.0.1 may bind."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((addr, 0))
        return True
    except OSError:
        return False


ADDRS_PER_BLOCK = 250  # node addresses per 127.0.B.0/24 block: .2 to .251


def backup_addr(i: int) -> str:
    """The loopback address of backup controller ``i`` (from 1): apart from the nodes'."""
    return f"127.1.0.{i}"


def node_addr(k: int) -> str:
    """The loopback address of node ``k`` (from 1) of a local cluster."""
    block, offset = divmod(k - 1, ADDRS_PER_BLOCK)
    return f"127.0.{block}.{offset + 2}"


def cgroups_usable(mount: str = "/sys/fs/cgroup") -> bool:
    """Whether this machine lets musterd confine jobs in cgroups with memory limits: root,
    and a writable v1 freezer and memory hierarchy or a v2 one with the memory controller."""
    if os.geteuid() != 0:
        return False
    v2 = os.path.join(mount, "cgroup.controllers")
    if os.path.exists(v2):
        try:
            with open(v2) as f:
                return "memory" in f.read().split() and os.access(mount, os.W_OK)
        except OSError:
            return False
    return all(os.access(os.path.join(mount, c), os.W_OK) for c in ("freezer", "memory"))


CGROUP_ROOTS = tuple(f"/sys/fs/cgroup/{c}" for c in ("freezer", "memory", "devices", "cpuset", "unified", ""))


def remove_cgroup_tree(rel: str, timeout: float = 5.0) -> None:
    """Kill every process in the cgroup ``rel`` (under each hierarchy) and remove it."""
    for root in CGROUP_ROOTS:
        base = os.path.join(root, rel)
        if not os.path.isdir(base):
            continue
        deadline = time.monotonic() + timeout
        for path in sorted((d for d, _s, _f in os.walk(base)), key=len, reverse=True):
            while True:
                try:
                    with open(os.path.join(path, "cgroup.procs")) as f:
                        pids = [int(p) for p in f.read().split()]
                    if os.path.exists(os.path.join(path, "freezer.state")):
                        with open(os.path.join(path, "freezer.state"), "w") as f:
                            f.write("THAWED")
                    for pid in pids:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.02)


# Seconds a job requeued after a node failure waits on a local cluster (core.requeuedelay).
LOCAL_REQUEUE_DELAY = 3


def render_config(state_dir: str, shape: ClusterShape, overrides: dict[str, str] | None = None) -> str:
    """The config of a local cluster; ``overrides`` replace or add global settings."""
    ctld_port = _free_port("127.0.0.1")
    per_node_addr = _loopback_alias_works("127.0.0.2")
    gres = ""
    if shape.gpus_per_node:
        gres = f" Gres=gpu:{shape.gpu_type + ':' if shape.gpu_type else ''}{shape.gpus_per_node}"
    lines = [
        "# A local muster cluster written by `muster up`; slurm.conf syntax.",
        "ClusterName=muster",
        f"SlurmctldHost={socket.gethostname().split('.')[0]}(127.0.0.1)",
        *[f"SlurmctldHost=backup{i}({backup_addr(i)})" for i in range(1, shape.backup_controllers + 1)],
        f"SlurmctldPort={ctld_port}",
        f"StateSaveLocation={state_dir}/ctld",
        f"CtldSocket={state_dir}/ctld/musterctld.sock",
        f"AuthKeyFile={state_dir}/muster.key",
        "AuthAltTypes=auth/jwt",  # scontrol token and musterrestd (docs/rest.md)
        f"AuthAltParameters=jwt_key={state_dir}/jwt_hs256.key",
        f"AgentSocketDir={state_dir}/run",
        "SchedulerType=sched/backfill",
        # A local cluster requeues after a node failure within seconds (Slurm: 120 s) and
        # honours --requeue=expedite; its priority is multifactor (an absent PriorityType
        # is priority/basic, as in Slurm 22.05).
        f"SchedulerParameters=requeue_delay={LOCAL_REQUEUE_DELAY}",
        "SlurmctldParameters=enable_expedited_requeue",
        "PriorityType=priority/multifactor",
        "SelectType=select/cons_tres",
        "GresTypes=gpu",
        "SlurmdTimeout=15",
        *(["SlurmctldTimeout=10"] if shape.backup_controllers else []),
        "KillWait=5",
        "MinJobAge=300",
        "ReturnToService=1",
        # Every TCP link is TLS; daemons prove who they are with certificates (cluster.certs).
        "TLSType=tls/muster",
    ]
    overrides = dict(overrides or {})
    given = overrides.get("SchedulerParameters")
    if given is not None and not requeuedelay.stated(given):  # keeps the local delay
        overrides["SchedulerParameters"] = ",".join(
            x for x in (given, f"requeue_delay={LOCAL_REQUEUE_DELAY}") if x.strip()
        )
    for i, line in enumerate(lines):
        key = line.split("=", 1)[0]
        if key in overrides:
            lines[i] = f"{key}={overrides.pop(key)}"
    lines += [f"{k}={v}" for k, v in overrides.items()] + [""]
    for i in range(1, shape.nodes + 1):
        addr = node_addr(i) if per_node_addr else "127.0.0.1"
        port = _free_port(addr)
        lines.append(
            f"NodeName=node{i} NodeAddr={addr} Port={port} CPUs={shape.cpus_per_node} "
            f"RealMemory={shape.mem_per_node}{gres} State=UNKNOWN"
        )
    lines += ["", "PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP", ""]
    return "\n".join(lines)


class LocalCluster:
    def __init__(self, state_dir: str) -> None:
        self.state_dir = os.path.abspath(state_dir)
        self.conf_path = os.path.join(self.state_dir, "muster.conf")

    # --- paths ---------------------------------------------------------------------

    def _pidfile(self, name: str) -> str:
        return os.path.join(self.state_dir, "run", f"{name}.pid")

    def _logfile(self, name: str) -> str:
        return os.path.join(self.state_dir, "log", f"{name}.log")

    def config(self) -> Config:
        with open(self.conf_path) as f:
            return parse_config(f.read(), self.conf_path)

    @property
    def exists(self) -> bool:
        return os.path.exists(self.conf_path)

    # --- creating ------------------------------------------------------------------

    def create(self, shape: ClusterShape, overrides: dict[str, str] | None = None, topology: str | None = None) -> None:
        """Write the config (and ``topology``, topology.conf text, beside it: the config
        then names its TopologyPlugin); a bad topology raises ConfigError, writing nothing."""
        for sub in ("", "ctld", "log", "run", "nodes"):
            os.makedirs(os.path.join(self.state_dir, sub), exist_ok=True)
        # Jobs of ordinary users must reach the agents' credential sockets.
        os.chmod(os.path.join(self.state_dir, "run"), 0o755)
        os.chmod(os.path.join(self.state_dir, "log"), 0o700)  # the daemons' logs name users' jobs
        key_path = os.path.join(self.state_dir, "muster.key")
        if not os.path.exists(key_path):
            generate_key(key_path)
        topo_path = topology_path(self.conf_path)
        if topology is not None:
            names = [f"node{i}" for i in range(1, shape.nodes + 1)]
            plugin = parse_topology(topology, topo_path, names).plugin
            overrides = {**(overrides or {}), "TopologyPlugin": plugin}
        jwt_key = os.path.join(self.state_dir, "jwt_hs256.key")
        if not os.path.exists(jwt_key):
            generate_jwt_key(jwt_key)
        confine = not {"ProctrackType", "TaskPlugin"} & set(overrides or {}) and cgroups_usable()
        if confine:  # jobs confined wherever the machine allows it (docs/containment.md)
            overrides = {"ProctrackType": "proctrack/cgroup", "TaskPlugin": "task/cgroup", **(overrides or {})}
        text = render_config(self.state_dir, shape, overrides)
        config = parse_config(text, self.conf_path)  # extra settings that break it: ConfigError, no file
        if topology is not None:
            attach_topology(config, topology, topo_path)
            with open(topo_path, "w") as f:
                f.write(topology)
        if config.tls.enabled:
            from muster.cluster.certs import issue_all

            # a host certificate per agent process hosting several nodes (agent.host)
            per = max(1, shape.nodes_per_agent)
            names = [n.name for n in config.nodes]
            hosts = [compress(names[k : k + per]) for k in range(0, len(names), per)] if per > 1 else []
            issue_all(config, hosts)
        with open(os.path.join(self.state_dir, "agents.json"), "w") as f:
            json.dump({"nodes_per_agent": max(1, shape.nodes_per_agent)}, f)
        with open(self.conf_path, "w") as f:
            f.write(text)
        cgroup_conf = os.path.join(os.path.dirname(self.conf_path), "cgroup.conf")
        if confine and not os.path.exists(cgroup_conf):
            with open(cgroup_conf, "w") as f:
                f.write("# written by `muster up`: --mem is enforced (docs/containment.md)\nConstrainRAMSpace=yes\n")

    @property
    def nodes_per_agent(self) -> int:
        try:
            with open(os.path.join(self.state_dir, "agents.json")) as f:
                return max(1, int(json.load(f)["nodes_per_agent"]))
        except (OSError, ValueError, KeyError, TypeError):
            return 1

    def agents(self, cfg: Config | None = None) -> dict[str, list[str]]:
        """Agent process name -> the nodes it hosts, in config order (a node's own name
        when each node has its own agent)."""
        names = [n.name for n in (cfg or self.config()).nodes]
        per = self.nodes_per_agent
        if per == 1:
            return {name: [name] for name in names}
        return {f"agent{k // per + 1}": names[k : k + per] for k in range(0, len(names), per)}

    def node_pid(self, node: str) -> int | None:
        """The pid of the agent process hosting ``node``, if it runs."""
        for agent, nodes in self.agents().items():
            if node in nodes:
                return self._alive(agent)
        return None

    # --- processes -----------------------------------------------------------------

    def _alive(self, name: str, check_cmdline: bool = True) -> int | None:
        """The pid of daemon ``name`` if it runs, checked against its command line so that a
        recycled pid is never mistaken for ours. Right after a spawn the child may not have
        exec'd yet (its command line is still ours): pass ``check_cmdline=False`` then."""
        try:
            with open(self._pidfile(name)) as f:
                pid = int(f.read().strip())
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            return None
        if check_cmdline and (self.conf_path not in cmdline or "muster" not in cmdline):
            return None
        # A zombie is not alive.
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return None
        except OSError:
            return None
        return pid

    def _spawn(self, name: str, argv: list[str]) -> int:
        # 0600 whatever the umask, as the daemon itself creates it (``protocol.logjson``)
        log = os.fdopen(os.open(self._logfile(name), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab")
        env = dict(os.environ, MUSTER_CONF=self.conf_path)
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, env=env)
        log.close()
        with open(self._pidfile(name), "w") as f:
            f.write(f"{proc.pid}\n")
        return proc.pid

    def controllers(self, cfg: Config | None = None) -> list[str]:
        """The controllers' process names: the primary, then each backup."""
        n = len((cfg or self.config()).ctld_addrs)
        return ["musterctld"] + [f"musterctld-backup{i}" for i in range(1, n)]

    def _controller_alive(self) -> int | None:
        return next((p for name in self.controllers() if (p := self._alive(name, check_cmdline=False))), None)

    def start(self) -> list[str]:
        """Start whichever daemons are not running; return the names started."""
        cfg = self.config()
        started = []
        for index, name in enumerate(self.controllers(cfg)):
            if self._alive(name) is not None:
                continue
            if index == 1 and "musterctld" in started:
                self._wait_active(30.0)  # the primary is active first, as in Slurm
            self._spawn(
                name,
                [
                    sys.executable,
                    "-m",
                    "muster.ctld.main",
                    "--conf",
                    self.conf_path,
                    "--index",
                    str(index),
                    "--log-file",
                    self._logfile(name),
                ],
            )
            started.append(name)
        for agent, nodes in self.agents(cfg).items():
            if self._alive(agent) is None:
                for node in nodes:
                    os.makedirs(os.path.join(self.state_dir, "nodes", node), exist_ok=True)
                state_dir = os.path.join(self.state_dir, "nodes", nodes[0] if len(nodes) == 1 else "%n")
                self._spawn(
                    agent,
                    [
                        sys.executable,
                        "-m",
                        "muster.agent.main",
                        "--conf",
                        self.conf_path,
                        "--node",
                        compress(nodes),
                        "--state-dir",
                        state_dir,
                        "--log-file",
                        self._logfile(agent),
                    ],
                )
                started.append(agent)
        return started

    def agents_up(self, started: list[str], timeout: float = 30.0) -> list[str]:
        """Wait until each agent among ``started`` holds its nodes (it writes its pid into
        each node's ``musterd.pid`` once it has the node's lock) or has exited. Returns a
        line per agent that did not come up: why (its log's last line) and where its log
        is. An agent that exits at once (another musterd holds its node's lock, a bad
        setting) is never reported as started."""
        agents = self.agents()
        waiting = [name for name in started if name in agents]
        failed: dict[str, str] = {}
        deadline = time.monotonic() + timeout
        while waiting:
            for name in list(waiting):
                pid = self._alive(name, check_cmdline=False)
                if pid is None:
                    failed[name] = f"exited at once: {self._last_log_line(name)}"
                    waiting.remove(name)
                elif all(self._node_pid(node) == pid for node in agents[name]):
                    waiting.remove(name)
            if waiting and time.monotonic() > deadline:
                for name in waiting:
                    failed[name] = f"did not take its nodes within {timeout:.0f}s: {self._last_log_line(name)}"
                break
            if waiting:
                time.sleep(0.05)
        return [
            f"agent {name} ({compress(agents[name])}) {why} (log: {self._logfile(name)})"
            for name, why in failed.items()
        ]

    def _node_pid(self, node: str) -> int | None:
        try:
            with open(os.path.join(self.state_dir, "nodes", node, "musterd.pid")) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def _last_log_line(self, name: str) -> str:
        """The last line of daemon ``name``'s log (the message of a JSON line), or a note."""
        try:
            with open(self._logfile(name), "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - 8192))
                lines = [x for x in f.read().decode(errors="replace").splitlines() if x.strip()]
        except OSError:
            return "no log"
        if not lines:
            return "nothing logged"
        last = lines[-1].strip()
        try:
            record = json.loads(last)
        except ValueError:
            return last
        return str(record.get("msg") or record.get("message") or last) if isinstance(record, dict) else last

    def start_rest(self, host: str, port: int, timeout: float = 30.0) -> str:
        """Start musterrestd (JWT auth) on ``host:port`` unless it runs; return its URL."""
        if self._alive("musterrestd") is None:
            self._spawn(
                "musterrestd",
                [
                    sys.executable,
                    "-m",
                    "muster.rest.main",
                    "-f",
                    self.conf_path,
                    "-a",
                    "rest_auth/jwt",
                    f"{host}:{port}",
                ],
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._alive("musterrestd", check_cmdline=False) is None:
                raise RuntimeError(f"musterrestd exited; see {self._logfile('musterrestd')}")
            try:
                with socket.create_connection((host, port), timeout=1):
                    return f"http://{host}:{port}"
            except OSError:
                time.sleep(0.1)
        raise TimeoutError(f"musterrestd not listening on {host}:{port} after {timeout:.0f}s")

    def api(self, method: str, path: str, body: Any = None, timeout: float = 5.0) -> Any:
        """One request to the active controller (the first that is not in standby)."""
        cfg = self.config()
        last: Exception = client.ConnectError("no controller")
        for index in range(len(cfg.ctld_addrs)):
            try:
                return client.request(method, path, body, unix_path=cfg.ctld_socket_for(index), timeout=timeout)
            except client.ApiError as e:
                if e.code != "standby":
                    raise
                last = e
            except client.ConnectError as e:
                last = e
        raise last

    def controller_modes(self) -> list[str]:
        """Each controller's mode: "active", "standby" or "stopped"."""
        cfg = self.config()
        modes = []
        for index, name in enumerate(self.controllers(cfg)):
            mode = "stopped"
            if self._alive(name) is not None:
                try:
                    answer = client.request("GET", "/v1/ping", unix_path=cfg.ctld_socket_for(index), timeout=2.0)
                    mode = "standby" if (answer or {}).get("mode") == "standby" else "active"
                except (client.ConnectError, client.ApiError, OSError):
                    mode = "starting"
            modes.append(mode)
        return modes

    def _wait_active(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and "active" not in self.controller_modes():
            time.sleep(0.1)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until every configured node has registered and is IDLE or in use."""
        deadline = time.monotonic() + timeout
        last = "controller not answering"
        while time.monotonic() < deadline:
            if self._controller_alive() is None:
                raise RuntimeError(f"musterctld exited; see {self._logfile('musterctld')}")
            try:
                # three values per node (ctld.columns): at thousands of nodes, polling the
                # whole view would itself keep the controller busy while nodes register
                rows = self.api("GET", "/v1/nodes?fields=name,registered,state")["rows"]
                waiting = [name for name, registered, state in rows if not registered or state in ("UNKNOWN", "DOWN")]
                if not waiting:
                    return
                last = f"waiting for nodes: {compress(waiting)}"
            except (client.ConnectError, client.ApiError, OSError) as e:
                last = str(e)
            time.sleep(0.1)
        raise TimeoutError(f"local cluster not ready after {timeout:.0f}s: {last}")

    def stop(self, timeout: float = 10.0) -> list[str]:
        """Stop exactly this cluster's daemons, then any job processes they left behind."""
        stopped = []
        names = ["musterrestd", *self.controllers(), *self.agents()]
        pids = {name: pid for name in names if (pid := self._alive(name)) is not None}
        for name, pid in pids.items():
            try:
                os.kill(pid, signal.SIGTERM)
                stopped.append(name)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(self._alive(n) for n in pids):
            time.sleep(0.05)
        for name in pids:
            pid = self._alive(name)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
        for name in pids:
            try:
                os.unlink(self._pidfile(name))
            except FileNotFoundError:
                pass
        self._kill_job_processes()
        self._remove_cgroups()
        return stopped

    def _remove_cgroups(self) -> None:
        """The cgroups of this cluster's nodes (``muster/<node>_<instance>``, see
        docs/containment.md): what still runs in them is killed, then they are removed."""
        nodes_dir = os.path.join(self.state_dir, "nodes")
        try:
            names = os.listdir(nodes_dir)
        except OSError:
            return
        for node in names:
            try:
                with open(os.path.join(nodes_dir, node, "instance")) as f:
                    instance = f.read().strip()
            except OSError:
                continue
            if instance:
                remove_cgroup_tree(f"muster/{node}_{instance}")

    def _kill_job_processes(self) -> None:
        """Job processes carry SLURM_CONF=<this cluster's config> in their environment; any
        daemon of this cluster still alive (one whose pid file was lost, or a job's monitor,
        a fork of its agent) has ``--conf <this config>`` on its command line."""
        marker = f"SLURM_CONF={self.conf_path}".encode()
        ours = b"--conf\0" + self.conf_path.encode() + b"\0"
        me = os.getpid()
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == me:
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    env = f.read().split(b"\0")
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            if marker in env or (ours in cmdline and b"muster" in cmdline):
                try:
                    os.kill(int(entry), signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def status(self) -> list[Daemon]:
        cfg = self.config()
        nodes: dict[str, dict[str, Any]] = {}
        ctld_pid = self._controller_alive()
        if ctld_pid is not None:
            try:
                nodes = {n["name"]: n for n in self.api("GET", "/v1/nodes")["nodes"]}
            except (client.ConnectError, client.ApiError, OSError):
                nodes = {}
        names = self.controllers(cfg)
        modes = self.controller_modes() if len(names) > 1 else []
        out = []
        for index, name in enumerate(names):
            pid = self._alive(name)
            out.append(
                Daemon(
                    "controller",
                    name,
                    pid,
                    f"{cfg.ctld_addrs[index][1]}:{cfg.ctld_port}",
                    pid is not None,
                    (modes[index] if modes else "up") if pid is not None else "stopped",
                )
            )
        pids = {node: self._alive(agent) for agent, hosted in self.agents(cfg).items() for node in hosted}
        for node in cfg.nodes:
            pid = pids.get(node.name)
            n = nodes.get(node.name)
            if n is None:
                state = "unknown (controller unreachable)" if ctld_pid is None else "unknown"
            else:
                state = n["state"] + ("+DRAIN" if n["drain"] else "")
            out.append(
                Daemon(
                    "node",
                    node.name,
                    pid,
                    f"{node.addr}:{node.port}",
                    pid is not None,
                    state if pid is not None else "stopped",
                )
            )
        return out

    def status_json(self) -> str:
        return json.dumps([asdict(d) for d in self.status()], indent=2)
