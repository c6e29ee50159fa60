"""``muster hang-evidence JOBID [--json]``: what each process of a job's hung attempts was
doing when the controller judged it hung (docs/training.md, "Hang detection").

One block per node and attempt, one line per process: pid, state, the kernel function it
sleeps in (wchan), whether it was sent SIGUSR1 (only processes that catch it are), its
command line; then its Python stacks (its own handler's dump, py-spy's) and its kernel
stack where they were read. ``--json`` prints the controller's answer as it came.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from muster.cli.common import CommandError, report
from muster.client.controller import connect, connect_message

PROG = "muster hang-evidence"


def format_evidence(records: list[dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    for rec in records:
        procs = rec.get("processes") or []
        lines.append(f"== attempt {rec.get('attempt')} on {rec.get('node')}: {len(procs)} process(es)")
        for p in procs:
            sent = p.get("signalled") or "not signalled"
            lines.append(
                f"pid {p.get('pid')} ppid {p.get('ppid')} {p.get('state') or '?'} "
                f"wchan={p.get('wchan') or '-'} threads={p.get('threads')} [{sent}] {p.get('cmdline') or p.get('name')}"
            )
            for key, title in (("python", "python stacks"), ("py_spy", "py-spy"), ("kernel_stack", "kernel stack")):
                if p.get(key):
                    lines.append(f"  -- {title}:")
                    lines += ["  " + line for line in str(p[key]).rstrip("\n").splitlines()]
    return lines


def run(job: str, as_json: bool) -> int:
    from muster.protocol.client import ApiError, ConnectError

    if not job.isdigit():
        print(f"{PROG}: error: invalid job id {job!r}", file=sys.stderr)
        return 2
    try:
        answer = connect(PROG).get(f"/v1/jobs/{job}/hang_evidence")
    except CommandError as e:
        return report(PROG, e)
    except ConnectError as e:
        print(f"{PROG}: error: {connect_message(e)}", file=sys.stderr)
        return 1
    except ApiError as e:
        print(f"{PROG}: error: {e.message}", file=sys.stderr)
        return 1
    if as_json:
        print(json.dumps(answer, indent=1))
        return 0
    records = answer.get("evidence") or []
    if not records:
        print(f"job {job}: no hang evidence", file=sys.stderr)
        return 0
    print("\n".join(format_evidence(records)))
    return 0
