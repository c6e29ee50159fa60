"""A muster cluster on separate network namespaces: a rehearsal of docs/deploy.md on one
machine (tests/e2e/test_netns.py).

Every machine of the cluster (``head`` and ``node1``..``nodeN``) is a network namespace
with one link, ``eth0``, a veth whose other end is a port of a bridge in the test's own
namespace; the bridge has no address, so the test reaches no daemon over the network and
the daemons reach each other only over those links (10.77.0.1 for the head node,
10.77.0.11 and on for the nodes, 10.77.0.5 for the login node that ``login=True`` adds).
Each daemon also runs in its own UTS and mount namespaces
(``muster.agent.nodeident.enter``): ``hostname`` is the machine's, /etc/hosts names every
machine, and the machine's own directories are bind-mounted over
``/etc/muster`` (config, key, certificates) and ``/var/spool/muster`` (state), the paths
docs/deploy.md uses. The work directory is shared, as a cluster's NFS home is.

Unplugging a node is ``ip link set <its bridge port> down``. Everything (processes in the
namespaces, namespaces, links, bridge, files) is removed by ``teardown``, which the
fixture calls even when a test fails.

Run as a script, this module is the way into a machine:
``python tests/netns.py NETNS HOSTNAME HOSTS_FILE SRC:DST... -- ARGV`` enters the network
namespace, then new UTS and mount namespaces with that host name, binds each SRC over DST,
and executes ARGV.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

_CLONE_NEWNET = 0x40000000
_MS_BIND = 4096
SUBNET = "10.77.0"
HEAD_ADDR = f"{SUBNET}.1"
LOGIN_ADDR = f"{SUBNET}.5"
PREFIX = "mu"  # namespaces mu<pid hex>-<machine>, bridge mu<pid hex>br
MOUNTS = ("/etc/muster", "/var/spool/muster")  # the paths docs/deploy.md uses, one per machine


def node_addr(k: int) -> str:
    return f"{SUBNET}.{10 + k}"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and out.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {out.stderr.strip()}")
    return out


def unavailable() -> str | None:
    """Why network namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add, veth links, a bridge)"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    probe = f"mprobe{os.getpid() % 100000}"
    try:
        made = _ip("netns", "add", probe, check=False)
        if made.returncode != 0:
            return f"ip netns add failed: {made.stderr.strip()}"
        link = _ip("link", "add", f"{probe}a", "type", "veth", "peer", "name", f"{probe}b", check=False)
        if link.returncode != 0:
            return f"cannot create veth links: {link.stderr.strip()}"
        _ip("link", "del", f"{probe}a", check=False)
        bridge = _ip("link", "add", f"{probe}br", "type", "bridge", check=False)
        if bridge.returncode != 0:
            return f"cannot create a bridge: {bridge.stderr.strip()}"
        _ip("link", "del", f"{probe}br", check=False)
    finally:
        _ip("netns", "del", probe, check=False)
    from muster.agent.nodeident import NodeIdentity, _probe

    why = _probe(NodeIdentity(hostname="muster-probe", hosts_file="/etc/hosts"))
    return f"cannot make UTS and mount namespaces: {why}" if why else None


def _tags_in_use() -> dict[str, list[str]]:
    """Tag -> its namespaces, for every run's namespaces that exist."""
    try:
        names = os.listdir("/run/netns")
    except OSError:
        return {}
    tags: dict[str, list[str]] = {}
    for name in names:
        tag, sep, _machine = name.partition("-")
        if sep and tag.startswith(PREFIX) and all(c in "0123456789abcdef" for c in tag[len(PREFIX) :]):
            tags.setdefault(tag, []).append(name)
    return tags


def remove_stale() -> None:
    """Remove what runs whose test process died (kill -9) left behind: their processes,
    namespaces and bridges."""
    for tag, names in _tags_in_use().items():
        pid = int(tag[len(PREFIX) :], 16)
        if os.path.exists(f"/proc/{pid}"):
            continue
        inodes = {os.stat(f"/run/netns/{name}").st_ino for name in names}
        for entry in filter(str.isdigit, os.listdir("/proc")):
            try:
                if os.stat(f"/proc/{entry}/ns/net").st_ino in inodes:
                    os.kill(int(entry), signal.SIGKILL)
            except OSError:
                pass
        for name in names:
            _ip("netns", "del", name, check=False)
        _ip("link", "del", f"{tag}br", check=False)


class NetnsCluster:
    """A head node and ``nodes`` compute nodes, each a network namespace (module docstring)."""

    def __init__(
        self, nodes: int, settings: dict[str, str] | None = None, node_line: str = "", login: bool = False
    ) -> None:
        self.tag = f"{PREFIX}{os.getpid():x}"  # the test process's pid: unique, and short enough for interface names
        self.root = tempfile.mkdtemp(prefix="muster-netns-")
        os.chmod(self.root, 0o755)
        self.workdir = os.path.join(self.root, "work")  # the shared file system
        os.makedirs(self.workdir)
        os.chmod(self.workdir, 0o1777)
        self.nodes = [f"node{k}" for k in range(1, nodes + 1)]
        # ``login``: a login node too (docs/deploy.md, "Login nodes"): the commands, the
        # configuration and the CA certificate, no agent and no muster key
        self.logins = ["login"] if login else []
        self.machines = ["head", *self.nodes, *self.logins]
        self.addr = {"head": HEAD_ADDR, **{n: node_addr(k) for k, n in enumerate(self.nodes, 1)}}
        self.addr.update({"login": LOGIN_ADDR} if login else {})
        self.settings = settings or {}
        self.node_line = node_line or "CPUs=4 RealMemory=8000 Gres=gpu:2"
        self.bridge = f"{self.tag}br"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._made_mountpoints: list[str] = []
        self._netns: list[str] = []

    # --- paths ----------------------------------------------------------------------

    def netns(self, machine: str) -> str:
        return f"{self.tag}-{machine}"

    def port(self, machine: str) -> str:
        """The bridge's end of ``machine``'s link: setting it down unplugs the machine."""
        return f"{self.tag}{machine[0]}{machine[4:] if machine != 'head' else ''}"

    def etc(self, machine: str) -> str:
        return os.path.join(self.root, machine, "etc")

    def spool(self, machine: str) -> str:
        return os.path.join(self.root, machine, "spool")

    @property
    def ctld_socket(self) -> str:
        """The controller's Unix socket as the test sees it (the head's spool)."""
        return os.path.join(self.spool("head"), "ctld", "musterctld.sock")

    def log(self, name: str) -> str:
        return os.path.join(self.root, "log", f"{name}.log")

    # --- building -------------------------------------------------------------------

    def config_text(self) -> str:
        last = len(self.nodes)
        lines = [
            "ClusterName=lab",
            f"SlurmctldHost=head({HEAD_ADDR})",
            "SlurmctldPort=6817",
            "SlurmdPort=6818",
            "StateSaveLocation=/var/spool/muster/ctld",
            "SlurmdSpoolDir=/var/spool/muster/%n",
            "AgentSocketDir=/var/spool/muster/run",
            "AuthKeyFile=/etc/muster/muster.key",
            "SlurmdTimeout=300",
            "ReturnToService=1",
            "TLSType=tls/muster",
            "GresTypes=gpu",
        ]
        for key, value in self.settings.items():
            lines = [line for line in lines if not line.startswith(key + "=")] + [f"{key}={value}"]
        lines += [
            f"NodeName=node[1-{last}] NodeAddr={SUBNET}.[11-{10 + last}] {self.node_line} State=UNKNOWN",
            "PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        ]
        return "\n".join(lines) + "\n"

    def create(self) -> None:
        """The network, then each machine's files as docs/deploy.md lays them out."""
        remove_stale()
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("link", "set", self.bridge, "up")
        for machine in self.machines:
            ns = self.netns(machine)
            _ip("netns", "add", ns)
            self._netns.append(ns)
            _ip("link", "add", self.port(machine), "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", self.port(machine), "master", self.bridge, "up")
            _ip("-n", ns, "addr", "add", f"{self.addr[machine]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        for path in MOUNTS:
            if not os.path.isdir(path):  # mount points for the binds; removed at teardown
                os.makedirs(path)
                self._made_mountpoints.append(path)
        os.makedirs(os.path.join(self.root, "log"))
        with open("/etc/hosts") as f:
            machine_hosts = f.read().rstrip("\n")
        hosts = "\n".join([machine_hosts, *(f"{self.addr[m]}\t{m}" for m in self.machines)]) + "\n"
        conf = self.config_text()
        for machine in self.machines:
            os.makedirs(self.etc(machine), mode=0o755)
            os.makedirs(self.spool(machine), mode=0o755)
            with open(os.path.join(self.root, machine, "hosts"), "w") as f:
                f.write(hosts)
            with open(os.path.join(self.etc(machine), "muster.conf"), "w") as f:
                f.write(conf)  # the same file everywhere
        # docs/deploy.md, step 3: keygen on the host that keeps the CA, then copy.
        out = self.run("head", ["muster", "keygen", "--conf", "/etc/muster/muster.conf"])
        if out.returncode != 0:
            raise RuntimeError(f"muster keygen: {out.stderr}")
        head_etc = self.etc("head")
        for node in self.nodes:
            os.makedirs(os.path.join(self.etc(node), "tls"), mode=0o755)
            for name in (
                "muster.key",
                "tls/ca_cert.pem",
                f"tls/slurmd_{node}_cert.pem",
                f"tls/slurmd_{node}_cert_key.pem",
            ):
                shutil.copy2(os.path.join(head_etc, name), os.path.join(self.etc(node), name))  # modes kept
        for login in self.logins:
            os.makedirs(os.path.join(self.etc(login), "tls"), mode=0o755)
            shutil.copy2(os.path.join(head_etc, "tls/ca_cert.pem"), os.path.join(self.etc(login), "tls/ca_cert.pem"))

    # --- processes ------------------------------------------------------------------

    def _enter(self, machine: str) -> list[str]:
        binds = [
            f"{os.path.join(self.root, machine, d)}:{path}" for d, path in zip(("etc", "spool"), MOUNTS, strict=True)
        ]
        hosts = os.path.join(self.root, machine, "hosts")
        return [sys.executable, os.path.abspath(__file__), self.netns(machine), machine, hosts, *binds, "--"]

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SQUEUE_", "SINFO_"))}
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        env["MUSTER_CONF"] = "/etc/muster/muster.conf"
        return env

    def run(
        self, machine: str, argv: list[str], *, env: dict[str, str] | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run a command on ``machine`` (as a user logged in there would)."""
        return subprocess.run(
            [*self._enter(machine), *argv],
            cwd=self.workdir,
            env={**self.env(), **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def _spawn(self, name: str, machine: str, argv: list[str]) -> None:
        with open(self.log(name), "ab") as log:
            self.procs[name] = subprocess.Popen(
                [*self._enter(machine), *argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                env=self.env(),
                cwd="/",
            )

    def start(self) -> None:
        """The services of docs/deploy.md, step 6 (their ExecStart lines)."""
        self._spawn("musterctld", "head", ["musterctld", "--conf", "/etc/muster/muster.conf"])
        for node in self.nodes:
            self.start_agent(node)

    def start_agent(self, node: str) -> None:
        # No --node: musterd takes its node from the host name, as on a real machine.
        self._spawn(f"musterd-{node}", node, ["musterd", "--conf", "/etc/muster/muster.conf"])

    def api(self, method: str, path: str, body: Any = None) -> Any:
        from muster.protocol import client

        return client.request(method, path, body, unix_path=self.ctld_socket, timeout=10.0)

    def node_states(self) -> dict[str, dict[str, Any]]:
        return {n["name"]: n for n in self.api("GET", "/v1/nodes")["nodes"]}

    def wait_ready(self, timeout: float = 90) -> None:
        from muster.protocol import client

        deadline = time.monotonic() + timeout
        last = "the controller does not answer"
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited ({proc.returncode}): {self.read_log(name)[-2000:]}")
            try:
                nodes = self.node_states()
                waiting = [n for n, v in nodes.items() if not v["registered"] or v["state"] in ("UNKNOWN", "DOWN")]
                if not waiting:
                    return
                last = f"waiting for {waiting}"
            except (client.ConnectError, client.ApiError, OSError) as exc:
                last = str(exc)
            time.sleep(0.2)
        raise TimeoutError(f"the cluster is not ready after {timeout:.0f} s: {last}")

    def read_log(self, name: str) -> str:
        try:
            with open(self.log(name), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def unplug(self, machine: str) -> None:
        _ip("link", "set", self.port(machine), "down")

    def plug(self, machine: str) -> None:
        _ip("link", "set", self.port(machine), "up")

    def job_pids(self, machine: str, job_id: int) -> list[int]:
        """Processes of job ``job_id`` running on ``machine``."""
        inode = os.stat(f"/run/netns/{self.netns(machine)}").st_ino
        found = []
        for pid in self._pids_in_namespaces():
            try:
                if os.stat(f"/proc/{pid}/ns/net").st_ino != inode:
                    continue
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if f"SLURM_JOB_ID={job_id}".encode() in f.read().split(b"\0"):
                        found.append(pid)
            except OSError:
                pass
        return found

    # --- teardown -------------------------------------------------------------------

    def _pids_in_namespaces(self) -> list[int]:
        inodes = set()
        for ns in self._netns:
            try:
                inodes.add(os.stat(f"/run/netns/{ns}").st_ino)
            except OSError:
                pass
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.stat(f"/proc/{entry}/ns/net").st_ino in inodes:
                        pids.append(int(entry))
                except OSError:
                    pass
        return pids

    def teardown(self) -> None:
        """Stop every process started in the namespaces, remove the network and the files."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        for _ in range(50):  # jobs' processes: whatever still runs in one of our namespaces
            pids = self._pids_in_namespaces()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        for ns in self._netns:
            _ip("netns", "del", ns, check=False)  # its eth0 goes, and the bridge's end with it
        _ip("link", "del", self.bridge, check=False)
        if not _tags_in_use():  # another run's binds would be detached by removing them
            for path in self._made_mountpoints:
                try:
                    os.rmdir(path)
                except OSError:
                    pass
        if not os.environ.get("MUSTER_KEEP_TEST_STATE"):
            shutil.rmtree(self.root, ignore_errors=True)


def _enter_and_exec(argv: list[str]) -> None:
    """This module as a script: see the module docstring."""
    split = argv.index("--")
    netns, hostname, hosts, *binds = argv[:split]
    command = argv[split + 1 :]
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), f"setns {netns}")
    os.close(fd)
    from muster.agent.nodeident import NodeIdentity, enter

    enter(NodeIdentity(hostname=hostname, hosts_file=hosts))  # UTS + mount namespaces, /etc/hosts
    for bind in binds:
        src, dst = bind.split(":", 1)
        if libc.mount(src.encode(), dst.encode(), None, _MS_BIND, None) != 0:
            raise OSError(ctypes.get_errno(), f"bind {src} over {dst}")
    os.execvp(command[0], command)


if __name__ == "__main__":
    _enter_and_exec(sys.argv[1:])
