"""The pre-flight gate's all-reduce: one small ``torch.distributed`` all-reduce across a job's
nodes (gloo; NCCL where the node's GPUs are real and the job has some here), rendezvous at the
job's first node; one rank per node, run by the agent (``agent.preflight``) in a child process
(``python -m muster.agent.allreduce``) so that importing torch costs the agent nothing.

The child's verdict is its exit status and one line of output:

* 0 (``ok: N ranks``): the sum came back right;
* ``OWN`` (2): this node's rank failed by itself (torch missing or broken, a wrong sum, the
  test's fault hook ``MUSTER_PREFLIGHT_ALLREDUCE_FAIL=<node>[,<node>...]`` or ``=@<file>``):
  the node is blamed;
* ``PEER`` (3): the rendezvous or the collective failed or timed out (a peer's rank is gone):
  not this node's fault by itself; the controller blames the nodes whose rank failed by itself.

A child that outlives its time-out (a hung collective) is killed: ``PEER`` as well.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from dataclasses import dataclass

__all__ = ["FAIL_ENV", "OWN", "PEER", "AllReduceResult", "port_for", "run_allreduce"]

FAIL_ENV = "MUSTER_PREFLIGHT_ALLREDUCE_FAIL"
OWN = 2
PEER = 3
PORT_BASE = 29500
PORT_SPAN = 2000


def port_for(job_id: int, attempt: int) -> int:
    """The rendezvous port at the job's first node: the same on every node, from the job."""
    return PORT_BASE + (job_id * 31 + attempt) % PORT_SPAN


@dataclass(frozen=True)
class AllReduceResult:
    ok: bool
    reason: str = ""
    peer: bool = False  # failed waiting for others: not blamed by itself


async def run_allreduce(
    node: str,
    master: str,
    port: int,
    rank: int,
    world: int,
    timeout: float,
    backend: str = "gloo",
    env: dict[str, str] | None = None,
) -> AllReduceResult:
    """This node's rank of the all-reduce, in a child process; its verdict."""
    argv = [sys.executable, "-m", "muster.agent.allreduce", "--node", node, "--master", master]
    argv += ["--port", str(port), "--rank", str(rank), "--world", str(world)]
    argv += ["--timeout", str(timeout), "--backend", backend]
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, **(env or {})},
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout + 30)  # torch's import on top
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return AllReduceResult(False, f"all-reduce: rank {rank} of {world} hung past {timeout:.0f} s", peer=True)
    lines = [ln for ln in out.decode(errors="replace").splitlines() if ln.strip()]
    last = lines[-1].strip() if lines else f"exit {proc.returncode}"
    if proc.returncode == 0:
        return AllReduceResult(True, last)
    return AllReduceResult(False, f"all-reduce: rank {rank} of {world}: {last}"[:400], peer=proc.returncode == PEER)


def _hooked() -> list[str]:
    """The nodes the test's fault hook names: ``<node>,<node>`` or ``@<file>`` (a node a line,
    read when the rank starts, so a running cluster's test can change it)."""
    value = os.environ.get(FAIL_ENV) or ""
    if value.startswith("@"):
        try:
            with open(value[1:]) as f:
                return f.read().split()
        except OSError:
            return []
    return value.split(",")


def _main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="muster.agent.allreduce")
    p.add_argument("--node", required=True)
    p.add_argument("--master", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--backend", default="gloo")
    a = p.parse_args(argv)
    if a.node in _hooked():
        print(f"{FAIL_ENV} names {a.node}: this rank exits", flush=True)
        return OWN
    try:
        import datetime

        import torch
        import torch.distributed as dist
    except Exception as e:  # noqa: BLE001 - torch missing or broken here: this node's fault
        print(f"cannot import torch.distributed: {e}", flush=True)
        return OWN
    try:
        dist.init_process_group(
            a.backend,
            init_method=f"tcp://{a.master}:{a.port}",
            rank=a.rank,
            world_size=a.world,
            timeout=datetime.timedelta(seconds=a.timeout),
        )
        device = "cuda" if a.backend == "nccl" else "cpu"
        t = torch.ones(256, device=device)
        dist.all_reduce(t)
        got = float(t[0].item())
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001 - the rendezvous or the collective: a peer may be gone
        print(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300], flush=True)
        return PEER
    if got != float(a.world):
        print(f"wrong sum: {got} for {a.world} ranks", flush=True)
        return OWN
    print(f"ok: {a.world} ranks", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
