"""The command path side by side (issue 39): real Slurm 22.05 and one or more muster installs,
each command run once per system in turn, round after round, so that a loaded machine slows
every system alike; medians per command and the ratio of each to Slurm's.

A muster install is a ``bin`` directory that ``python -m muster.cli.launchers BIN`` filled
(the compiled client and its command server, ``cli/cmdserver.py``): ``--bin before=DIR
--bin after=DIR`` compares two builds of the client and server on the same cluster. Each
install is also measured with ``MUSTER_CMD_SERVER=0`` where ``--alone LABEL`` says so (every
command its own interpreter: the site switch ``CommandServer=no``). Then the memory of each
install's command server as it waits, idle: RSS and PSS of its processes (``smaps_rollup``).

Real Slurm is one already running on this machine with its configuration at
``/etc/slurm/slurm.conf`` (as the workplace's slurm-anchor starts it; ``benchmarks/sidebyside.py
--anchor DIR`` can start one); without it only muster's figures are printed.

usage: bench_cmdpath.py [--bin LABEL=DIR ...] [--alone LABEL ...] [--reps N] [--pending N]
(``make bench`` runs it with this venv's commands, served and not.)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

SLURM_ENV = {"SLURM_CONF": "/etc/slurm/slurm.conf", "PATH": "/usr/bin:/usr/sbin:/bin"}


class System:
    def __init__(self, name: str, env: dict[str, str], cwd: str) -> None:
        self.name, self.env, self.cwd = name, env, cwd
        self.times: dict[str, list[float]] = {}

    def run(self, cmd: str, check: bool = True) -> tuple[float, str]:
        t0 = time.perf_counter()
        p = subprocess.run(cmd, shell=True, env=self.env, cwd=self.cwd, capture_output=True, text=True, timeout=300)
        took = time.perf_counter() - t0
        if check and p.returncode != 0:
            raise RuntimeError(f"{self.name}: {cmd}: exit {p.returncode}: {p.stderr.strip()[:300]}")
        return took, p.stdout

    def timed(self, key: str, cmd: str) -> None:
        self.times.setdefault(key, []).append(self.run(cmd)[0] * 1000)


def rounds(systems: list[System], key: str, cmd: str | None, reps: int, per: dict[str, str] | None = None) -> None:
    """``cmd`` (or each system's own, ``per``) once per system, in turn, ``reps`` times; the
    first system of each round changes, so that none always follows the same one."""
    for rep in range(reps):
        order = systems[rep % len(systems) :] + systems[: rep % len(systems)]
        for s in order:
            s.timed(key, per[s.name] if per else str(cmd))


def server_memory(bin_dir: str) -> tuple[int, int, int]:
    """The processes of ``bin_dir``'s command servers (server and waiting runners): their
    count, summed RSS and PSS in kB."""
    server = os.path.join(os.path.dirname(bin_dir), "libexec", "muster", "cmdserver")
    out = subprocess.run(["pgrep", "-f", f"{server} "], capture_output=True, text=True).stdout.split()
    rss = pss = 0
    for pid in out:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1])
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1])
        except OSError:
            continue
    return len(out), rss, pss


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", action="append", help="LABEL=DIR: a muster install's commands (default: this venv's)")
    ap.add_argument("--alone", action="append", help="LABEL: also measure it with no server (default: the first)")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--pending", type=int, default=300, help="held jobs in the queue for the listing rows")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="muster-cmdpath.")
    installs = dict(item.split("=", 1) for item in args.bin or [f"muster={os.path.dirname(sys.executable)}"])
    args.alone = args.alone or [next(iter(installs))]
    first_bin = os.path.abspath(next(iter(installs.values())))
    base = {k: v for k, v in os.environ.items() if k not in ("MUSTER_CONF", "SLURM_CONF", "MUSTER_CMD_SERVER")}
    state = os.path.join(work, "muster")
    up = subprocess.run(
        [os.path.join(first_bin, "muster"), "up", "--nodes", "8", "--gpus-per-node", "8", "--state-dir", state],
        env=dict(base, PATH=f"{first_bin}:/usr/bin:/bin"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    conf = os.path.join(state, "muster.conf")
    if up.returncode != 0 or not os.path.exists(conf):
        raise SystemExit(f"muster up failed: {up.stdout[-500:]} {up.stderr[-500:]}")
    systems: list[System] = []
    slurm = System("slurm", dict(base, **SLURM_ENV), work)
    try:
        if slurm.run("sinfo -h", check=False)[1].strip():
            systems.append(slurm)
        else:
            print("real Slurm is not running: muster's figures alone", file=sys.stderr)
        for label, bin_dir in installs.items():
            env = dict(base, PATH=f"{os.path.abspath(bin_dir)}:/usr/bin:/bin", MUSTER_CONF=conf)
            s = System(label, env, work)
            s.run("MUSTER_CMD_SERVER=wait sbatch --version")  # its server up before the first round
            systems.append(s)
            if label in args.alone:
                systems.append(System(f"{label}, no server", dict(env, MUSTER_CMD_SERVER="0"), work))
        muster = [s for s in systems if s is not slurm]
        for s in systems:
            s.run("scancel --state=PENDING", check=False)
        plan = [
            ("sbatch --version", "sbatch --version"),
            ("squeue, idle", "squeue"),
            ("sinfo", "sinfo"),
            ("scontrol show partition", "scontrol show partition"),
            ("sbatch --hold --wrap true", "sbatch --hold --wrap true"),
        ]
        for key, cmd in plan:
            rounds(systems, key, cmd, args.reps)
        for s in [x for x in (slurm, muster[0]) if x in systems]:
            s.run("scancel --state=PENDING", check=False)
            for _ in range(args.pending):
                s.run("sbatch --hold --wrap true")
        pending = f"squeue, {args.pending} pending"
        rounds(systems, pending, "squeue", args.reps)
        one = {s.name: s.run("squeue -h -o %i | head -1")[1].strip() for s in systems}
        rounds(systems, "scontrol show job ID", None, args.reps, {n: f"scontrol show job {i}" for n, i in one.items()})
        rounds(systems, "squeue -j ID", None, args.reps, {n: f"squeue -j {i}" for n, i in one.items()})
        # scancel: one held job each time, a different one each call
        ids = {s.name: s.run("squeue -h -o %i")[1].split() for s in (slurm, muster[0]) if s in systems}
        for s in systems:
            if s.name not in ids:
                ids[s.name] = ids[muster[0].name]
        for rep in range(args.reps):
            for s in systems[rep % len(systems) :] + systems[: rep % len(systems)]:
                s.timed("scancel ID", f"scancel {ids[s.name].pop()}")
        memory = {label: server_memory(os.path.abspath(d)) for label, d in installs.items()}
    finally:
        for s in systems:
            s.run("scancel --state=PENDING", check=False)
        subprocess.run(
            [os.path.join(first_bin, "muster"), "down", "--state-dir", state], capture_output=True, timeout=120
        )
    keys = list(systems[0].times)
    names = [s.name for s in systems]
    head = "| command | " + " | ".join(names) + " |"
    print(head)
    print("|---" * (len(names) + 1) + "|")
    for key in keys:
        cells = []
        ref = statistics.median(slurm.times[key]) if slurm in systems else None
        for s in systems:
            m = statistics.median(s.times[key])
            cells.append(f"{m:.1f} ms" + (f" ({m / ref:.2f}x)" if ref and s is not slurm else ""))
        print(f"| `{key}` | " + " | ".join(cells) + " |")
    print(f"\nmedians of {args.reps} calls each, wall time (fork and exec of the command included)")
    for label, (count, rss, pss) in memory.items():
        print(f"{label}: command server idle: {count} processes, RSS {rss / 1024:.1f} MB, PSS {pss / 1024:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
