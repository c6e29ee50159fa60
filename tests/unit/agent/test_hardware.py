"""``musterd -C``: the machine's real hardware as ``slurmd -C`` prints it."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

from muster.agent.hardware import Hardware, format_uptime, parse_cpu_list, probe, slurmd_line

BIN = pathlib.Path(sys.executable).parent


def fake_machine(root: pathlib.Path, sockets: int, cores: int, threads: int, mem_kb: int, uptime: str) -> None:
    """/sys and /proc of a machine: CPU n is socket n // (cores*threads), hyperthreads last."""
    cpus = sockets * cores * threads
    base = root / "sys/devices/system/cpu"
    base.mkdir(parents=True)
    (base / "online").write_text(f"0-{cpus - 1}\n")
    for cpu in range(cpus):
        topo = base / f"cpu{cpu}/topology"
        topo.mkdir(parents=True)
        physical = cpu % (sockets * cores)  # cpu and cpu + sockets*cores are siblings
        (topo / "physical_package_id").write_text(f"{physical // cores}\n")
        (topo / "core_id").write_text(f"{physical % cores}\n")
    (root / "proc").mkdir()
    (root / "proc/meminfo").write_text(f"MemTotal:       {mem_kb} kB\nMemFree:        1000 kB\n")
    (root / "proc/uptime").write_text(uptime)


def test_the_layout_and_memory_are_read_from_sysfs_and_proc(tmp_path: pathlib.Path) -> None:
    fake_machine(tmp_path, sockets=2, cores=16, threads=2, mem_kb=528_078_000, uptime="1040645.31 99.0\n")
    hw = probe(str(tmp_path))
    assert hw == Hardware(64, 2, 16, 2, 515_701, 1040645.31)
    assert slurmd_line("gpu1", hw, gpus=8) == (
        "NodeName=gpu1 CPUs=64 Boards=1 SocketsPerBoard=2 CoresPerSocket=16 ThreadsPerCore=2 RealMemory=515701 "
        "Gres=gpu:8\nUpTime=12-01:04:05"
    )


def test_no_gpu_no_gres_and_a_short_uptime(tmp_path: pathlib.Path) -> None:
    fake_machine(tmp_path, sockets=1, cores=4, threads=1, mem_kb=8_000_000, uptime="300.5 1.0\n")
    line = slurmd_line("cpu1", probe(str(tmp_path)))
    assert line == (
        "NodeName=cpu1 CPUs=4 Boards=1 SocketsPerBoard=1 CoresPerSocket=4 ThreadsPerCore=1 RealMemory=7812\n"
        "UpTime=00:05:00"
    )


def test_an_unreadable_layout_falls_back_to_the_cpu_count(tmp_path: pathlib.Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/meminfo").write_text("MemTotal: 2048 kB\n")
    hw = probe(str(tmp_path))
    n = os.cpu_count() or 1
    assert (hw.cpus, hw.sockets, hw.cores_per_socket, hw.threads_per_core, hw.real_memory) == (n, 1, n, 1, 2)
    assert hw.uptime is None and format_uptime(None) == "N/A"


def test_cpu_lists() -> None:
    assert parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert format_uptime(86400) == "1-00:00:00"


def test_musterd_minus_C_prints_this_machines_line_and_exits_0() -> None:
    out = subprocess.run(
        [str(BIN / "musterd"), "-C", "-N", "probe1"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "MUSTER_CONF": "/nonexistent/muster.conf"},  # -C reads no configuration
    )
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.splitlines()
    pattern = (
        r"NodeName=probe1 CPUs=(\d+) Boards=1 SocketsPerBoard=(\d+) CoresPerSocket=(\d+) ThreadsPerCore=(\d+) "
        r"RealMemory=(\d+)( Gres=gpu:\d+)?"
    )
    match = re.fullmatch(pattern, first)
    assert match, first
    cpus, sockets, cores, threads, memory = (int(x) for x in match.groups()[:5])
    assert cpus == len(os.sched_getaffinity(0)) or cpus >= sockets * cores  # the online CPUs
    assert sockets * cores * threads == cpus and memory > 0
    assert re.fullmatch(r"UpTime=(\d+-)?\d\d:\d\d:\d\d", second), second
