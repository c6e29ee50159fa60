"""Issue 4's check, with real PyTorch: ``sbatch -N2 --ntasks-per-node=2 --gres=gpu:2
examples/train.sbatch`` on a local cluster whose nodes are distinct loopback addresses.
Four ranks on two nodes initialise torch.distributed (gloo) from the environment alone,
the all-reduce agrees, every rank sees both of its node's GPUs (Slurm's default binding), and a second run resumes from the
first one's checkpoint."""

from __future__ import annotations

import os
import pathlib
import re
import sys

import pytest

from harness import Harness

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def _torch_or_skip() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        pytest.skip("PyTorch is not installed: `make install` (or pip install -e '.[e2e]') installs torch==2.13.0")


def submit(cluster: Harness, *args: str, env: dict[str, str]) -> int:
    return cluster.sbatch("-N2", "--ntasks-per-node=2", "--gres=gpu:2", str(EXAMPLES / "train.sbatch"), *args, env=env)


def test_ddp_training_finds_its_peers_from_the_environment_and_resumes(cluster: Harness) -> None:
    _torch_or_skip()
    ckpt = os.path.join(cluster.workdir, "ddp-ckpt")
    env = {"TRAIN_SCRIPT": str(EXAMPLES / "train_ddp.py"), "PYTHON": sys.executable, "CKPT_DIR": ckpt}
    job_id = submit(cluster, "--steps", "20", "--ckpt-every", "10", env=env)
    job = cluster.wait_job(job_id, timeout=240)
    text = cluster.read(f"train-{job_id}.out")
    assert job["state"] == "COMPLETED", text

    starts = re.findall(
        r"^(\d): \[rank (\d)\] world=4 local_rank=(\d) node=(\S+) backend=gloo device=cpu "
        r"cuda_visible=(\S*) master=(\S+)$",
        text,
        re.M,
    )
    assert sorted(s[1] for s in starts) == ["0", "1", "2", "3"], text
    assert all(label == rank for label, rank, *_ in starts)
    nodes: dict[str, set[str]] = {}
    locals_: dict[str, set[str]] = {}
    for _label, _rank, local, node, cuda, master in starts:
        assert cuda == "0,1", "every rank sees its node's two GPUs (Slurm's default)"
        nodes.setdefault(node, set()).add(cuda)
        locals_.setdefault(node, set()).add(local)  # and picks cuda:LOCAL_RANK among them
        assert master.startswith("127.0.0.")
    assert len(nodes) == 2 and all(v == {"0,1"} for v in nodes.values())
    assert all(v == {"0", "1"} for v in locals_.values())
    assert len({s[5] for s in starts}) == 1  # one rendezvous for all
    assert len(re.findall(r"allreduce ok sum=6 expected=6", text)) == 4
    assert len(re.findall(r"done steps=20 .* replicas_agree=True", text)) == 4
    assert os.path.exists(os.path.join(ckpt, "last.pt"))

    again = submit(cluster, "--steps", "30", "--ckpt-every", "10", env=env)
    job = cluster.wait_job(again, timeout=240)
    text = cluster.read(f"train-{again}.out")
    assert job["state"] == "COMPLETED", text
    assert "[rank 0] resumed from step 20" in text
    assert len(re.findall(r"done steps=30 .* replicas_agree=True", text)) == 4
