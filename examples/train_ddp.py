#!/usr/bin/env python3
"""A small PyTorch model trained with DistributedDataParallel, started by ``srun``.

Everything comes from the environment muster (like torchrun) gives every task: ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``, so that
``torch.distributed.init_process_group()`` needs no arguments. The backend is NCCL when
CUDA is there and gloo otherwise. By default (Slurm's, and muster's) every task sees all of
the step's GPUs on its node and takes ``cuda:LOCAL_RANK``; when ``--gpu-bind`` or
``--gpus-per-task`` gives each task its own (fewer than ``SLURM_GPUS_ON_NODE``), it takes
the first of its own, ``cuda:0``.

Checkpoints: every ``--ckpt-every`` steps rank 0 writes ``<ckpt-dir>/last.pt`` (atomically:
a temporary file, then a rename). Started with a checkpoint present, every rank loads it and
training goes on from the step after it; rank 0 logs ``resumed from step S``. The default
directory is ``$CKPT_DIR``, else ``checkpoints/job-$SLURM_JOB_ID``: a requeued job (same
job id) finds its own checkpoints again.

Run it: ``srun -N2 --ntasks-per-node=2 python examples/train_ddp.py --steps 50``, or submit
``examples/train.sbatch``.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

try:  # muster's progress reports (hang detection, goodput); a no-op outside muster jobs
    from muster import progress
except ImportError:  # muster not installed where this runs
    progress = None


def log(rank: int, text: str) -> None:
    print(f"[rank {rank}] {text}", flush=True)


def pick_device(local_rank: int) -> torch.device:
    if not torch.cuda.is_available():
        return torch.device("cpu")
    count = torch.cuda.device_count()
    on_node = int(os.environ.get("SLURM_GPUS_ON_NODE") or count)
    # all of the node's step GPUs visible: one each by local rank; else the task's own first
    index = local_rank % count if count >= on_node else 0
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def make_model() -> nn.Module:
    torch.manual_seed(0)  # every rank starts from the same weights (DDP checks it too)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))


def batch(step: int, rank: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic data: y = sum(x) plus noise; each rank its own shard of every step."""
    g = torch.Generator().manual_seed(step * 1000 + rank)
    x = torch.randn(32, 16, generator=g)
    y = x.sum(dim=1, keepdim=True) + 0.01 * torch.randn(32, 1, generator=g)
    return x.to(device), y.to(device)


def save(path: str, step: int, model: nn.Module, opt: torch.optim.Optimizer) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, tmp)
    os.replace(tmp, path)


def more(step: int, steps: int, until: str | None, device: torch.device) -> bool:
    """Whether to run ``step``: up to ``steps``, then, with ``until``, while that file is
    missing. Rank 0 looks and tells the others, so that every rank stops at the same step."""
    if step <= steps:
        return True
    if until is None:
        return False
    go_on = torch.tensor([0.0 if os.path.exists(until) else 1.0], device=device)
    dist.broadcast(go_on, src=0)
    return bool(go_on.item())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=50, help="total training steps")
    ap.add_argument("--ckpt-every", type=int, default=10, help="checkpoint every N steps (0: never)")
    ap.add_argument(
        "--ckpt-dir", default=None, help="checkpoint directory (default: $CKPT_DIR or checkpoints/job-$SLURM_JOB_ID)"
    )
    ap.add_argument("--sleep", type=float, default=0.0, help="seconds to sleep per step (to watch it)")
    ap.add_argument(
        "--until",
        default=None,
        metavar="FILE",
        help="after --steps, go on until FILE exists (seen by rank 0, agreed by all: a rehearsal's job that must outlast it)",
    )
    ap.add_argument("--lr", type=float, default=0.01)
    args = ap.parse_args()

    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)  # MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE from the env
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(local_rank)
    log(
        rank,
        (
            f"world={world} local_rank={local_rank} node={os.environ.get('SLURMD_NODENAME', socket.gethostname())} "
            f"backend={backend} device={device} cuda_visible={os.environ.get('CUDA_VISIBLE_DEVICES', '')} "
            f"master={os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
        ),
    )

    # Every rank contributes its rank: the sum must be 0 + 1 + ... + (world - 1) everywhere.
    probe = torch.tensor([float(rank)], device=device)
    dist.all_reduce(probe)
    expected = world * (world - 1) / 2
    ok = abs(probe.item() - expected) < 1e-6
    log(rank, f"allreduce {'ok' if ok else 'MISMATCH'} sum={probe.item():g} expected={expected:g}")
    if not ok:
        return 1

    ckpt_dir = (
        args.ckpt_dir
        or os.environ.get("CKPT_DIR")
        or os.path.join("checkpoints", f"job-{os.environ.get('SLURM_JOB_ID', 'local')}")
    )
    ckpt = os.path.join(ckpt_dir, "last.pt")
    model = make_model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    start = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt, map_location="cpu")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = int(state["step"])
        if rank == 0:
            log(rank, f"resumed from step {start}")
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    loss_fn = nn.MSELoss()

    loss = torch.tensor(0.0)
    step = start
    while more(step + 1, args.steps, args.until, device):
        step += 1
        x, y = batch(step, rank, device)
        opt.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        if progress is not None:
            progress.step(step)  # every rank: a rank that stops shows on its node
        if rank == 0 and (step % 10 == 0 or step == args.steps):
            log(rank, f"step {step} loss {loss.item():.4f}")
        if args.ckpt_every and step % args.ckpt_every == 0:
            if rank == 0:
                save(ckpt, step, model, opt)
                log(rank, f"checkpoint at step {step}")
                if progress is not None:
                    progress.checkpoint(step)  # once the file is safely renamed in place
            dist.barrier()  # nobody races ahead of a checkpoint that may be needed
        if args.sleep:
            time.sleep(args.sleep)

    # The replicas must agree: DDP averaged every gradient.
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    mine = flat.clone()
    dist.all_reduce(flat)
    same = torch.allclose(flat / world, mine, atol=1e-5)
    log(rank, f"done steps={step} final_loss={loss.item():.4f} replicas_agree={same}")
    # Everyone is done communicating before anyone tears down: a rank that destroys its
    # process group (rank 0 also hosts the rendezvous store) while a peer is still in a
    # collective can make gloo abort at exit ("terminate called without an active exception").
    dist.barrier()
    dist.destroy_process_group()
    return 0 if same else 1


if __name__ == "__main__":
    code = main()
    # Leave without running the C++ runtime's exit-time destructors: torch's gloo and store
    # threads can still be joinable then, and a destructor of one aborts a process whose work
    # is done and checkpointed ("terminate called without an active exception", seen about
    # once in a few dozen runs on rank 0, which hosts the rendezvous store).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
