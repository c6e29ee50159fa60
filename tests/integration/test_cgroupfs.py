"""A node's job cgroups on the real file systems (``agent.cgroupfs``), v1 and v2: limits
written, a process joined before it forks, a setsid daemon with an empty environment found
and killed through the cgroup, the freezer, removal. Needs root (skipped otherwise); the v2
memory test runs only where the memory controller is delegated to the v2 hierarchy."""

from __future__ import annotations

import errno
import os
import signal
import stat
import sys
import tempfile
import time
from collections.abc import Iterator

import pytest

from muster.agent import cgroups
from muster.agent.cgroupfs import CgroupUnusable, NodeCgroups, detect_version, gpu_devices
from muster.agent.cgroups import CgroupConf
from waiting import wait_for

pytestmark = pytest.mark.integration

MOUNT = "/sys/fs/cgroup"


def _writable(path: str) -> bool:
    probe = os.path.join(path, f"muster-probe-{os.getpid()}")
    try:
        os.mkdir(probe)
        os.rmdir(probe)
    except OSError:
        return False
    return True


V1 = os.geteuid() == 0 and all(_writable(os.path.join(MOUNT, c)) for c in ("freezer", "memory", "cpuset"))
V2_ROOT = next((p for p in (MOUNT, os.path.join(MOUNT, "unified")) if os.path.exists(f"{p}/cgroup.controllers")), None)
V2 = os.geteuid() == 0 and V2_ROOT is not None and _writable(V2_ROOT)


def _v2_controllers() -> list[str]:
    assert V2_ROOT is not None
    with open(os.path.join(V2_ROOT, "cgroup.controllers")) as f:
        return f.read().split()


@pytest.fixture
def node() -> Iterator[str]:
    name = f"cgtest{os.getpid()}_{time.monotonic_ns() % 10**6}"
    yield name
    for root in [os.path.join(MOUNT, c) for c in ("freezer", "memory", "cpuset", "devices")] + [V2_ROOT or ""]:
        base = os.path.join(root, cgroups.node_rel(name))
        for dirpath, _d, _f in sorted(os.walk(base), key=lambda w: -len(w[0])) if os.path.isdir(base) else []:
            os.rmdir(dirpath)  # fails the test's teardown loudly if something was left running


def _start(procs: tuple[str, ...], pidfile: str) -> int:
    """A child that joins ``procs`` and leaves a setsid daemon with an empty environment
    (its pid in ``pidfile``), then waits."""
    pid = os.fork()
    if pid == 0:
        try:
            for path in procs:
                with open(path, "w") as f:
                    f.write("0")
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    with open(pidfile + ".tmp", "w") as f:
                        f.write(str(os.getpid()))
                    os.rename(pidfile + ".tmp", pidfile)
                    os.execve("/bin/sleep", ["sleep", "600"], {})
                os._exit(0)
            os.execv("/bin/sleep", ["sleep", "600"])
        finally:
            os._exit(1)
    wait_for(lambda: os.path.exists(pidfile), timeout=10, interval=0.01, what="the daemon to start")
    return pid


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not V1, reason="needs root and writable cgroup v1 freezer, memory and cpuset hierarchies")
def test_v1_limits_tracking_freezer_kill_and_removal(node: str, tmp_path: os.PathLike[str]) -> None:
    conf = CgroupConf(plugin="cgroup/v1", constrain_ram=True, constrain_cores=True)
    cg = NodeCgroups.probe(conf, node)
    assert cg.version == "v1" and sorted(cg.roots) == ["cpuset", "freezer", "memory"]
    cpu = sorted(os.sched_getaffinity(0))[0]
    procs = cg.create_job(5, cgroups.job_limits(conf, 50, [cpu], [], {}))
    job_mem = os.path.join(MOUNT, "memory", cgroups.job_rel(node, 5))
    with open(os.path.join(job_mem, "memory.limit_in_bytes")) as f:
        assert int(f.read()) == 50 * 2**20
    with open(os.path.join(MOUNT, "cpuset", cgroups.job_rel(node, 5), "cpuset.cpus")) as f:
        assert f.read().strip() == str(cpu)
    pidfile = os.path.join(tmp_path, "daemon.pid")
    child = _start(procs, pidfile)
    with open(pidfile) as f:
        daemon = int(f.read())
    try:
        assert {child, daemon} <= cg.pids(5)  # the daemon left the session and the environment
        assert os.sched_getaffinity(daemon) == {cpu}
        cg.freeze(5, True)
        with open(os.path.join(cg.job_dir(5), "freezer.state")) as f:
            assert f.read().strip() in ("FREEZING", "FROZEN")
        cg.freeze(5, False)
        assert cg.kill_all(5)
        os.waitpid(child, 0)
        assert _gone(daemon) and cg.pids(5) == set()
        assert cg.oom_kills(5) == {} and cg.peak_bytes(5) is not None
        assert cg.remove_job(5) and not os.path.exists(job_mem)
    finally:
        for pid in (child, daemon):
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
    cg.remove_node()
    assert not os.path.exists(os.path.join(MOUNT, "freezer", cgroups.node_rel(node)))


@pytest.mark.skipif(not V1, reason="needs root and a writable cgroup v1 memory hierarchy")
def test_v1_swap_is_limited_only_with_constrain_swap_space(node: str) -> None:
    if not os.path.exists(os.path.join(MOUNT, "memory", "memory.memsw.limit_in_bytes")):
        pytest.skip("the kernel does not account swap (swapaccount=0)")
    conf = CgroupConf(plugin="cgroup/v1", constrain_ram=True, constrain_swap=True, allowed_swap=50)
    cg = NodeCgroups.probe(conf, node)
    cg.create_job(10, cgroups.job_limits(conf, 64, None, [], {}))
    cg.create_job(11, cgroups.job_limits(CgroupConf(constrain_ram=True), 64, None, [], {}))
    limits = {}
    for job in (10, 11):
        with open(os.path.join(cg.job_dir(job, "memory"), "memory.memsw.limit_in_bytes")) as f:
            limits[job] = int(f.read())
    assert limits[10] == 96 * 2**20  # RAM + 50% of it in swap
    assert limits[11] > 2**60  # not constrained: the kernel's unlimited
    assert cg.remove_job(10) and cg.remove_job(11)
    cg.remove_node()


@pytest.mark.skipif(not V1, reason="needs root and a writable cgroup v1 memory hierarchy")
def test_v1_oom_kill_is_counted(node: str) -> None:
    conf = CgroupConf(plugin="cgroup/v1", constrain_ram=True)
    cg = NodeCgroups.probe(conf, node)
    procs = cg.create_job(6, cgroups.job_limits(conf, 32, None, [], {}))
    pid = os.fork()
    if pid == 0:
        try:
            for path in procs:
                with open(path, "w") as f:
                    f.write("0")
            os.execv(sys.executable, [sys.executable, "-c", "b = bytearray(256 * 2**20); b[::4096] = b'x' * 65536"])
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert cg.oom_kills(6) == {"batch": 1}
    assert cg.peak_bytes(6) == 32 * 2**20  # it reached its limit
    assert cg.kill_all(6) and cg.remove_job(6)
    cg.remove_node()


@pytest.mark.skipif(not V2, reason="needs root and a writable cgroup v2 hierarchy")
def test_v2_tracking_kills_the_daemon_with_cgroup_kill(node: str, tmp_path: os.PathLike[str]) -> None:
    conf = CgroupConf(plugin="cgroup/v2")
    cg = NodeCgroups.probe(conf, node)
    assert cg.version == "v2" and cg.roots == {"": V2_ROOT}
    procs = cg.create_job(7, cgroups.job_limits(conf, 64, None, [], {}))
    pidfile = os.path.join(tmp_path, "daemon.pid")
    child = _start(procs, pidfile)
    with open(pidfile) as f:
        daemon = int(f.read())
    try:
        assert {child, daemon} <= cg.pids(7)
        cg.freeze(7, True)
        cg.freeze(7, False)
        assert cg.kill_all(7)
        os.waitpid(child, 0)
        assert _gone(daemon)
        assert cg.remove_job(7)
    finally:
        for pid in (child, daemon):
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
    cg.remove_node()


@pytest.mark.skipif(not V2, reason="needs root and a writable cgroup v2 hierarchy")
def test_v2_memory_limit_or_the_reason_it_cannot_be_kept(node: str) -> None:
    conf = CgroupConf(plugin="cgroup/v2", constrain_ram=True)
    if "memory" not in _v2_controllers():
        # a hybrid host whose memory controller is bound to v1: the node says so and drains
        with pytest.raises(CgroupUnusable, match="the memory controller is not delegated"):
            NodeCgroups.probe(conf, node)
        pytest.skip(f"the memory controller is not delegated to {V2_ROOT} on this machine")
    cg = NodeCgroups.probe(conf, node)
    cg.create_job(8, cgroups.job_limits(conf, 64, None, [], {}))
    with open(os.path.join(cg.job_dir(8), "memory.max")) as f:
        assert int(f.read()) == 64 * 2**20
    assert cg.remove_job(8)
    cg.remove_node()


def test_missing_hierarchies_and_device_files_are_refused_with_a_reason(tmp_path: os.PathLike[str]) -> None:
    missing = os.path.join(tmp_path, "none")
    with pytest.raises(CgroupUnusable, match=f"no cgroup hierarchy under {missing}"):
        detect_version(CgroupConf(mountpoint=missing))
    with pytest.raises(CgroupUnusable, match="cgroup/v1: no freezer hierarchy"):
        detect_version(CgroupConf(plugin="cgroup/v1", mountpoint=missing))
    plain = os.path.join(tmp_path, "gpu0")
    open(plain, "w").close()
    with pytest.raises(CgroupUnusable, match="is not a device file"):
        gpu_devices(CgroupConf(gpu_files=(plain,)), 1)
    with pytest.raises(CgroupUnusable, match="names no device for GPU 0"):
        gpu_devices(CgroupConf(gpu_files=()), 1)


@pytest.mark.skipif(not V2, reason="needs root and a writable cgroup v2 hierarchy")
def test_v2_devices_are_denied_by_an_ebpf_program(node: str) -> None:
    d = tempfile.mkdtemp(prefix="muster-gpudev-")
    try:
        for name, minor in (("gpu0", 7), ("gpu1", 5)):  # /dev/full's and /dev/zero's numbers
            os.mknod(os.path.join(d, name), 0o666 | stat.S_IFCHR, os.makedev(1, minor))
        conf = cgroups.parse_cgroup_conf(f"CgroupPlugin=cgroup/v2\nConstrainDevices=yes\nGpuDeviceFiles={d}/gpu[0-1]")
        cg = NodeCgroups.probe(conf, node, gpus=2)
        assert cg.devices == {0: ("c", 1, 7), 1: ("c", 1, 5)}
        procs = cg.create_job(9, cgroups.job_limits(conf, 0, None, [1], cg.devices))  # holds GPU 1
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(r)
                for path in procs:
                    with open(path, "w") as f:
                        f.write("0")
                said = []
                for name in ("gpu0", "gpu1"):
                    try:
                        os.close(os.open(os.path.join(d, name), os.O_RDONLY))
                        said.append(f"{name}:ok")
                    except OSError as exc:
                        said.append(f"{name}:{exc.errno}")
                os.write(w, " ".join(said).encode())
            finally:
                os._exit(0)
        os.close(w)
        with os.fdopen(r) as f:
            said = f.read()
        os.waitpid(pid, 0)
        assert said == f"gpu0:{errno.EPERM} gpu1:ok"
        os.close(os.open(os.path.join(d, "gpu0"), os.O_RDONLY))  # outside the job: allowed
        assert cg.kill_all(9) and cg.remove_job(9)
        cg.remove_node()
    finally:
        for name in os.listdir(d):
            os.unlink(os.path.join(d, name))
        os.rmdir(d)


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_gpu_devices_are_read_from_the_device_files() -> None:
    d = tempfile.mkdtemp(prefix="muster-gpudev-")
    try:
        os.mknod(os.path.join(d, "nvidia0"), 0o600 | stat.S_IFCHR, os.makedev(195, 0))
        os.mknod(os.path.join(d, "nvidia1"), 0o600 | stat.S_IFCHR, os.makedev(195, 1))
        conf = cgroups.parse_cgroup_conf(f"GpuDeviceFiles={d}/nvidia[0-1]")
        assert gpu_devices(conf, 2) == {0: ("c", 195, 0), 1: ("c", 195, 1)}
    finally:
        for name in os.listdir(d):
            os.unlink(os.path.join(d, name))
        os.rmdir(d)
