"""Issue 2's figures: command start-up, serial submission latency, throughput of 1,000
trivial jobs from first submit to all done, and squeue over 1,000 pending jobs, next to
real Slurm 22.05 here.

Issue 20's figure first: ``sbatch --hold --wrap true`` per call, each a cold process, as
the median of ``--hold-calls`` calls, with what it costs in CPU time: the command's own
(user + system, from ``wait4``) and the controller's per submission (its ``/proc`` times
over all the calls, scheduling passes included). CPU times are the figures to compare on
a shared machine; wall times move with the neighbours. ``--hold-only`` stops there;
``--sbatch PATH`` times another build's launcher against this cluster.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time

from common import SLURM, local_cluster, median, report, time_calls

from harness import Harness


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def hold_per_call(h: Harness, n: int, sbatch: str = "sbatch") -> dict[str, float]:
    """``n`` cold ``sbatch --hold --wrap true`` calls, one after the other: median wall
    and client CPU ms per call, and the controller's CPU ms per submission."""
    ctld = next(d.pid for d in h.cluster.status() if d.role == "controller" and d.pid is not None)
    argv = [sbatch, "--hold", "--wrap", "true"]
    env = h.env
    wall, cpu = [], []
    before = _cpu_seconds(ctld)
    for _ in range(n):
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, cwd=h.workdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall.append((time.perf_counter() - t0) * 1000)
        cpu.append((usage.ru_utime + usage.ru_stime) * 1000)
        err = proc.stderr.read() if proc.stderr else b""
        if proc.stderr:
            proc.stderr.close()
        if status != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {err.decode(errors='replace')}")
    time.sleep(0.5)  # the pass the last submission asked for
    ctld_ms = (_cpu_seconds(ctld) - before) * 1000 / n
    return {"wall": median(wall), "cpu": median(cpu), "ctld": ctld_ms}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--submits", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--hold-calls", type=int, default=100, help="sbatch --hold calls timed (at least 50)")
    ap.add_argument("--hold-only", action="store_true", help="only the sbatch --hold figures")
    ap.add_argument("--sbatch", default="sbatch", help="the sbatch launcher to time for --hold")
    ap.add_argument("--nodes", type=int, default=4, help="nodes of 8 GPUs (issue 20 measured with 8)")
    args = ap.parse_args()
    with local_cluster(nodes=args.nodes) as h:
        time_calls(h, ["sbatch", "--hold", "--wrap", "true"], 5)  # warm the page cache
        held = hold_per_call(h, max(50, args.hold_calls), args.sbatch)
        print(
            f"{'sbatch --hold --wrap true (ms)':<36} muster {held['wall']:10.2f}   "
            f"client CPU {held['cpu']:.2f} ms (median), controller CPU {held['ctld']:.2f} ms per submission"
        )
        if args.hold_only:
            return
        time_calls(h, ["scancel", "--state=PENDING"], 1)
        version = time_calls(h, ["sbatch", "--version"], 30)
        report("sbatch --version (ms)", median(version))
        lat = time_calls(h, ["sbatch", "--wrap=true"], args.submits)
        report("sbatch --wrap=true (ms)", median(lat))
        q = sorted(lat)
        print(f"{'':<36} p10 {q[len(q) // 10]:.1f}  p90 {q[9 * len(q) // 10]:.1f}  mean {statistics.mean(q):.1f} ms")
        # wait for the queue to drain before the throughput run
        while h.cluster.api("GET", "/v1/jobs?state=PD,R,CG")["jobs"]:
            time.sleep(0.2)
        t0 = time.perf_counter()
        time_calls(h, ["sbatch", "--wrap=true"], args.jobs)
        submitted = time.perf_counter() - t0
        while h.cluster.api("GET", "/v1/jobs?state=PD,R,CG")["jobs"]:
            time.sleep(0.1)
        total = time.perf_counter() - t0
        rate = args.jobs / total
        report("1000 jobs submit->done (jobs/s)", rate, unit_lower_is_better=False)
        print(
            f"{'':<36} submit phase {submitted:.1f} s, all done after {total:.1f} s "
            f"(Slurm: {args.jobs / SLURM['1000 jobs submit->done (jobs/s)']:.1f} s)"
        )
        # squeue over a long queue: one held array of 1,000 tasks (squeue merges them into
        # one row, as Slurm does; -r lists all 1,000 as Slurm's measurement did)
        h.sbatch("--hold", "--array=0-999", "--wrap=true")
        report("squeue, 1000 pending (ms)", median(time_calls(h, ["squeue", "-r"], 20)))


if __name__ == "__main__":
    main()
