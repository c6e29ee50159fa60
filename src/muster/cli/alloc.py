"""What srun and salloc share: their option tables, and interactive allocations.

An *interactive allocation* is a job with no batch script (``JobSpec.interactive``): the
command that asked for it holds it while it runs and ends it with its own exit code.
``request`` submits one, ``wait_running`` waits (long polls) until it runs, printing Slurm's
notes when it has to queue, ``release`` ends it and ``revoke`` cancels it.

Option tables: the job options are ``options.JOB_OPTIONS``, written once; each command reads
them from its own input environment variables, Slurm's rule being that sbatch's
``SBATCH_X`` is salloc's ``SALLOC_X`` and srun's ``SLURM_X`` (with a few exceptions below).
"""

from __future__ import annotations

import sys

from muster.cli.common import CommandError, exit_error_code
from muster.client.controller import connect_message
from muster.slurm.options import JOB_OPTIONS, Opt

TYPE_CHECKING = False
if TYPE_CHECKING:
    from muster.client.controller import Controller

# srun's names where they are not SBATCH_X -> SLURM_X.
_SRUN_ENV = {
    "SBATCH_EXPORT": "SLURM_EXPORT_ENV",
    "SBATCH_OUTPUT": "SLURM_STDOUTMODE",
    "SBATCH_ERROR": "SLURM_STDERRMODE",
    "SBATCH_INPUT": "SLURM_STDINMODE",
    "SBATCH_ARRAY_INX": "",
    "SBATCH_REQUEUE": "",
    "SBATCH_NO_REQUEUE": "",
    "SBATCH_MEM_PER_NODE": "",  # the batch script's own SLURM_MEM_* are outputs, not requests
    "SBATCH_MEM_PER_CPU": "",
    "SBATCH_MEM_PER_GPU": "",
}


# srun reads these too (sbatch has no variable for them).
_SRUN_EXTRA = {"cpus-per-task": ("SLURM_CPUS_PER_TASK",)}


def job_options(prefix: str, drop_short: frozenset[str] = frozenset()) -> tuple[Opt, ...]:
    """``JOB_OPTIONS`` read from ``<prefix>_X`` instead of ``SBATCH_X``."""
    out = []
    for o in JOB_OPTIONS:
        env = list(_SRUN_EXTRA.get(o.key, ())) if prefix == "SLURM" else []
        for var in o.env:
            name = _SRUN_ENV.get(var, None) if prefix == "SLURM" else None
            if name is None:
                name = prefix + var[len("SBATCH") :]
            if name:
                env.append(name)
        short = None if o.short in drop_short else o.short
        out.append(Opt(o.longs, short, o.arg, o.key, tuple(env), o.apply))
    return tuple(out)


def _err(prog: str, message: str) -> None:
    sys.stderr.write(f"{prog}: {message}\n")
    sys.stderr.flush()


def request(ctl: Controller, prog: str, spec: dict[str, object], others: list[dict[str, object]] | None = None) -> int:
    """Submit an interactive allocation (with ``others``: a heterogeneous job's further
    components); its (leader's) job id."""
    from muster.protocol.client import ApiError, ConnectError

    bodies = []
    for one in [spec, *(others or [])]:
        body = dict(one)
        body["interactive"] = True
        body["requeue"] = False  # Slurm requeues batch jobs only
        body.pop("script", None)
        bodies.append(body)
    try:
        answer = ctl.post("/v1/jobs", {"spec": bodies[0], "components": bodies} if others else {"spec": bodies[0]})
    except ConnectError as e:
        raise CommandError(f"Unable to allocate resources: {connect_message(e)}", exit_error_code()) from None
    except ApiError as e:
        lines = []
        if e.code == "invalid_partition":
            parts = spec.get("partitions") or []
            name = ",".join(parts) if isinstance(parts, list) else str(parts)
            if name:
                lines.append(f"invalid partition specified: {name}")
        detail = e.data.get("detail") if isinstance(e.data, dict) else None
        if detail:
            lines.append(str(detail))
        lines.append(f"Unable to allocate resources: {e.message}")
        raise CommandError(f"\n{prog}: error: ".join(lines), exit_error_code()) from None
    return int(answer["job_id"])


# Pending reasons that no wait will end, for -I/--immediate: the job fails at once.
_HELD = frozenset({"JobHeldUser", "JobHeldAdmin"})


def wait_running(
    ctl: Controller,
    prog: str,
    job_id: int,
    quiet: bool,
    first_wait: float = 2.0,
    immediate: float | None = None,
) -> dict[str, object]:
    """Wait until the allocation runs; the job as the controller shows it. A job that ends
    before it starts (cancelled) raises CommandError.

    ``immediate`` (``-I[secs]``): give up after that many seconds, or at once when the job
    is held, with Slurm's ``Unable to allocate resources`` and exit status 1; the caller
    then cancels the job (it ends CANCELLED, as in Slurm)."""
    import time

    from muster.protocol.client import ApiError, ConnectError

    deadline = None if immediate is None else time.monotonic() + immediate
    wait = first_wait if deadline is None else min(first_wait, immediate or 0.0)
    queued = False
    while True:
        try:
            answer = ctl.post(f"/v1/jobs/{job_id}/await", {"wait": wait})
        except ApiError as e:
            raise CommandError(e.message, exit_error_code()) from None
        except ConnectError as e:
            raise CommandError(connect_message(e), exit_error_code()) from None
        if "job" in answer:
            if queued and not quiet:
                _err(prog, f"job {job_id} has been allocated resources")
            return answer["job"]  # type: ignore[no-any-return]
        if deadline is not None:
            left = deadline - time.monotonic()
            if answer.get("reason") in _HELD:
                raise CommandError(
                    "Unable to allocate resources: Immediate execution impossible, insufficient priority", 1
                )
            if left <= 0:
                raise CommandError("Unable to allocate resources: Requested nodes are busy", 1)
        if not queued and not quiet:
            _err(prog, f"job {job_id} queued and waiting for resources")
        queued = True
        wait = 30.0 if deadline is None else min(30.0, max(0.0, deadline - time.monotonic()))


RETRY_FOR = 10.0  # seconds an end report is retried while the controller is unreachable


def post_retrying(ctl: Controller, path: str, body: dict[str, object]) -> None:
    """POST a report that must not be lost to a controller restart: retried for
    ``RETRY_FOR`` seconds while the controller cannot be reached. Refusals are final."""
    import time

    from muster.protocol.client import ConnectError

    deadline = time.monotonic() + RETRY_FOR
    delay = 0.25
    while True:
        try:
            ctl.post(path, body)
            return
        except ConnectError:
            if time.monotonic() + delay > deadline:
                raise
            time.sleep(delay)
            delay = min(2.0, delay * 2)


def release(ctl: Controller, job_id: int, exit_code: int, signal: int = 0) -> None:
    """End the allocation with the command's exit code (quietly: it may be gone already)."""
    from muster.protocol.client import ApiError, ConnectError

    try:
        post_retrying(
            ctl,
            f"/v1/jobs/{job_id}/complete",
            {"exit_code": max(0, min(255, exit_code)), "signal": signal},
        )
    except (ApiError, ConnectError):
        pass


def revoke(ctl: Controller, job_id: int) -> None:
    """Cancel the allocation (the user interrupted the command)."""
    from muster.protocol.client import ApiError, ConnectError

    try:
        ctl.post("/v1/jobs/signal", {"job_ids": [job_id]})
    except (ApiError, ConnectError):
        pass
