"""Throughput of trivial jobs, before and after a change, alternately in one run.

Each SRC is a ``src`` directory of a muster checkout (e.g. a ``git worktree`` of the commit
before, and this checkout's ``src``); each gets a local cluster of 8 nodes of 8 GPUs
(``muster up``, with ``PYTHONPATH=SRC``, so commands and daemons run that code), and they
are measured in turn, round by round: SERIAL trivial ``sbatch`` jobs one after the other,
then ``--array=1-N``, each until the queue is empty (as ``sidebyside.py`` measures them).
Besides jobs/s it prints the CPU time the controller and the agents (their reaped children
included: monitors and scripts) spent per job, which the load of a shared machine disturbs
less than wall time (an agent's live children, its spawner among them, included).

usage: bench_throughput.py SRC [SRC ...] [--serial 300] [--array 1000] [--rounds 1]
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sidebyside as sbs  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def daemons_cpu(state: str) -> dict[str, float]:
    """CPU seconds of the controller and of all agents (self and reaped children)."""
    out: dict[str, float] = {}
    for pidfile in glob.glob(os.path.join(state, "run", "*.pid")):
        who = "ctld" if "ctld" in os.path.basename(pidfile) else "agents"
        try:
            with open(pidfile) as f:
                pid = int(f.read())
        except (OSError, ValueError):
            continue
        # the daemon, and its live children (an agent's spawner, which forks the monitors
        # and reaps them, is reaped itself only when the agent stops)
        for one in [pid, *_children(pid)]:
            out[who] = out.get(who, 0.0) + _cpu(one)
    return out


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return []


def _cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and its reaped children."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in fields[11:15]) / TICKS


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", nargs="+", help="a checkout's src directory")
    ap.add_argument("--serial", type=int, default=300)
    ap.add_argument("--array", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    systems = []
    try:
        for src in args.src:
            os.environ["PYTHONPATH"] = os.path.abspath(src)
            state = os.path.join(tempfile.mkdtemp(prefix="muster-thru."), "m")
            system = sbs.start_muster(state)
            systems.append((src, state, system))
        os.environ.pop("PYTHONPATH", None)
        plan = sbs.measurements(3, args.array, args.serial)
        for r in range(args.rounds):
            for src, state, system in systems:
                for key, count in (("serial_jobs", args.serial), ("array_tasks", args.array)):
                    before = daemons_cpu(state)
                    rate = plan[key](system)
                    after = daemons_cpu(state)
                    ms = {k: (after[k] - before.get(k, 0.0)) * 1000 / count for k in after}
                    print(
                        f"round {r} {src}: {key} {rate:6.1f}/s, CPU ms per job: controller "
                        f"{ms.get('ctld', 0):.1f}, agents {ms.get('agents', 0):.1f} (load {os.getloadavg()[0]:.0f})",
                        flush=True,
                    )
    finally:
        for _src, state, _system in systems:
            sbs.stop_muster(state)
    return 0


if __name__ == "__main__":
    sys.exit(main())
