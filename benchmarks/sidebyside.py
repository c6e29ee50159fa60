"""muster next to real Slurm 22.05, the figures of issue 20's table, with ratios.

With ``--anchor DIR`` (or ``$SLURM_ANCHOR``), where ``DIR/setup.sh`` brings up a real Slurm
cluster on loopback (the workplace's slurm-anchor: 8 slurmd of 8 GPUs), both systems are
measured in this run, alternately, metric by metric. Without it, muster's figures are
printed next to the Slurm figures stored in ``slurm_stored.json`` and marked as stored.

muster runs as a local cluster of 8 nodes of 8 GPUs (``muster up``), with the commands found
next to this interpreter (the checkout's venv). Figures are medians of wall time, fork and
exec of each command included; throughputs run from the first submission until the queue
is empty. ``--quick`` runs a reduced set (fewer repetitions, 100 jobs instead of 1,000) to
check that the benchmark works; its figures are not comparable with the stored ones.

usage: sidebyside.py [--quick] [--reps N] [--anchor DIR] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.dirname(sys.executable)
# Real Slurm's commands and the anchor's scripts: the system's, never the venv's.
SLURM_PATH = "/usr/bin:/usr/sbin:/bin"


@dataclass
class Metric:
    key: str
    label: str
    unit: str
    lower_is_better: bool = True


# Rows whose Slurm command is another row's: its stored figure is that row's.
STORED_AS = {"sbatch_version_alone": "sbatch_version"}


def metrics(n: int, serial: int) -> list[Metric]:
    return [
        Metric("sbatch_version", "`sbatch --version`", "ms"),
        Metric("sbatch_version_alone", "`sbatch --version`, no command server (cold start)", "ms"),
        Metric("squeue_idle", "`squeue`, idle", "ms"),
        Metric("sinfo", "`sinfo`", "ms"),
        Metric("sbatch_hold", "`sbatch --hold --wrap true` per call", "ms"),
        Metric("squeue_pending", f"`squeue` with {n:,} pending", "ms"),
        Metric("scontrol_show_job", f"`scontrol show job $(squeue -h -o %i | head -1)`, {n:,} pending", "ms"),
        Metric("scontrol_one", f"`scontrol show job <id>` alone, {n:,} pending", "ms"),
        Metric("squeue_one", f"`squeue -j <id>`, {n:,} pending", "ms"),
        Metric("scancel_pending", f"`scancel --state=PENDING`, {n:,} jobs", "ms"),
        Metric("srun_n1", "`srun -N1 true`", "ms"),
        Metric("srun_n2", "`srun -N2 -n4 true`", "ms"),
        Metric("srun_n8", "`srun -N8 -n64 true`", "ms"),
        Metric("serial_jobs", f"{serial} serial trivial sbatch jobs until the queue is empty", "jobs/s", False),
        Metric("array_tasks", f"array 1-{n} of trivial tasks until the queue is empty", "tasks/s", False),
    ]


class System:
    """One workload manager's commands, run through the shell with their environment."""

    def __init__(self, name: str, env: dict[str, str], cwd: str) -> None:
        self.name, self.env, self.cwd = name, env, cwd

    def run(self, cmd: str, check: bool = True, timeout: float = 300) -> tuple[float, str]:
        t0 = time.perf_counter()
        p = subprocess.run(cmd, shell=True, env=self.env, cwd=self.cwd, capture_output=True, text=True, timeout=timeout)
        took = time.perf_counter() - t0
        if check and p.returncode != 0:
            raise RuntimeError(f"{self.name}: {cmd}: exit {p.returncode}: {p.stderr.strip()[:300]}")
        return took, p.stdout

    def median_ms(self, cmd: str, reps: int) -> float:
        return statistics.median(self.run(cmd)[0] for _ in range(reps)) * 1000

    def queue_empty(self, limit: float = 900) -> None:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < limit:
            if not self.run("squeue -h -o %i")[1].strip():
                return
            time.sleep(0.2)
        raise RuntimeError(f"{self.name}: the queue is not empty after {limit:.0f} s")

    def no_ended_jobs(self, limit: float = 330) -> None:
        """Wait until the system holds no ended jobs either (as a new muster cluster holds
        none). Real Slurm restarted on its saved state keeps the last run's thousands of
        ended jobs for MinJobAge (300 s in the anchor), and its squeue fetches them all and
        filters them out itself: measured then, its queries would be slowed by them."""
        t0, said = time.perf_counter(), False
        while time.perf_counter() - t0 < limit:
            held = len(self.run("squeue -h -t all -o %i")[1].split())
            if not held:
                return
            if not said:
                print(f"{self.name} holds {held} ended jobs of an earlier run: waiting for their purge", flush=True)
                said = True
            time.sleep(5)
        print(f"{self.name}: ended jobs still held after {limit:.0f} s: its query figures include them", flush=True)

    def first_job(self) -> str:
        return self.run("squeue -h -o %i | head -1")[1].strip()


def measurements(reps: int, n: int, serial: int) -> dict[str, Callable[[System], float]]:
    """What each metric runs on a system (in this order: some leave the queue as the next
    one needs it)."""

    def fill(s: System) -> float:
        s.run("scancel --state=PENDING", check=False)
        for _ in range(n):
            s.run("sbatch --hold --wrap true")
        return 0.0

    def throughput(s: System) -> float:
        t0 = time.perf_counter()
        for _ in range(serial):
            s.run("sbatch --wrap true -o /dev/null")
        s.queue_empty()
        return serial / (time.perf_counter() - t0)

    def array(s: System) -> float:
        t0 = time.perf_counter()
        s.run(f"sbatch --array=1-{n} --wrap true -o /dev/null")
        s.queue_empty()
        return n / (time.perf_counter() - t0)

    def cancel(s: System) -> float:
        took = s.run("scancel --state=PENDING")[0] * 1000
        s.queue_empty()
        return took

    return {
        "sbatch_version": lambda s: s.median_ms("sbatch --version", reps),
        # Each muster command its own interpreter, as where nothing could compile the client
        # (cli.cmdserver); the variable means nothing to Slurm.
        "sbatch_version_alone": lambda s: s.median_ms("MUSTER_CMD_SERVER=0 sbatch --version", reps),
        "squeue_idle": lambda s: s.median_ms("squeue", reps),
        "sinfo": lambda s: s.median_ms("sinfo", reps),
        "sbatch_hold": lambda s: s.median_ms("sbatch --hold --wrap true", reps),
        "_fill": fill,
        "squeue_pending": lambda s: s.median_ms("squeue", reps),
        "scontrol_show_job": lambda s: s.median_ms("scontrol show job $(squeue -h -o %i | head -1)", reps),
        "scontrol_one": lambda s: s.median_ms(f"scontrol show job {s.first_job()}", reps),
        "squeue_one": lambda s: s.median_ms(f"squeue -j {s.first_job()}", reps),
        "scancel_pending": cancel,
        "srun_n1": lambda s: s.median_ms("srun -N1 true", reps),
        "srun_n2": lambda s: s.median_ms("srun -N2 -n4 true", reps),
        "srun_n8": lambda s: s.median_ms("srun -N8 -n64 true", max(3, reps // 2)),
        "serial_jobs": throughput,
        "array_tasks": array,
    }


def compile_muster() -> None:
    """Bring muster's .pyc files up to date: with bytecode writing turned off (as in this
    workplace's shell), a source edited since ``make install`` would be compiled again by
    every command it measures."""
    python = os.path.join(BIN, "python")
    where = subprocess.run(
        [python, "-c", "import muster, os; print(os.path.dirname(muster.__file__))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    subprocess.run([python, "-m", "compileall", "-q", where], check=True, capture_output=True)


def start_muster(state: str) -> System:
    compile_muster()
    muster = os.path.join(BIN, "muster")
    base = {k: v for k, v in os.environ.items() if k not in ("MUSTER_CONF", "SLURM_CONF")}
    env = dict(base, PATH=f"{BIN}:/usr/bin:/bin")
    up = subprocess.run(
        [muster, "up", "--nodes", "8", "--gpus-per-node", "8", "--state-dir", state],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    conf = os.path.join(state, "muster.conf")
    if up.returncode != 0 or not os.path.exists(conf):
        raise SystemExit(f"muster up failed: {up.stdout[-500:]} {up.stderr[-500:]}")
    env["MUSTER_CONF"] = conf
    # `muster up` has started the user's command server (cli/cmdserver.py), as a session's
    # first command would; the no-server row measures every command by itself.
    return System("muster", env, state)


def stop_muster(state: str) -> None:
    subprocess.run(
        [os.path.join(BIN, "muster"), "down", "--state-dir", state], capture_output=True, timeout=120, check=False
    )


def start_slurm(anchor: str, cwd: str) -> tuple[System, bool] | None:
    """Bring up the anchor's real Slurm; returns it and whether this run started it, or None
    when it cannot be brought up (said on stderr).

    On a fresh machine the anchor's first start installs the packages and initialises
    MariaDB, and its wait for slurmdbd can run out before the database is ready; a pid file
    of what it did start is left behind, which the next setup would take for a running
    cluster. So a failed setup is stopped and tried once more.

    The anchor's scripts run with the system's PATH alone: with muster's venv first in PATH
    (as ``make bench`` and a developer's shell have it), its wait for slurmdbd would ask
    muster's ``sacctmgr`` and time out against a healthy slurmdbd."""
    base = {k: v for k, v in os.environ.items() if k not in ("MUSTER_CONF", "SLURM_CONF")}
    env = dict(base, SLURM_CONF="/etc/slurm/slurm.conf", PATH=SLURM_PATH)
    for attempt in (1, 2):
        setup = subprocess.run(
            ["bash", os.path.join(anchor, "setup.sh")], env=env, capture_output=True, text=True, timeout=1800
        )
        if setup.returncode == 0:
            break
        print(
            f"{anchor}/setup.sh failed (attempt {attempt}): {setup.stdout[-300:]} {setup.stderr[-300:]}",
            file=sys.stderr,
        )
        stop_slurm(anchor)
    else:
        return None
    return System("slurm", env, cwd), "already running" not in setup.stdout


def stop_slurm(anchor: str) -> None:
    env = dict(os.environ, PATH=SLURM_PATH)
    subprocess.run(["bash", os.path.join(anchor, "stop.sh")], env=env, capture_output=True, timeout=300, check=False)


def stored_slurm() -> dict:
    with open(os.path.join(HERE, "slurm_stored.json")) as f:
        return json.load(f)


def table(rows: list[dict], slurm_note: str) -> str:
    lines = [f"| metric | Slurm{slurm_note} | muster | muster/Slurm |", "|---|---|---|---|"]
    for r in rows:
        slurm = "—" if r["slurm"] is None else f"{r['slurm']:.1f} {r['unit']}"
        ratio = "—" if r["ratio"] is None else f"{r['ratio']:.2f}"
        lines.append(f"| {r['label']} | {slurm} | {r['muster']:.1f} {r['unit']} | {ratio} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a reduced run that checks the benchmark works")
    ap.add_argument("--reps", type=int, default=None, help="repetitions per latency (default 20; 5 with --quick)")
    ap.add_argument("--anchor", default=os.environ.get("SLURM_ANCHOR") or None, help="real Slurm's setup dir")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    ap.add_argument("--bin", default=None, help="where muster's commands are (default: next to this python)")
    args = ap.parse_args()
    global BIN
    BIN = os.path.abspath(args.bin) if args.bin else BIN
    reps = args.reps or (5 if args.quick else 20)
    n, serial = (100, 30) if args.quick else (1000, 300)
    anchor = args.anchor if args.anchor and os.path.exists(os.path.join(args.anchor, "setup.sh")) else None
    work = tempfile.mkdtemp(prefix="muster-sbs.")
    state = os.path.join(work, "muster")
    systems = [start_muster(state)]
    started_slurm = False
    stored = None
    live = start_slurm(anchor, work) if anchor else None
    if anchor and live is None:
        print("real Slurm could not be started: its stored figures are shown instead", file=sys.stderr, flush=True)
        anchor = None
    if live is not None:
        slurm, started_slurm = live
        slurm.no_ended_jobs()
        systems.insert(0, slurm)  # alternate, Slurm first
    else:
        stored = stored_slurm()
    note = "" if anchor else f" (stored {stored['stored']}, not this run)" if stored else ""
    if stored and not args.quick:
        print(f"Slurm figures: stored {stored['stored']} ({stored['source']}); muster measured now.", flush=True)
    elif stored:
        print("--quick: reduced sizes; the stored Slurm figures are shown for orientation only.", flush=True)
    rows = []
    try:
        plan = measurements(reps, n, serial)
        by_key = {m.key: m for m in metrics(n, serial)}
        for key in plan:
            values = {s.name: plan[key](s) for s in systems}
            if key.startswith("_"):
                continue
            m = by_key[key]
            ours = values["muster"]
            theirs = values.get("slurm", stored["figures"].get(STORED_AS.get(key, key)) if stored else None)
            ratio = None
            if theirs:
                ratio = ours / theirs
            rows.append({"key": key, "label": m.label, "unit": m.unit, "muster": ours, "slurm": theirs, "ratio": ratio})
            print(
                f"{m.label:<70} muster {ours:9.1f} {m.unit:<7} slurm "
                f"{'—' if theirs is None else f'{theirs:9.1f}'} ratio {'—' if ratio is None else f'{ratio:.2f}'}",
                flush=True,
            )
    finally:
        stop_muster(state)
        if started_slurm and anchor:
            stop_slurm(anchor)
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(table(rows, note))
    print("\nratios are muster/Slurm: below 1 is faster for times, above 1 is faster for rates")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"when": time.strftime("%Y-%m-%d %H:%M"), "quick": args.quick, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
