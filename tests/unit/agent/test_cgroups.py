"""cgroup.conf and a job's limits, paths and OOM line (``agent.cgroups``, pure)."""

from __future__ import annotations

import pytest

from muster.agent import cgroups
from muster.agent.cgroups import CgroupConf, CgroupConfError, job_limits, parse_cgroup_conf


def test_cgroup_conf_reads_slurms_keys_case_insensitively() -> None:
    conf = parse_cgroup_conf(
        "# site\nCgroupPlugin=cgroup/v1\nconstrainramspace=YES ConstrainSwapSpace=yes\n"
        "ConstrainDevices=yes ConstrainCores=no AllowedRAMSpace=90 AllowedSwapSpace=10\n"
        "CgroupMountpoint=/sys/fs/cgroup/ GpuDeviceFiles=/dev/nvidia[0-1]\nIgnoreSystemd=yes\n"
    )
    assert conf.plugin == "cgroup/v1" and conf.mountpoint == "/sys/fs/cgroup"
    assert (conf.constrain_ram, conf.constrain_swap, conf.constrain_devices, conf.constrain_cores) == (
        True,
        True,
        True,
        False,
    )
    assert (conf.allowed_ram, conf.allowed_swap) == (90.0, 10.0)
    assert conf.gpu_files == ("/dev/nvidia0", "/dev/nvidia1")


def test_cgroup_conf_defaults_are_slurms() -> None:
    conf = parse_cgroup_conf("")
    assert conf.plugin == "autodetect" and not (conf.constrain_ram or conf.constrain_devices)
    assert conf.allowed_ram == 100.0 and conf.gpu_files[:2] == ("/dev/nvidia0", "/dev/nvidia1")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("CgroupPlugin=cgroup/v3", "CgroupPlugin must be one of"),
        ("ConstrainRAMSpace=maybe", "ConstrainRAMSpace must be yes or no"),
        ("AllowedRAMSpace=lots", "AllowedRAMSpace must be a percentage"),
        ("CgroupMountpoint=relative", "must be an absolute path"),
        ("ConstrainRAMSpace", "expected Key=Value"),
        ("GpuDeviceFiles=/dev/nvidia[3-1]", "GpuDeviceFiles"),
    ],
)
def test_a_bad_cgroup_conf_names_the_line_and_the_key(text: str, words: str) -> None:
    with pytest.raises(CgroupConfError, match=r"^c\.conf:2: .*") as err:
        parse_cgroup_conf("\n" + text, "c.conf")
    assert words in str(err.value)


def test_tracking_and_constraints_follow_slurm_conf() -> None:
    assert cgroups.tracking_wanted("proctrack/cgroup", None)
    assert cgroups.tracking_wanted(None, "task/affinity,task/cgroup")
    assert not cgroups.tracking_wanted("proctrack/linuxproc", "task/affinity")
    conf = CgroupConf(constrain_ram=True, constrain_devices=True)
    assert cgroups.constraints_wanted(conf, "task/cgroup") is conf
    only = cgroups.constraints_wanted(conf, "task/affinity")  # ProctrackType alone: tracking only
    assert not (only.constrain_ram or only.constrain_devices)


def test_memory_limits_with_allowed_space_and_swap() -> None:
    mib = 2**20
    conf = CgroupConf(constrain_ram=True, allowed_ram=50, constrain_swap=True, allowed_swap=25)
    lim = job_limits(conf, 1000, None, [], {})
    assert (lim.mem_bytes, lim.memsw_bytes) == (500 * mib, 750 * mib)
    assert job_limits(CgroupConf(constrain_ram=True), 1000, None, [], {}).memsw_bytes is None
    assert job_limits(conf, 0, None, [], {}).mem_bytes is None  # no memory asked: none enforced
    assert job_limits(CgroupConf(), 1000, None, [], {}).mem_bytes is None  # not constrained


def test_devices_deny_the_other_gpus_and_cores_are_kept_only_when_constrained() -> None:
    devices = {0: ("c", 195, 0), 1: ("c", 195, 1), 2: ("c", 195, 2)}
    lim = job_limits(CgroupConf(constrain_devices=True, constrain_cores=True), 0, [3, 4], [1], devices)
    assert lim.deny == (("c", 195, 0), ("c", 195, 2)) and lim.allow == (("c", 195, 1),)
    assert lim.cpus == (3, 4)
    assert cgroups.device_rule(lim.deny[0]) == "c 195:0 rwm"
    assert job_limits(CgroupConf(), 0, [3], [1], devices).deny == ()


def test_paths_and_oom_line() -> None:
    assert cgroups.step_rel("node1_ab", 7, "batch") == "muster/node1_ab/job_7/step_batch"
    assert cgroups.task_rel("node1_ab", 7, "0", 3) == "muster/node1_ab/job_7/step_0/task_3"
    assert cgroups.oom_message(1, "7.batch") == (
        "slurmstepd: error: Detected 1 oom_kill event in StepId=7.batch. Some of the step tasks have been OOM Killed.\n"
    )
    assert "Detected 2 oom_kill events in StepId=7.0." in cgroups.oom_message(2, "7.0")
    assert cgroups.conf_path_beside("/etc/muster/muster.conf") == "/etc/muster/cgroup.conf"


def test_the_v2_device_program_refuses_each_denied_device_and_allows_the_rest() -> None:
    import struct

    from muster.agent import devbpf

    code = devbpf.program([("c", 195, 0), ("b", 8, 1)])
    insns = [struct.unpack("<BBhi", code[i : i + 8]) for i in range(0, len(code), 8)]
    assert len(insns) == 4 + 2 * 5 + 2
    # each rule: type, major, minor compares that skip to the next rule, then return 0
    assert [(op, off, imm) for op, _regs, off, imm in insns[4:9]] == [
        (0x55, 4, 2),
        (0x55, 3, 195),
        (0x55, 2, 0),
        (0xB7, 0, 0),
        (0x95, 0, 0),
    ]
    assert insns[9][3] == 1 and insns[11][3] == 1  # a block device, minor 1
    assert [(op, imm) for op, _r, _o, imm in insns[-2:]] == [(0xB7, 1), (0x95, 0)]  # the rest: allowed
