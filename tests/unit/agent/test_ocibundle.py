"""A task's container as config.json (agent.ocibundle), and oci.conf / image names
(agent.containers): pure, no runtime run here (tests/integration/test_containers.py does)."""

from __future__ import annotations

import json
import os
import tempfile

import pytest

from muster.agent import containers, ocibundle
from muster.agent.containers import OciConf, OciConfError, parse_conf
from muster.agent.ocibundle import CONTAINER_PATH, ContainerError, ContainerRequest, Device, Mount, TaskIdentity

WHO = TaskIdentity(uid=1234, gid=1234, groups=(1234, 27), home="/home/ada", umask=0o022)
ENV = {"PATH": "/opt/venv/bin:/usr/bin", "SLURM_PROCID": "3", "MASTER_ADDR": "node1", "HOME": "/home/ada"}


def config(request: ContainerRequest, **kw: object) -> dict:
    args: dict = {"rootfs": "/spool/images/abc", "argv": ["python", "train.py"], "env": ENV, "host_cwd": "/srv"}
    args.update(kw)
    return ocibundle.task_config(request, who=WHO, **args)


def destinations(cfg: dict) -> dict[str, dict]:
    return {m["destination"]: m for m in cfg["mounts"]}


def test_the_task_runs_as_the_user_without_capabilities() -> None:
    process = config(ContainerRequest(image="/img.tar"))["process"]
    assert process["user"] == {"uid": 1234, "gid": 1234, "additionalGids": [1234, 27], "umask": 0o022}
    assert process["args"] == ["python", "train.py"]
    assert process["noNewPrivileges"] is True
    assert all(caps == [] for caps in process["capabilities"].values())
    assert process["terminal"] is False


def test_the_rendezvous_env_goes_in_and_path_is_the_containers_unless_kept() -> None:
    env = config(ContainerRequest(image="/img.tar"))["process"]["env"]
    assert "SLURM_PROCID=3" in env and "MASTER_ADDR=node1" in env
    assert f"PATH={CONTAINER_PATH}" in env and "PATH=/opt/venv/bin:/usr/bin" not in env
    kept = config(ContainerRequest(image="/img.tar", env=("PATH",)))["process"]["env"]
    assert "PATH=/opt/venv/bin:/usr/bin" in kept


def test_only_a_mount_namespace_so_network_ipc_pid_and_cgroups_stay_the_hosts() -> None:
    cfg = config(ContainerRequest(image="/img.tar"))
    assert cfg["linux"]["namespaces"] == [{"type": "mount"}]
    assert "cgroupsPath" not in cfg["linux"] and "resources" not in cfg["linux"]


def test_a_read_only_image_gets_its_own_tmp_and_a_writable_one_does_not() -> None:
    ro = config(ContainerRequest(image="/img.tar"))
    assert ro["root"] == {"path": "/spool/images/abc", "readonly": True}
    assert destinations(ro)["/tmp"]["type"] == "tmpfs"
    rw = config(ContainerRequest(image="/img.tar", writable=True))
    assert rw["root"]["readonly"] is False and "/tmp" not in destinations(rw)


def test_home_is_mounted_unless_asked_not_to_and_mounts_keep_their_flags() -> None:
    request = ContainerRequest(image="/img.tar", mounts=ocibundle.parse_mounts("/data:/data:ro,/scratch:/s"))
    mounts = destinations(config(request))
    assert mounts["/home/ada"]["source"] == "/home/ada" and "rw" in mounts["/home/ada"]["options"]
    assert "ro" in mounts["/data"]["options"] and mounts["/s"]["source"] == "/scratch"
    no_home = destinations(config(ContainerRequest(image="/img.tar", mount_home=False)))
    assert "/home/ada" not in no_home


def test_the_working_directory_is_srun_s_when_a_mount_brings_it_in() -> None:
    assert config(ContainerRequest(image="/i"), host_cwd="/home/ada/run")["process"]["cwd"] == "/home/ada/run"
    assert config(ContainerRequest(image="/i"), host_cwd="/srv")["process"]["cwd"] == "/"
    chosen = config(ContainerRequest(image="/i", workdir="/work"), host_cwd="/home/ada")
    assert chosen["process"]["cwd"] == "/work"


def test_only_the_allocated_gpu_devices_are_created() -> None:
    gpu = Device("/dev/nvidia1", "c", 195, 1)
    devices = config(ContainerRequest(image="/i"), devices=[gpu])["linux"]["devices"]
    assert [(d["path"], d["major"], d["minor"]) for d in devices] == [("/dev/nvidia1", 195, 1)]
    assert ocibundle.device_path_inside("/var/tmp/emulated/gpu0") == "/dev/gpu0"
    assert ocibundle.device_path_inside("/dev/nvidia3") == "/dev/nvidia3"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("relative:/x", "not an absolute path"),
        ("/a:/b:ro:extra", "expected SRC:DST"),
        ("/a:/b:bogus", "unknown flag"),
        ("/a/../etc:/b", "not an absolute path"),
    ],
)
def test_bad_mounts_are_refused_saying_why(text: str, error: str) -> None:
    with pytest.raises(ContainerError, match=error):
        ocibundle.parse_mounts(text)


def test_a_mount_without_a_target_lands_at_its_own_path() -> None:
    assert ocibundle.parse_mounts("/data") == (Mount("/data", "/data"),)


def test_requests_are_checked() -> None:
    with pytest.raises(ContainerError, match="cannot be used together"):
        ContainerRequest.parse({"image": "/i.tar", "bundle": "/b"})
    with pytest.raises(ContainerError, match="needs"):
        ContainerRequest.parse({"workdir": "/x"})
    with pytest.raises(ContainerError, match="absolute"):
        ContainerRequest.parse({"image": "/i.tar", "workdir": "rel"})
    parsed = ContainerRequest.parse({"name": "w", "writable": True, "mount_home": False, "env": "PATH,HOME"})
    assert (parsed.name, parsed.writable, parsed.mount_home, parsed.env) == ("w", True, False, ("PATH", "HOME"))


def test_a_users_bundle_is_made_safe() -> None:
    user_config = {
        "root": {"path": "rootfs"},
        "process": {"args": ["sh"], "env": ["PATH=/bin", "LANG=C"], "cwd": "/app", "user": {"uid": 0, "gid": 0}},
        "hooks": {"prestart": [{"path": "/bin/evil"}]},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
        "linux": {
            "namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "mount"}, {"type": "ipc"}],
            "devices": [{"path": "/dev/sda", "type": "b", "major": 8, "minor": 0}],
            "resources": {"memory": {"limit": 1}},
            "cgroupsPath": "/evil",
        },
    }
    request = ContainerRequest(bundle="/home/ada/bundle")
    cfg = ocibundle.bundle_config(user_config, request, argv=["hostname"], env=ENV, who=WHO)
    assert "hooks" not in cfg
    assert cfg["root"]["path"] == "/home/ada/bundle/rootfs"
    assert cfg["process"]["user"]["uid"] == 1234 and cfg["process"]["args"] == ["hostname"]
    assert (
        cfg["process"]["cwd"] == "/app" and "LANG=C" in cfg["process"]["env"] and "PATH=/bin" in cfg["process"]["env"]
    )
    assert cfg["linux"]["namespaces"] == [{"type": "mount"}]
    assert cfg["linux"]["devices"] == [] and "resources" not in cfg["linux"] and "cgroupsPath" not in cfg["linux"]


def test_oci_conf_keys_defaults_and_node_lines() -> None:
    assert parse_conf("", "oci.conf", "node1") == OciConf()
    text = 'ContainerImageDir=/images\nNodeName=node[2-3] RunTimeRun="/opt/crun run --bundle %b %j.%s.%t"\n'
    assert parse_conf(text, "oci.conf", "node1").run == containers.DEFAULT_RUN
    node2 = parse_conf(text, "oci.conf", "node2")
    assert node2.run == "/opt/crun run --bundle %b %j.%s.%t" and node2.image_dir == "/images"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("Bogus=1", "'bogus' is not supported"),
        ('RunTimeQuery="crun state %n"', "RunTimeRun only"),
        ('RunTimeRun="crun run x"', r"\(%b\)"),
        ("RunTimeEnvExclude=(", "RunTimeEnvExclude"),
        ("ContainerImageDir=relative", "absolute"),
        ("justaword", "expected Key=Value"),
    ],
)
def test_a_bad_oci_conf_names_what_is_wrong(text: str, error: str) -> None:
    with pytest.raises(OciConfError, match=error):
        parse_conf(text, "/etc/muster/oci.conf", "node1")


def test_a_node_whose_runtime_is_missing_is_broken(tmp_path: os.PathLike[str]) -> None:
    conf = os.path.join(tmp_path, "muster.conf")
    with open(os.path.join(tmp_path, "oci.conf"), "w") as f:
        f.write('RunTimeRun="/nonexistent/crun run --bundle %b %j"\n')
    found = containers.Containers.configure(conf, str(tmp_path), "node1", ())
    assert found is not None and found.broken is not None
    if os.geteuid() == 0:  # (an agent that is not root runs no container at all)
        assert found.broken == "container runtime /nonexistent/crun not found (oci.conf RunTimeRun)"
    with pytest.raises(containers.NodeFault):
        found.prepare(
            ContainerRequest(image="/i.tar"),
            job_id=1,
            step_id=0,
            task=0,
            argv=["true"],
            env={},
            host_cwd="/",
            who=WHO,
            gpus=[],
            user="ada",
        )
    assert containers.Containers.configure(os.path.join(tmp_path, "sub", "x.conf"), str(tmp_path), "n", ()) is None


def test_image_names_resolve_in_the_sites_image_directory(tmp_path: os.PathLike[str]) -> None:
    images = str(tmp_path)
    for name in ("nvcr.io+nvidia+pytorch:24.01.tar", "busybox:latest.tar.gz"):
        open(os.path.join(images, name), "w").close()
    c = containers.Containers(OciConf(image_dir=images), str(tmp_path), "node1")
    assert c.image_path("nvcr.io/nvidia/pytorch:24.01").endswith("nvcr.io+nvidia+pytorch:24.01.tar")
    assert c.image_path("busybox").endswith("busybox:latest.tar.gz")
    assert c.image_path("docker://busybox").endswith("busybox:latest.tar.gz")
    with pytest.raises(ContainerError, match="not found on node1"):
        c.image_path("ubuntu:22.04")
    with pytest.raises(ContainerError, match="not found on node1"):
        c.image_path("/nonexistent.tar")
    bare = containers.Containers(OciConf(), str(tmp_path), "node1")
    with pytest.raises(ContainerError, match="no ContainerImageDir"):
        bare.image_path("busybox")


def test_the_runtime_command_line_fills_slurms_patterns() -> None:
    fields = {"%b": "/spool/jobs/9/bundles/0.1", "%m": "/spool", "%n": "node7", "%u": "ada", "%j": "9"}
    fields |= {"%s": "0", "%t": "1", "%%": "%"}
    argv = containers.runtime_argv("crun --root %m/run run --bundle %b %n.%u.%j.%s.%t", "/usr/bin/crun", fields)
    assert argv == ["/usr/bin/crun", "--root", "/spool/run", "run", "--bundle", fields["%b"], "node7.ada.9.0.1"]


def test_the_agent_binds_only_what_the_user_could_reach() -> None:
    # not under pytest's tmp_path: its parents are root's own (0700)
    with tempfile.TemporaryDirectory(dir="/var/tmp") as base:
        reach(base)


def reach(tmp_path: str) -> None:
    top = os.path.join(tmp_path, "private")
    inner = os.path.join(top, "open")
    os.makedirs(inner)
    secret = os.path.join(inner, "file")
    open(secret, "w").close()
    os.chmod(tmp_path, 0o755)
    os.chmod(top, 0o700)  # root's: its contents are out of the user's reach
    os.chmod(inner, 0o755)
    os.chmod(secret, 0o644)
    user = TaskIdentity(uid=54321, gid=54321, groups=(54321,))
    assert not containers.user_reaches(inner, user) and not containers.user_reaches(secret, user)
    os.chmod(top, 0o711)
    assert containers.user_reaches(inner, user) and containers.user_reaches(secret, user)
    os.chmod(secret, 0o600)
    assert not containers.user_reaches(secret, user)
    assert containers.user_reaches(secret, TaskIdentity(uid=0, gid=0, groups=()))


def test_a_tasks_bundle_is_written_and_the_runtime_named(tmp_path: os.PathLike[str]) -> None:
    image = os.path.join(tmp_path, "image")  # a directory image: used as it is
    os.makedirs(os.path.join(image, "bin"))
    spool = os.path.join(tmp_path, "spool")
    conf = OciConf(run="sh -c true %b %j.%s.%t", env_exclude="SECRET_.*")
    c = containers.Containers(conf, spool, "node1")
    argv = c.prepare(
        ContainerRequest(image=image, mount_home=False),
        job_id=12,
        step_id=3,
        task=1,
        argv=["python", "train.py"],
        env={"SECRET_TOKEN": "x", "RANK": "1"},
        host_cwd="/",
        who=TaskIdentity(uid=os.geteuid(), gid=os.getegid(), groups=()),
        gpus=[],
        user="ada",
    )
    bundle = os.path.join(spool, "jobs", "12", "bundles", "3.1")
    assert argv[1:] == ["-c", "true", bundle, "12.3.1"] and os.path.isabs(argv[0])
    with open(os.path.join(bundle, "config.json")) as f:
        written = json.load(f)
    assert written["root"] == {"path": image, "readonly": True}
    assert "RANK=1" in written["process"]["env"]
    assert not any(e.startswith("SECRET_") for e in written["process"]["env"])  # RunTimeEnvExclude
    c.remove(12)
    assert not os.path.exists(os.path.join(spool, "jobs", "12"))


SPANK = "SLURM_SPANK__SLURM_SPANK_OPTION_pyxis_"


def test_a_batch_script_without_container_options_runs_on_the_node() -> None:
    assert containers.batch_request({"PATH": "/usr/bin", SPANK + "container_mounts": "/a:/b"}, "/srv") is None


def test_sbatch_container_is_the_batch_scripts_bundle_relative_to_its_workdir() -> None:
    request = containers.batch_request({"SLURM_CONTAINER": "bundles/b1"}, "/srv/work")
    assert request is not None and request.bundle == "/srv/work/bundles/b1" and not request.image


def test_pyxis_options_given_to_sbatch_are_the_batch_scripts_container() -> None:
    env = {
        SPANK + "container_image": "./img.tar",
        SPANK + "container_mounts": "/data:/data:ro",
        SPANK + "container_workdir": "/data",
        SPANK + "container_name": "work",
        SPANK + "container_writable": "1",
        SPANK + "no_container_mount_home": "1",
        SPANK + "container_env": "PATH,HOME",
    }
    request = containers.batch_request(env, "/srv")
    assert request is not None
    assert (request.image, request.name, request.workdir) == ("/srv/img.tar", "work", "/data")
    assert request.mounts == (Mount("/data", "/data", True),)
    assert request.writable and not request.mount_home and request.env == ("PATH", "HOME")


def test_a_batch_scripts_bundle_and_image_together_are_refused() -> None:
    with pytest.raises(ContainerError, match="cannot be used together"):
        containers.batch_request({"SLURM_CONTAINER": "/b", SPANK + "container_image": "/i.tar"}, "/")


def test_an_image_path_overlayfs_cannot_name_is_copied_instead(tmp_path: object) -> None:
    root = os.path.join(str(tmp_path), "named", "work", "rootfs")
    assert containers.overlay_mount("/images/a,b", root) is False  # "," separates overlay options
    assert not os.path.exists(root)


def test_mounts_under_lists_mount_points_deepest_first() -> None:
    assert containers.mounts_under("/proc")[-1] == "/proc"
    assert containers.mounts_under("/nonexistent-muster-dir") == []
