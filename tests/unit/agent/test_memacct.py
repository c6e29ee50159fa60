"""A cgroup's memory accounting read from fake cgroup trees (``agent.memacct``), a node's
task cgroups (``NodeCgroups.memory``) and sstat's RSS from them (``stepstats.job_stats``)."""

from __future__ import annotations

import os
import pathlib
import subprocess

from muster.agent import cgroups, memacct, stepstats
from muster.agent.cgroupfs import NodeCgroups
from muster.agent.cgroups import CgroupConf
from muster.agent.memacct import Memory


def _files(d: pathlib.Path, **files: str) -> str:
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name.replace("_", ".", 1)).write_text(text)
    return str(d)


def test_v1_rss_now_peak_and_oom_kills(tmp_path: pathlib.Path) -> None:
    freezer = _files(tmp_path / "freezer")  # no memory files: passed over
    memory = _files(
        tmp_path / "memory",
        memory_max_usage_in_bytes="104857600\n",
        memory_usage_in_bytes="99999999\n",
        memory_stat="cache 4096\nrss 1048576\ntotal_cache 8192\ntotal_rss 52428800\n",
        memory_oom_control="oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
    )
    assert memacct.read([freezer, memory]) == Memory(now_kb=51200, peak_kb=102400, oom_kills=2)


def test_v1_without_totals_or_stat(tmp_path: pathlib.Path) -> None:
    d = tmp_path / "m"
    _files(d, memory_max_usage_in_bytes="2048", memory_stat="rss 1024\n", memory_oom_control="oom_kill_disable 0\n")
    assert memacct.read([str(d)]) == Memory(1, 2, 0)
    (d / "memory.stat").unlink()
    _files(d, memory_usage_in_bytes="3072\n")
    assert memacct.read([str(d)]) == Memory(3, 2, 0)


def test_v2_current_peak_and_events(tmp_path: pathlib.Path) -> None:
    d = tmp_path / "v2"
    _files(
        d, memory_current="10240\n", memory_peak="40960\n", memory_events="low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n"
    )
    assert memacct.read([str(d)]) == Memory(10, 40, 1)
    (d / "memory.peak").unlink()  # kernels before 5.19: the current use is all there is
    assert memacct.read([str(d)]) == Memory(10, 10, 1)


def test_no_memory_controller_or_a_removed_cgroup_has_no_figures(tmp_path: pathlib.Path) -> None:
    assert memacct.read([_files(tmp_path / "freezer", cgroup_procs="")]) is None
    assert memacct.read([str(tmp_path / "gone")]) is None
    assert memacct.read([]) is None
    bad = _files(tmp_path / "bad", memory_max_usage_in_bytes="not a number\n")
    assert memacct.read([bad]) is None


def test_task_dirs_are_those_of_the_procs_files_joined() -> None:
    procs = (
        "/c/freezer/muster/n/job_1/step_0/task_1/cgroup.procs",
        "/c/memory/muster/n/job_1/step_0/task_1/cgroup.procs",
    )
    assert memacct.task_dirs(procs) == [os.path.dirname(p) for p in procs]


def test_a_nodes_task_cgroup_figures(tmp_path: pathlib.Path) -> None:
    roots = {c: str(tmp_path / c) for c in ("freezer", "memory")}
    cg = NodeCgroups(CgroupConf(plugin="cgroup/v1", constrain_ram=True), "n1", "v1", roots)
    rel = cgroups.task_rel("n1", 7, "0", 1)
    _files(tmp_path / "freezer" / rel)
    _files(tmp_path / "memory" / rel, memory_max_usage_in_bytes=str(8 << 20), memory_stat="total_rss 4194304\n")
    assert cg.memory(7, "0", 1) == Memory(4096, 8192, 0)
    assert cg.memory(7, "batch") is None  # no such cgroup
    tracking_only = NodeCgroups(CgroupConf(plugin="cgroup/v1"), "n1", "v1", {"freezer": roots["freezer"]})
    assert tracking_only.memory(7, "0", 1) is None  # ConstrainRAMSpace=no: /proc's figures


def test_sstat_rss_is_the_task_cgroups_where_confined() -> None:
    child = subprocess.Popen(["sleep", "60"])
    try:
        asked: list[tuple[str, int]] = []

        def memory(step: str, task: int) -> Memory | None:
            asked.append((step, task))
            return Memory(now_kb=12345, peak_kb=99999, oom_kills=0)

        found = stepstats.job_stats(9, [], {child.pid}, child.pid, memory=memory)
        assert asked == [("batch", 0)]
        assert found[0]["step"] == "batch"
        (task,) = found[0]["tasks"]  # type: ignore[misc]
        assert task["rss_kb"] == 12345 and task["pids"] == [child.pid]
        plain = stepstats.job_stats(9, [], {child.pid}, child.pid)  # not confined: /proc's statm
        (task,) = plain[0]["tasks"]  # type: ignore[misc]
        assert task["rss_kb"] != 12345 and int(task["rss_kb"]) > 0
    finally:
        child.kill()
        child.wait()
