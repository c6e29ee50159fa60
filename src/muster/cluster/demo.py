"""``muster demo``: a local cluster and a small mixed workload, shown as a user sees it.

It starts (or reuses) a local cluster, submits a few jobs the way a training team would
(GPU jobs through ``#SBATCH`` scripts, a multi-node job, a job that fails, a held job),
shows ``squeue`` and ``sinfo`` while they run and the results when they end, and leaves
the cluster up with the lines needed to use it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from muster.cluster.local import ClusterShape, LocalCluster

TRAIN_SCRIPT = """#!/bin/bash
#SBATCH --job-name=train-small
#SBATCH --gres=gpu:4
#SBATCH --time=5:00
#SBATCH --output=train-%j.out
echo "job $SLURM_JOB_ID on $SLURMD_NODENAME, GPUs $CUDA_VISIBLE_DEVICES"
for step in 1 2 3; do echo "step $step"; sleep 1; done
echo done
"""

EVAL_SCRIPT = """#!/bin/bash
#SBATCH --job-name=eval
#SBATCH --gres=gpu:1
#SBATCH --time=1:00
#SBATCH --output=eval-%j.out
echo "evaluating on GPU $CUDA_VISIBLE_DEVICES"
sleep 2
"""

BIG_SCRIPT = """#!/bin/bash
#SBATCH --job-name=pretrain
#SBATCH --nodes=2
#SBATCH --gres=gpu:8
#SBATCH --exclusive
#SBATCH --time=10:00
#SBATCH --output=pretrain-%j.out
echo "pretraining on $SLURM_JOB_NODELIST ($SLURM_JOB_NUM_NODES nodes), GPUs $CUDA_VISIBLE_DEVICES"
sleep 4
"""


def _sh(argv: list[str], env: dict[str, str], cwd: str) -> str:
    out = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    text = out.stdout + out.stderr
    return text


def _show(title: str, text: str) -> None:
    print(f"\n$ {title}")
    print(text.rstrip())


def run_demo(cluster: LocalCluster, nodes: int, gpus_per_node: int) -> int:
    if not cluster.exists:
        cluster.create(ClusterShape(nodes=nodes, gpus_per_node=gpus_per_node))
    print(f"Starting a local cluster in {cluster.state_dir} ...")
    cluster.start()
    cluster.wait_ready(60)
    bindir = os.path.dirname(sys.executable)
    env = dict(os.environ, MUSTER_CONF=cluster.conf_path, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    work = os.path.join(cluster.state_dir, "work")
    os.makedirs(work, exist_ok=True)
    scripts = {"train.sbatch": TRAIN_SCRIPT, "eval.sbatch": EVAL_SCRIPT, "pretrain.sbatch": BIG_SCRIPT}
    for name, text in scripts.items():
        with open(os.path.join(work, name), "w") as f:
            f.write(text)

    _show("sinfo", _sh(["sinfo"], env, work))
    submissions = [
        ["sbatch", "pretrain.sbatch"],
        ["sbatch", "train.sbatch"],
        ["sbatch", "train.sbatch"],
        ["sbatch", "eval.sbatch"],
        ["sbatch", "--job-name=broken", "--wrap", "echo oops >&2; exit 3"],
        ["sbatch", "--hold", "--job-name=later", "--wrap", "echo later"],
    ]
    ids = []
    for argv in submissions:
        text = _sh(argv, env, work)
        _show(" ".join(argv), text)
        ids.append(text.strip().split()[-1])
    time.sleep(1.0)
    _show("squeue", _sh(["squeue"], env, work))
    _show("sinfo", _sh(["sinfo"], env, work))

    deadline = time.monotonic() + 60
    active = [i for i in ids[:-1]]
    while time.monotonic() < deadline:
        left = _sh(["squeue", "-h", "-o", "%i", "-j", ",".join(active)], env, work).split()
        if not [x for x in left if x in active]:
            break
        time.sleep(0.5)
    _show(f"squeue -t all -j {','.join(ids)}", _sh(["squeue", "-t", "all", "-j", ",".join(ids)], env, work))
    for i in ids[:1]:
        _show(f"scontrol show job {i}", _sh(["scontrol", "show", "job", i], env, work))
    for name in sorted(os.listdir(work)):
        if name.endswith(".out"):
            _show(f"cat {name}", open(os.path.join(work, name)).read())
    _sh(["scancel", ids[-1]], env, work)
    print("\nThe cluster is still up. Use it with:")
    print(f"  export MUSTER_CONF={cluster.conf_path}")
    print(f"  export PATH={bindir}:$PATH")
    print(f"  cd {work} && sbatch --wrap 'nvidia-smi || echo $CUDA_VISIBLE_DEVICES' && squeue")
    print(f"Stop it with: muster down --state-dir {cluster.state_dir}   (or: make down)")
    return 0
