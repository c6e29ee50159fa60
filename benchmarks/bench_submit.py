"""Issue 2's figures: command start-up, serial submission latency, throughput of 1,000
trivial jobs from first submit to all done, and squeue over 1,000 pending jobs, next to
real Slurm 22.05 here."""

from __future__ import annotations

import argparse
import statistics
import time

from common import SLURM, local_cluster, median, report, time_calls


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--submits", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=1000)
    args = ap.parse_args()
    with local_cluster() as h:
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
