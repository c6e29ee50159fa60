"""Container tasks through a real OCI runtime (crun), pyxis's options and Slurm's: a 2-node
srun whose ranks run in a tiny busybox image (built here from /bin/busybox) and see the
rendezvous env, the job's cgroup and only their GPU's device node; mounts and working
directory; a named, writable container reused by the steps of one batch job; a missing
image refused with a clear error; a node whose runtime is missing drained with the reason.

Needs root, crun and busybox-static (skipped without them, failed in CI where
``MUSTER_TEST_REQUIRE_CRUN=1``) and a writable cgroup v1 hierarchy (the job's cgroup)."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import stat
import sys
import tarfile
import tempfile
from collections.abc import Iterator

import pytest

from harness import BIN, Harness, ensure_user, wait_for
from muster.cluster.local import ClusterShape

pytestmark = pytest.mark.integration

CGROUP = "/sys/fs/cgroup"
# Emulated GPUs: device nodes of drivers every Linux has (/dev/full, /dev/zero).
GPU_DEVICES = [(1, 7), (1, 5)]
OS_NAME = "muster-test-busybox"
APPLETS = ("sh", "cat", "ls", "echo", "id", "pwd", "touch", "test", "grep", "hostname", "nc", "seq", "sleep", "timeout")


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    missing = [t for t in ("crun", "busybox") if shutil.which(t) is None]
    if missing:
        return f"{' and '.join(missing)} not installed (apt-get install crun busybox-static)"
    for ctl in ("freezer", "memory", "devices"):
        probe = os.path.join(CGROUP, ctl, f"muster-probe-{os.getpid()}")
        try:
            os.mkdir(probe)
            os.rmdir(probe)
        except OSError as exc:
            return f"no writable cgroup v1 {ctl} hierarchy: {exc}"
    return None


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("MUSTER_TEST_REQUIRE_CRUN") == "1" and "cgroup" not in reason:
        pytest.fail(f"MUSTER_TEST_REQUIRE_CRUN=1: {reason}")
    pytest.skip(reason)


def build_image(path: str) -> None:
    """A rootfs tarball: busybox (static) and its applets, /etc/os-release, /tmp."""
    busybox = shutil.which("busybox")
    assert busybox is not None

    def add_dir(tar: tarfile.TarFile, name: str, mode: int = 0o755) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.mode = tarfile.DIRTYPE, mode
        tar.addfile(info)

    with tarfile.open(path, "w:gz") as tar:
        for d in ("bin", "etc", "proc", "sys", "dev", "root", "work"):
            add_dir(tar, d)
        add_dir(tar, "tmp", 0o1777)
        tar.add(busybox, "bin/busybox")
        for applet in APPLETS:
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        data = f'NAME="{OS_NAME}"\nID=muster\n'.encode()
        info = tarfile.TarInfo("etc/os-release")
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Harness, str]]:
    why = _why_not()
    if why:
        _skip_or_fail(why)
    root = tempfile.mkdtemp(prefix="muster-oci-", dir="/var/tmp")
    os.chmod(root, 0o755)
    devdir = os.path.join(root, "gpudev")
    os.mkdir(devdir, 0o755)
    for i, (major, minor) in enumerate(GPU_DEVICES):
        os.mknod(os.path.join(devdir, f"gpu{i}"), 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    images = os.path.join(root, "images")
    os.mkdir(images, 0o755)
    image = os.path.join(root, "busybox.tar.gz")
    build_image(image)
    os.chmod(image, 0o644)
    shutil.copy(image, os.path.join(images, "muster/busybox:1.0.tar.gz".replace("/", "+")))
    h = Harness(
        ClusterShape(nodes=3, gpus_per_node=2, cpus_per_node=2, mem_per_node=2000),
        root=root,
        settings={"ProctrackType": "proctrack/cgroup", "TaskPlugin": "task/cgroup"},
    )
    h.cluster.create(h.shape, h.settings)
    conf_dir = os.path.dirname(h.cluster.conf_path)
    with open(os.path.join(conf_dir, "cgroup.conf"), "w") as f:
        f.write(f"CgroupPlugin=cgroup/v1\nGpuDeviceFiles={devdir}/gpu[0-1]\n")
    with open(os.path.join(conf_dir, "oci.conf"), "w") as f:
        f.write(
            "# node3's runtime is not installed: it must be drained, never run a task unconfined\n"
            f"ContainerImageDir={images}\n"
            'NodeName=node3 RunTimeRun="/nonexistent/crun run --bundle %b %n.%j.%s.%t"\n'
        )
    try:
        h.up()
        yield h, image
    finally:
        h.down()


def _lines(out: str, tag: str) -> dict[int, str]:
    """``N: tag=value`` lines of a labelled srun's output, by task."""
    found = {}
    for line in out.splitlines():
        m = re.match(rf"\s*(\d+): {tag}=(.*)$", line)
        if m:
            found[int(m.group(1))] = m.group(2)
    return found


def test_a_two_node_srun_runs_each_rank_in_the_image(cluster: tuple[Harness, str]) -> None:
    h, image = cluster
    uid = ensure_user("mustertest")
    script = (
        "echo os=$(grep ^NAME= /etc/os-release); echo rank=$SLURM_PROCID; echo world=$SLURM_NTASKS; "
        "echo master=$MASTER_ADDR:$MASTER_PORT; echo uid=$(id -u); echo job=$SLURM_JOB_ID; "
        "echo cuda=$CUDA_VISIBLE_DEVICES; echo gpus=$(ls /dev | grep ^gpu); "
        "echo cgroup=$(grep -E ':memory:|:freezer:' /proc/self/cgroup | head -1); echo host=$(hostname); "
        # a rendezvous over the host's network: rank 1 connects to rank 0 at MASTER_ADDR
        "if [ $SLURM_PROCID = 0 ]; then echo got=$(timeout 60 nc -l -p $MASTER_PORT); else "
        "for i in $(seq 600); do echo from-rank-1 | nc $MASTER_ADDR $MASTER_PORT 2>/dev/null && break; sleep 0.1; done; fi"
    )
    out = h.run(
        [
            "srun",
            "-N2",
            "-n2",
            "-w",
            "node[1-2]",
            "--gres=gpu:1",
            "-l",
            f"--container-image={image}",
            "sh",
            "-c",
            script,
        ],
        uid=uid,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    os_ = _lines(out.stdout, "os")
    assert os_ == {0: f'NAME="{OS_NAME}"', 1: f'NAME="{OS_NAME}"'}, out.stdout  # inside the image
    assert _lines(out.stdout, "rank") == {0: "0", 1: "1"}
    assert _lines(out.stdout, "world") == {0: "2", 1: "2"}
    masters = set(_lines(out.stdout, "master").values())
    assert len(masters) == 1 and re.fullmatch(r"[\w.-]+:\d+", masters.pop()), out.stdout  # one rendezvous
    assert _lines(out.stdout, "got") == {0: "from-rank-1"}, out.stdout  # and it works
    assert _lines(out.stdout, "uid") == {0: str(uid), 1: str(uid)}  # the user, not root
    job = _lines(out.stdout, "job")[0]
    for task, line in _lines(out.stdout, "cgroup").items():
        assert f"/job_{job}/step_0/task_0" in line, f"task {task} is not in the job's cgroup: {line}"
    hosts = _lines(out.stdout, "host")
    assert hosts == {0: "node1", 1: "node2"}, out.stdout
    # only the GPU the rank holds has a device node inside
    cuda, gpus = _lines(out.stdout, "cuda"), _lines(out.stdout, "gpus")
    for task in (0, 1):
        assert cuda[task] in ("0", "1"), out.stdout
        assert gpus[task] == f"gpu{cuda[task]}", out.stdout


def test_mounts_workdir_and_an_image_by_name(cluster: tuple[Harness, str]) -> None:
    h, _image = cluster
    uid = ensure_user("mustertest")
    out = h.run(
        [
            "srun",
            "-w",
            "node1",
            "--container-image=muster/busybox:1.0",  # ContainerImageDir's muster+busybox:1.0.tar.gz
            f"--container-mounts={h.workdir}:/data,{h.root}/images:/images:ro",
            "--container-workdir=/data",
            "sh",
            "-c",
            "pwd; echo written > from-container; touch /images/x 2>/dev/null && echo RO-BROKEN; "
            "echo sees=$(ls /images); test -e /etc/passwd-of-host || echo isolated",
        ],
        uid=uid,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "/data", out.stdout
    assert "RO-BROKEN" not in out.stdout
    assert "sees=muster+busybox:1.0.tar.gz" in lines, out.stdout
    assert h.read("from-container") == "written\n"
    assert os.stat(os.path.join(h.workdir, "from-container")).st_uid == uid


def test_a_named_writable_container_is_reused_by_the_jobs_next_step(cluster: tuple[Harness, str]) -> None:
    h, image = cluster
    uid = ensure_user("mustertest")
    script = (
        "#!/bin/sh\n"
        f"srun --container-image={image} --container-name=work --container-writable "
        "sh -c 'echo step0 > /etc/state; echo wrote; grep -c \"^overlay / overlay\" /proc/mounts'\n"
        "srun --container-name=work cat /etc/state\n"
        f"srun --container-image={image} sh -c 'cat /etc/state 2>/dev/null || echo fresh'\n"
    )
    job = h.sbatch("-w", "node2", "-o", "named-%j.out", uid=uid, input=script)
    done = h.wait_job(job)
    out = h.read(f"named-{job}.out")
    assert done["state"] == "COMPLETED", out
    # the container's root is an overlay on the image (which the third step sees unchanged)
    assert out.splitlines() == ["wrote", "1", "step0", "fresh"], out
    spool = os.path.join(h.cluster.state_dir, "nodes", "node2", "containers")
    assert os.path.isdir(os.path.join(spool, "images")), "the image is unpacked once into the node's spool"
    gone = os.path.join(spool, "jobs", str(job))
    wait_for(lambda: not os.path.exists(gone), 60, what="the job's containers to be removed at its end")
    with open("/proc/self/mountinfo") as f:
        assert gone not in f.read(), "the container's overlay is unmounted at the job's end"


def test_a_missing_image_is_a_clear_error(cluster: tuple[Harness, str]) -> None:
    h, _image = cluster
    uid = ensure_user("mustertest")
    out = h.run(["srun", "-w", "node1", "--container-image=/nonexistent/image.tar", "true"], uid=uid)
    assert out.returncode != 0
    assert "container image /nonexistent/image.tar not found on node1" in out.stderr, out.stderr
    # a directory the user cannot reach is not bound for them by the root-run runtime
    hidden = os.path.join(h.root, "private", "open")
    os.makedirs(hidden, exist_ok=True)
    os.chmod(os.path.dirname(hidden), 0o700)
    sneaky = h.run(
        ["srun", "-w", "node1", f"--container-image={_image}", f"--container-mounts={hidden}:/x", "ls", "/x"], uid=uid
    )
    assert sneaky.returncode != 0 and f"--container-mounts: {hidden}: permission denied" in sneaky.stderr, sneaky.stderr
    bad = h.run(["srun", "--container-mounts=relative:/x", "--container-image=/x.tar", "true"], uid=uid)
    assert bad.returncode != 0 and "--container-mounts" in bad.stderr, bad.stderr
    assert h.node_states()["node1"] in ("IDLE", "MIXED", "ALLOCATED"), "a job's error must not drain the node"


def test_a_node_whose_runtime_is_missing_is_drained_and_runs_nothing(cluster: tuple[Harness, str]) -> None:
    h, image = cluster
    uid = ensure_user("mustertest")

    def node3() -> dict:
        return next(n for n in h.cluster.api("GET", "/v1/nodes")["nodes"] if n["name"] == "node3")

    def reason() -> str:
        node = node3()
        return str(node.get("reason") or "") if node.get("drain") else ""

    wait_for(lambda: "/nonexistent/crun not found" in reason(), 60, what="node3 drained for its runtime")
    # put back in service by an admin, it refuses the container task and is drained again
    resumed = h.run(["scontrol", "update", "nodename=node3", "state=resume"])
    assert resumed.returncode == 0, resumed.stderr
    wait_for(lambda: not reason(), 30, what="node3 resumed")
    out = h.run(["srun", "-w", "node3", f"--container-image={image}", "sh", "-c", "echo RAN"], uid=uid)
    assert out.returncode != 0 and "RAN" not in out.stdout, out.stdout
    assert "/nonexistent/crun not found" in out.stderr, out.stderr
    # drained again: with the reason, or (a second fault of the node) quarantined for it
    wait_for(
        lambda: "/nonexistent/crun not found" in reason() or reason().startswith("quarantined"),
        60,
        what="node3 drained again",
    )
    assert node3()["drain"] is True


def test_slurms_container_option_runs_a_users_bundle_made_safe(cluster: tuple[Harness, str]) -> None:
    h, image = cluster
    uid = ensure_user("mustertest")
    bundle = os.path.join(h.workdir, "bundle")
    os.makedirs(os.path.join(bundle, "rootfs"))
    with tarfile.open(image) as tar:
        tar.extractall(os.path.join(bundle, "rootfs"))  # our own image, built above
    hook_mark = os.path.join(h.root, "hook-ran")
    config = {
        "ociVersion": "1.0.2",
        "root": {"path": "rootfs", "readonly": True},
        "process": {
            "args": ["sh"],
            "cwd": "/etc",
            "env": ["PATH=/bin", "GREETING=from-bundle"],
            "user": {"uid": 0, "gid": 0},
        },
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
        ],
        "hooks": {"prestart": [{"path": "/bin/sh", "args": ["sh", "-c", f"touch {hook_mark}"]}]},  # root on the host
        "linux": {"namespaces": [{"type": "mount"}, {"type": "network"}]},
    }
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump(config, f)
    out = h.run(
        [
            "srun",
            "-w",
            "node1",
            "--container=bundle",
            "sh",
            "-c",
            "echo $GREETING; id -u; pwd; grep ^NAME= /etc/os-release",
        ],
        uid=uid,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines() == ["from-bundle", str(uid), "/etc", f'NAME="{OS_NAME}"'], out.stdout
    assert not os.path.exists(hook_mark), "a bundle's hooks must never run as root on the host"


def _pids_running(marker: str) -> list[int]:
    """Processes whose command line carries ``marker`` (a container's, seen from the host)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if marker.encode() in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def test_exit_codes_pass_through_and_scancel_leaves_no_container_process(cluster: tuple[Harness, str]) -> None:
    h, image = cluster
    uid = ensure_user("mustertest")
    out = h.run(["srun", "-w", "node1", f"--container-image={image}", "sh", "-c", "exit 7"], uid=uid)
    assert out.returncode == 7, out.stdout + out.stderr
    marker = str(900000 + os.getpid() % 99999)  # sleep's argument: this test's process
    script = f"#!/bin/sh\nsrun --container-image={image} sleep {marker}\n"
    job = h.sbatch("-w", "node2", "-o", "cancel-%j.out", uid=uid, input=script)
    wait_for(lambda: _pids_running(marker), 60, what="the container's process to run")
    cancelled = h.run(["scancel", str(job)], uid=uid)
    assert cancelled.returncode == 0, cancelled.stderr
    assert h.wait_job(job)["state"] == "CANCELLED"
    wait_for(lambda: not _pids_running(marker), 60, what="the container's process to be gone")


def test_sbatchs_container_image_runs_the_batch_script_in_the_image(cluster: tuple[Harness, str]) -> None:
    h, image = cluster
    uid = ensure_user("mustertest")
    script = (
        "#!/bin/sh\n"
        f"#SBATCH --container-image={image}\n"
        "grep ^NAME= /etc/os-release; id -u; echo job=$SLURM_JOB_ID; "
        "grep -E ':freezer:' /proc/self/cgroup; echo $0\n"
    )
    job = h.sbatch("-w", "node1", "-o", "image-%j.out", uid=uid, input=script)
    done = h.wait_job(job)
    out = h.read(f"image-{job}.out")
    assert done["state"] == "COMPLETED", out
    lines = out.splitlines()
    assert lines[:3] == [f'NAME="{OS_NAME}"', str(uid), f"job={job}"], out  # in the image, as the user
    assert lines[3].endswith(f"/job_{job}/step_batch/task_0"), out  # in the job's cgroup
    assert lines[4].endswith("/slurm_script"), out  # the script, from its spool directory bound inside
    # scancel reaches the script in its container, and leaves no process of it behind
    marker = str(800000 + os.getpid() % 99999)
    running = h.sbatch("-w", "node1", f"--container-image={image}", uid=uid, input=f"#!/bin/sh\nsleep {marker}\n")
    wait_for(lambda: _pids_running(marker), 60, what="the containerized script's sleep to run")
    assert h.run(["scancel", str(running)], uid=uid).returncode == 0
    assert h.wait_job(running)["state"] == "CANCELLED"
    wait_for(lambda: not _pids_running(marker), 60, what="the container's process to be gone")
    # an image that is not there: the job's error, with the message, and the node stays in service
    bad = h.sbatch("-w", "node1", "--container-image=/nonexistent/image.tar", uid=uid, input="#!/bin/sh\ntrue\n")
    failed = h.wait_job(bad)
    assert failed["state"] == "FAILED", failed
    assert "container image /nonexistent/image.tar not found on node1" in failed["system_comment"], failed
    assert h.node_states()["node1"] in ("IDLE", "MIXED", "ALLOCATED")


def _checkout() -> str:
    """The directory muster is imported from, up to its checkout (``src/muster`` -> root)."""
    import muster

    return os.path.realpath(os.path.join(os.path.dirname(muster.__file__), "..", ".."))


def test_sbatchs_container_runs_the_batch_script_and_its_sruns_in_the_bundle(cluster: tuple[Harness, str]) -> None:
    h, _image = cluster
    uid = ensure_user("mustertest")
    # a bundle made of the node's own directories (so that srun is there, at its path),
    # read-only: only the container's private /tmp tells the inside from the outside
    bundle = os.path.join(h.workdir, "hostbundle")
    rootfs = os.path.join(bundle, "rootfs")
    os.makedirs(rootfs, exist_ok=True)
    mounts: list[dict] = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
        {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["mode=1777"]},
    ]
    for name in sorted(os.listdir("/")):
        host = os.path.join("/", name)
        inside = os.path.join(rootfs, name)
        if os.path.islink(host):
            if not os.path.lexists(inside):
                os.symlink(os.readlink(host), inside)
        elif os.path.isdir(host):
            os.makedirs(inside, exist_ok=True)
            if name not in ("proc", "dev", "tmp", "sys", "run"):
                mounts.append({"destination": host, "type": "bind", "source": host, "options": ["rbind", "ro"]})
    # A checkout under /tmp (a CI clone, say): its srun and muster shown at their paths too,
    # over the private /tmp, as a site bind-mounts its software into its containers
    for path in sorted({os.path.realpath(sys.prefix), _checkout()}):
        if path.startswith("/tmp/"):
            mounts.append({"destination": path, "type": "bind", "source": path, "options": ["rbind", "ro"]})
    config = {
        "ociVersion": "1.0.2",
        "root": {"path": "rootfs", "readonly": True},
        "process": {"args": ["sh"], "cwd": "/", "env": [f"PATH={BIN}:/usr/bin:/bin", "GREETING=from-bundle"]},
        "mounts": mounts,
    }
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump(config, f)
    marker = tempfile.NamedTemporaryFile(prefix="muster-host-only-", dir="/tmp")  # seen on the host only
    try:
        check = f"test -e {marker.name} && echo on-host || echo in-container"
        script = (
            f"#!/bin/sh\necho batch=$GREETING $SLURM_CONTAINER\n{check}\nsrun sh -c 'echo step=$GREETING; {check}'\n"
        )
        job = h.sbatch("-w", "node2", "--container=hostbundle", "-o", "bundle-%j.out", uid=uid, input=script)
        done = h.wait_job(job)
        out = h.read(f"bundle-{job}.out")
    finally:
        marker.close()
    assert done["state"] == "COMPLETED", out
    assert out.splitlines() == [
        f"batch=from-bundle {bundle}",
        "in-container",
        "step=from-bundle",
        "in-container",
    ], out
