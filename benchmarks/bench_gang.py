"""Issue 40 item 2: a gang of K nodes from eligible to every task running, and from its end
to every node idle again, at three sizes on real daemons (emulated nodes, agents hosting
``--nodes-per-agent`` nodes each).

One cluster of the largest size (8-GPU nodes) is started once; each size then submits one
exclusive ``sbatch -NK --gres=gpu:8`` whose script runs ``srun`` over every node; each task
writes its rendezvous environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) into a file
of its own, then sleeps. Measured per size, from the submission (a job with no dependency
is eligible at once):

* ``running``: the controller reports the job RUNNING (allocation and batch launch);
* ``all tasks``: the K task files exist (every task has started and read its environment);
  their content is checked (K distinct ranks, WORLD_SIZE=K, one MASTER_ADDR);
* ``end -> idle``: from ``scancel`` to the job ended, no longer completing, and every node
  of the cluster IDLE again.

Run it under ``nice`` on a shared machine; it prints each size and the growth.

    nice -n 19 .venv/bin/python benchmarks/bench_gang.py [--sizes 256,512,1024]
        [--nodes-per-agent 64] [--rounds 1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from harness import Harness  # noqa: E402
from muster.cluster.local import ClusterShape  # noqa: E402

TASK = "echo $RANK $WORLD_SIZE $MASTER_ADDR $MASTER_PORT > {dir}/r.$SLURM_PROCID; exec sleep 3600"


def start_cluster(nodes: int, per_agent: int, settings: dict[str, str] | None = None) -> Harness:
    """A cluster of ``nodes`` 8-GPU emulated nodes, ``per_agent`` per agent process, up."""
    h = Harness(
        ClusterShape(nodes=nodes, gpus_per_node=8, cpus_per_node=64, mem_per_node=512000, nodes_per_agent=per_agent),
        settings={"SlurmdTimeout": "300", **(settings or {})},
    )
    h.cluster.create(h.shape, h.settings, h.topology)
    try:
        h.cluster.start()
        h.cluster.wait_ready(max(180.0, nodes / 4))
    except BaseException:  # interrupted or failed while starting: stop what did start
        h.down()
        raise
    return h


def wait_until(check: Any, timeout: float, what: str, every: float = 0.02) -> float:
    """Poll ``check`` until it is true; the seconds it took."""
    t0 = time.perf_counter()
    while not check():
        if time.perf_counter() - t0 > timeout:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)
    return time.perf_counter() - t0


def all_idle(h: Harness) -> bool:
    return all(s == "IDLE" for s in h.node_states().values())


def gang(h: Harness, k: int) -> dict[str, Any]:
    out_dir = os.path.join(h.workdir, f"gang{k}-{time.monotonic_ns()}")
    os.makedirs(out_dir)
    os.chmod(out_dir, 0o1777)
    script = "srun sh -c '" + TASK.format(dir=out_dir) + "'"
    t0 = time.perf_counter()
    job_id = h.sbatch(f"-N{k}", "--exclusive", "--gres=gpu:8", "-o", os.path.join(out_dir, "out"), "--wrap", script)
    submitted = time.perf_counter() - t0
    running = submitted + wait_until(lambda: h.job(job_id)["state"] == "RUNNING", 300, f"job {job_id} RUNNING", 0.01)

    def count() -> int:
        return sum(1 for n in os.listdir(out_dir) if n.startswith("r."))

    def srun_errors() -> list[str]:
        try:
            with open(os.path.join(out_dir, "out")) as f:
                return [line.strip() for line in f if line.startswith("srun: error")]
        except FileNotFoundError:
            return []

    def tasks_up() -> bool:
        if h.job(job_id)["state"] not in ("PENDING", "RUNNING"):
            raise SystemExit(f"gang {job_id} ended early: {h.job(job_id)['state']}; {out_dir}/out")
        return count() >= k or bool(srun_errors())

    wait_until(tasks_up, 300, f"{k} tasks of job {job_id}")
    all_tasks = time.perf_counter() - t0
    errors = srun_errors()
    if errors:  # srun gave up on some nodes (e.g. no answer within MessageTimeout): say so
        time.sleep(2.0)  # the rest of its error lines
        errors = srun_errors()
        all_tasks = float("nan")
    ranks, worlds, masters = set(), set(), set()
    for name in os.listdir(out_dir):
        if name.startswith("r."):
            with open(os.path.join(out_dir, name)) as f:
                fields = f.read().split()
            if len(fields) == 4:
                ranks.add(fields[0])
                worlds.add(fields[1])
                masters.add(fields[2])
    count_at_end = count()
    env_ok = len(ranks) == k and worlds == {str(k)} and len(masters) == 1
    cancel = h.run(["scancel", str(job_id)])
    assert cancel.returncode == 0, cancel.stderr
    ended = wait_until(
        lambda: (j := h.job(job_id))["state"] not in ("PENDING", "RUNNING") and not j["completing"],
        300,
        f"job {job_id} to end",
    )
    idle = ended + wait_until(lambda: all_idle(h), 300, "every node idle", 0.05)
    shutil.rmtree(out_dir, ignore_errors=True)
    return {
        "k": k,
        "submit_s": submitted,
        "running_s": running,
        "all_tasks_s": all_tasks,
        "env_ok": float(env_ok),
        "ended_s": ended,
        "idle_s": idle,
        "tasks": float(count_at_end),
        "srun_errors": float(len(errors)),
        "first_error": errors[0] if errors else "",  # type: ignore[dict-item]
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="256,512,1024", help="gang sizes in nodes (the cluster has the largest)")
    ap.add_argument("--nodes-per-agent", type=int, default=64)
    ap.add_argument(
        "--message-timeout",
        type=int,
        default=10,
        help="MessageTimeout (Slurm's default 10 s; srun waits this long per link)",
    )
    ap.add_argument("--rounds", type=int, default=1, help="gangs per size (the best and worst are printed)")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    nodes = max(sizes)
    t0 = time.perf_counter()
    h = start_cluster(nodes, args.nodes_per_agent, {"MessageTimeout": str(args.message_timeout)})
    results: list[dict[str, Any]] = []
    try:
        print(
            f"cluster of {nodes} nodes ({args.nodes_per_agent} per agent, "
            f"{-(-nodes // args.nodes_per_agent)} agents) up in {time.perf_counter() - t0:.1f} s; "
            f"load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        for k in sizes:
            for rnd in range(args.rounds):
                r = gang(h, k)
                results.append(r)
                if r["srun_errors"]:
                    print(
                        f"gang of {k} nodes (round {rnd + 1}): srun reported {r['srun_errors']:.0f} errors after "
                        f"{r['tasks']:.0f} of {k} tasks started, e.g. {r['first_error']!r}",
                        flush=True,
                    )
                print(
                    f"gang of {k} nodes (round {rnd + 1}): sbatch {r['submit_s']:.2f} s, RUNNING after "
                    f"{r['running_s']:.2f} s, all {k} tasks running after {r['all_tasks_s']:.2f} s "
                    f"(rendezvous env {'ok' if r['env_ok'] else 'WRONG'}); scancel -> ended {r['ended_s']:.2f} s, "
                    f"-> every node idle {r['idle_s']:.2f} s; load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    finally:
        h.down()
    print("\ngrowth (best of the rounds per size):")
    print(f"{'nodes':>8}{'RUNNING s':>12}{'all tasks s':>13}{'ended s':>10}{'idle s':>9}{'tasks/s':>9}")
    base: dict[str, float] | None = None
    for k in sizes:
        rows = [r for r in results if r["k"] == k]
        best = {key: min(float(r[key]) for r in rows) for key in ("running_s", "all_tasks_s", "ended_s", "idle_s")}
        growth = ""
        if base is not None:
            growth = f"   x{best['all_tasks_s'] / base['all_tasks_s']:.2f} start, x{best['idle_s'] / base['idle_s']:.2f} end vs {sizes[0]}"
        else:
            base = best
        print(
            f"{k:>8}{best['running_s']:>12.2f}{best['all_tasks_s']:>13.2f}{best['ended_s']:>10.2f}"
            f"{best['idle_s']:>9.2f}{k / best['all_tasks_s']:>9.0f}{growth}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
