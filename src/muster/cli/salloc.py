"""salloc: get an allocation, run a command in it, give it back, as Slurm's salloc does.

``salloc [options] [command [args...]]`` asks for an interactive allocation shaped by the
job options (``SALLOC_*`` variables too), waits until it runs (``salloc: Pending job
allocation N`` / ``salloc: job N queued and waiting for resources`` when it must), prints
``salloc: Granted job allocation N``, then runs the command *here* (default: the user's
``$SHELL``) with the allocation's variables set (``SLURM_JOB_ID``, ``SLURM_JOB_NODELIST``,
``SLURM_NNODES``, ``SLURM_NTASKS`` when asked, ...), so that ``srun`` inside runs steps in
it. When the command ends the allocation is released (``salloc: Relinquishing job
allocation N``) and salloc exits with the command's status. With ``--no-shell`` salloc runs
nothing and exits 0 once the allocation is granted: the job stays RUNNING, holding its
resources, until ``scancel`` or its time limit ends it (``srun --jobid=N`` runs steps in it).

While the command runs salloc ignores SIGINT and SIGQUIT (they are the command's, as at
a shell prompt) and passes SIGTERM and SIGHUP on to it. If the allocation is revoked
(``scancel``, time limit) the command keeps running, as Slurm's does; its steps fail.
"""

from __future__ import annotations

import os
import sys

from muster.cli.alloc import job_options
from muster.cli.common import CommandError, argv_or_sys, info_text, report
from muster.cli.hetargs import parse_components, propagate
from muster.client.controller import connect
from muster.core.counts import format_counts
from muster.core.optionvalues import RC_BAD_OPTION
from muster.slurm.jobrequest import JobRequest
from muster.slurm.options import (
    NO_ARG,
    OPTIONAL,
    Opt,
    OptionTable,
    apply_job_options,
    env_options,
    finish_job_request,
    job_getopt,
)

TYPE_CHECKING = False  # typing costs a command milliseconds to import
if TYPE_CHECKING:
    from typing import Any

PROG = "salloc"

SALLOC_OPTIONS: tuple[Opt, ...] = (
    Opt("quiet", "Q", NO_ARG, env=("SALLOC_QUIET",)),
    Opt("verbose", "v", NO_ARG),
    Opt("help", "h", NO_ARG),
    Opt("usage", None, NO_ARG),
    Opt("version", "V", NO_ARG),
    Opt("no-shell", None, NO_ARG),
    Opt("immediate", "I", OPTIONAL),
    Opt("bell", None, NO_ARG),
    Opt("no-bell", None, NO_ARG),
)


def table() -> OptionTable:
    return OptionTable(job_options("SALLOC"), SALLOC_OPTIONS)


def build(
    argv: list[str], environ: dict[str, str], cwd: str
) -> tuple[dict[str, object], list[str], bool, float | None] | str:
    """The request (a heterogeneous job's: the first component's, ``components`` holding
    every one), the command (empty for ``--no-shell``), ``-Q`` and ``-I``."""
    tbl = table()
    # ``salloc [opts 0] : [opts 1] ... [command]``: a heterogeneous job's components
    parts, operands = parse_components(argv, lambda args: job_getopt(PROG, args, tbl))
    parsed = [item for part in parts for item in part]
    keys = {opt.key for opt, _ in parsed}
    text = info_text(keys, HELP, USAGE)
    if text is not None:
        return text
    from_env = env_options(tbl, environ)
    layers = [from_env + part for part in parts]
    specs = []
    for layered in propagate(layers) if len(layers) > 1 else layers:
        req = JobRequest()
        apply_job_options(req, layered)
        specs.append(finish_job_request(req, environ, cwd))
    spec = specs[0]
    layered = from_env + parsed
    quiet = "quiet" in {o.key for o, _ in layered}
    immediate: float | None = None  # -I[secs]: None waits as long as it takes
    given = [v for o, v in layered if o.key == "immediate"]
    if given:
        value = given[-1]
        try:
            immediate = max(1, int(value)) if value else 1
        except ValueError:
            raise CommandError(f"Invalid --immediate value: {value}", RC_BAD_OPTION) from None
    no_shell = "no-shell" in keys
    command = [] if no_shell else operands or [environ.get("SHELL") or "/bin/sh"]
    for one in specs:
        if not one.get("name"):
            # Slurm names a --no-shell allocation "no-shell"
            one["name"] = (os.path.basename(command[0]) if command else "no-shell") or "interactive"
        one["argv"] = list(command)
        one["environment"] = {}
        for key in ("stdout", "stderr", "stdin"):
            one.pop(key, None)
    if len(specs) > 1:
        spec["components"] = specs[1:]
    return spec, command, quiet, immediate


def het_environment(ctl: object, job_id: int, specs: list[dict[str, object]]) -> dict[str, str]:
    """A heterogeneous allocation's ``SLURM_HET_SIZE`` and each component's variables with
    its ``_HET_GROUP_<k>`` suffix (the plain names describe component 0)."""
    jobs = ctl.get(f"/v1/jobs?job_id={job_id}").get("jobs") or []  # type: ignore[attr-defined]
    jobs = sorted((j for j in jobs if j.get("het_job_id") == job_id), key=lambda j: int(j.get("het_job_offset") or 0))
    out = {"SLURM_HET_SIZE": str(len(jobs))}
    for k, job in enumerate(jobs):
        values = allocation_environment(job, specs[min(k, len(specs) - 1)], {})
        for key, value in values.items():
            if key.startswith("SLURM_") and key not in ("SLURM_SUBMIT_HOST", "SLURM_CLUSTER_NAME"):
                out[f"{key}_HET_GROUP_{k}"] = value
    return out


def allocation_environment(job: dict[str, Any], spec: dict[str, Any], environ: dict[str, str]) -> dict[str, str]:
    """What the command sees: Slurm's salloc output variables over our environment."""
    env = dict(environ)
    for key in list(env):
        # A stale step or allocation from an enclosing job must not leak into this one.
        if key.startswith(("SLURM_STEP_", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_CPUS_PER_TASK")):
            del env[key]
    alloc = job.get("alloc") or []
    nodes = [a["node"] for a in alloc]
    cpus = [int(a["cpus"]) for a in alloc]
    job_id = str(job["job_id"])
    nodelist = str(job.get("nodelist") or ",".join(nodes))
    env.update(
        SLURM_JOB_ID=job_id,
        SLURM_JOBID=job_id,
        SLURM_JOB_NAME=str((job.get("spec") or {}).get("name") or ""),
        SLURM_JOB_NODELIST=nodelist,
        SLURM_NODELIST=nodelist,
        SLURM_JOB_NUM_NODES=str(len(nodes)),
        SLURM_NNODES=str(len(nodes)),
        SLURM_JOB_CPUS_PER_NODE=format_counts(cpus),
        SLURM_TASKS_PER_NODE=format_counts(_tasks_per_node(spec, cpus)),
        SLURM_JOB_PARTITION=str(job.get("partition") or ""),
        SLURM_JOB_ACCOUNT=str(job.get("account") or ""),
        SLURM_JOB_QOS=str(job.get("qos") or "normal"),
        SLURM_SUBMIT_DIR=str(spec.get("workdir") or ""),
        SLURM_SUBMIT_HOST=os.uname().nodename.split(".")[0],
        SLURM_CLUSTER_NAME=str(job.get("cluster") or environ.get("SLURM_CLUSTER_NAME") or "muster"),
    )
    if spec.get("ntasks") is not None:
        env["SLURM_NTASKS"] = env["SLURM_NPROCS"] = str(spec["ntasks"])
    if spec.get("ntasks_per_node") is not None:
        env["SLURM_NTASKS_PER_NODE"] = str(spec["ntasks_per_node"])
        if spec.get("ntasks") is None:
            total = int(spec["ntasks_per_node"]) * len(nodes)
            env["SLURM_NTASKS"] = env["SLURM_NPROCS"] = str(total)
    if spec.get("cpus_per_task") not in (None, 1):
        env["SLURM_CPUS_PER_TASK"] = str(spec["cpus_per_task"])
    if spec.get("gpus_per_task") is not None:
        env["SLURM_GPUS_PER_TASK"] = str(spec["gpus_per_task"])
    return env


def _tasks_per_node(spec: dict[str, object], cpus: list[int]) -> list[int]:
    if spec.get("ntasks_per_node") is not None:
        return [int(spec["ntasks_per_node"])] * len(cpus)  # type: ignore[call-overload]
    ntasks = int(spec.get("ntasks") or len(cpus))  # type: ignore[call-overload]
    counts = [1] * len(cpus)
    left = ntasks - len(cpus)
    for i, c in enumerate(cpus):
        extra = max(0, min(left, c - 1))
        counts[i] += extra
        left -= extra
    return counts


def run_command(command: list[str], env: dict[str, str]) -> int:
    """Run the command in the foreground; its exit status, 128+N when killed by signal N."""
    import _signal

    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            for s in (_signal.SIGINT, _signal.SIGQUIT, _signal.SIGTERM, _signal.SIGHUP):
                _signal.signal(s, _signal.SIG_DFL)
            os.execvpe(command[0], command, env)
        except OSError as e:
            sys.stderr.write(f"{PROG}: error: {command[0]}: {e.strerror}\n")
            os._exit(127 if e.errno == 2 else 126)
    # The command owns the terminal's Ctrl-C; salloc itself must outlive it to clean up.
    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
    _signal.signal(_signal.SIGQUIT, _signal.SIG_IGN)

    def forward(signum: int, frame: object) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    _signal.signal(_signal.SIGTERM, forward)
    _signal.signal(_signal.SIGHUP, forward)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def _note(text: str) -> None:
    sys.stderr.write(f"{PROG}: {text}\n")
    sys.stderr.flush()


def main(argv: list[str] | None = None) -> int:
    from muster.cli import alloc

    args = argv_or_sys(argv)
    try:
        cwd = os.getcwd()
    except OSError as e:
        return report(PROG, CommandError(f"getcwd failed: {e.strerror}"))
    ctl = None
    job_id = None
    try:
        result = build(args, dict(os.environ), cwd)
        if isinstance(result, str):
            sys.stdout.write(result)
            return 0
        spec, command, quiet, immediate = result
        components: list[dict[str, object]] = spec.pop("components", None) or []  # type: ignore[assignment]
        ctl = connect(PROG)
        job_id = alloc.request(ctl, PROG, spec, components)
        try:
            job = alloc.wait_running(ctl, PROG, job_id, quiet, first_wait=1.0, immediate=immediate)
        except KeyboardInterrupt:
            alloc.revoke(ctl, job_id)
            _note(f"Job allocation {job_id} has been revoked.")
            job_id = None
            return 1
        if not quiet:
            _note(f"Granted job allocation {job_id}")
        if not command:  # --no-shell: the allocation stays until scancel or its time limit
            job_id = None
            return 0
        env = allocation_environment(job, spec, dict(os.environ))
        if components:
            env.update(het_environment(ctl, job_id, [spec, *components]))
        rc = run_command(command, env)
        if not quiet:
            _note(f"Relinquishing job allocation {job_id}")
        alloc.release(ctl, job_id, rc if rc < 128 else 0, rc - 128 if rc > 128 else 0)
        job_id = None
        return rc
    except CommandError as e:
        return report(PROG, e)
    finally:
        if job_id is not None and ctl is not None:
            alloc.revoke(ctl, job_id)


USAGE = """\
Usage: salloc [-N numnodes|[min nodes]-[max nodes]] [-n num-processors]
              [[-c cpus-per-node] [-p partition] [-t minutes] [-J jobname]
              [--gres=list] [--gpus-per-task=n] [--exclusive] [-I[secs]]
              [command [args...]]
"""

HELP = """\
Usage: salloc [OPTIONS(0)...] [ : [OPTIONS(N)...]] [command(0) [args(0)...]]

Parallel run options:
  -A, --account=name          charge job to specified account
  -c, --cpus-per-task=ncpus   number of cpus required per task
  -J, --job-name=jobname      name of job
  -n, --ntasks=N              number of processors required
      --no-shell              immediately exit after allocating resources,
                              without running a command
      --ntasks-per-node=n     number of tasks to invoke on each node
  -N, --nodes=N               number of nodes on which to run (N = min[-max])
  -p, --partition=partition   partition requested
  -Q, --quiet                 quiet mode (suppress informational messages)
  -t, --time=minutes          time limit
  -v, --verbose               verbose mode (multiple -v's increase verbosity)

GPU scheduling options:
  -G, --gpus=n                count of GPUs required for the job
      --gpus-per-node=n       number of GPUs required per allocated node
      --gpus-per-task=n       number of GPUs required per spawned task
      --gres=list             required generic resources (gpu[:type]:count)

Help options:
  -h, --help                  show this help message
      --usage                 display brief usage message

Other options:
  -V, --version               output version information and exit

The command (default: $SHELL) runs here with SLURM_JOB_ID and the allocation's other
variables set; srun inside it runs job steps in the allocation. Components separated by
":" make a heterogeneous job (SLURM_HET_SIZE, SLURM_*_HET_GROUP_<k>; srun --het-group).
"""


if __name__ == "__main__":
    sys.exit(main())
