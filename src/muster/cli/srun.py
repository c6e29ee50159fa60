"""srun: run a job step, as Slurm's srun does.

Inside an allocation (``SLURM_JOB_ID`` set by a batch script or salloc, or ``--jobid``)
srun asks the controller for a step of that job; without ``-n``, ``-N`` or
``--ntasks-per-node`` on its command line the step takes the allocation's layout from
the environment (``SLURM_NTASKS``, ``SLURM_NNODES``, ``SLURM_NTASKS_PER_NODE``; one task per
node when only ``SLURM_JOB_ID`` is set). Outside one, srun first asks for an interactive
allocation shaped by its options, waits for it (``srun: job N queued and waiting for
resources`` when it must), runs step 0 in it, then ends it with the step's exit code.
``-Z``/``--no-allocate`` (root and SlurmUser) runs the step on ``-w``'s nodes with no job at
all (``ctld.noalloc``).

The controller answers a step with its layout, the nodes' addresses and a signed grant;
srun then connects to every node's agent, which starts the tasks and streams back their
output and their ends (``protocol.stream``). One ``select`` loop watches the nodes, srun's
stdin (sent to the tasks, all of them unless ``-i``/``--input`` says otherwise) and its
signals:

* output is written line by line per task (``-u`` passes bytes as they come), prefixed
  ``N: `` with ``-l``; ``-o``/``-e``/``-i`` with a file pattern (``%t %n %N %j %s``...) make
  the nodes write (read) files instead, ``none`` discards, a task number keeps one task;
* SIGINT is sent on to the tasks; a second within a second stops the step (TERM, KillWait,
  KILL), a third leaves at once; ``-q`` stops at the first. SIGTERM, SIGHUP, SIGQUIT,
  SIGUSR1, SIGUSR2, SIGCONT and SIGALRM are sent on;
* ``-K`` stops the step when a task exits non-zero; ``-W S`` S seconds after the first
  task ended;
* the exit status is Slurm's: the highest task exit code, 128+N for a task killed by
  signal N, with ``srun: error: node1: task 0: Exited with exit code 7`` for each failure.

muster's own: ``--no-torch-env`` (or ``MUSTER_TORCH_ENV=0``) leaves out the PyTorch
variables (MASTER_ADDR, RANK, ...) that tasks otherwise get.

Only the standard library's cheap parts and ``muster.protocol`` are imported on the way:
``srun true`` is a latency people feel.
"""

from __future__ import annotations

import os
import sys

from muster.cli.alloc import job_options
from muster.cli.common import CommandError, argv_or_sys, exit_error_code, info_text, report
from muster.cli.containeropts import CONTAINER_OPTIONS, container_request
from muster.client.controller import connect, connect_message
from muster.core.optionvalues import RC_BAD_OPTION
from muster.slurm.jobrequest import JobRequest, export_environment
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

    from muster.cli.multiprog import MultiProg

PROG = "srun"

SRUN_OPTIONS: tuple[Opt, ...] = (
    Opt("label", "l", NO_ARG, env=("SLURM_LABELIO",)),
    Opt("unbuffered", "u", NO_ARG, env=("SLURM_UNBUFFEREDIO",)),
    Opt("kill-on-bad-exit", "K", OPTIONAL, env=("SLURM_KILL_BAD_EXIT",)),
    Opt("wait", "W", env=("SLURM_WAIT",)),
    Opt("jobid", env=("SLURM_JOB_ID", "SLURM_JOBID")),
    Opt("overlap", None, NO_ARG, env=("SLURM_OVERLAP",)),
    Opt("distribution", "m", env=("SLURM_DISTRIBUTION",)),
    Opt("gpu-bind", env=("SLURM_GPU_BIND",)),
    Opt("quit-on-interrupt", None, NO_ARG),
    Opt("preserve-env", "E", NO_ARG),
    Opt("debugger-test", None, NO_ARG),  # Slurm's hidden check of the task table, no launch
    Opt("no-allocate", "Z", NO_ARG),  # a step on -w's nodes without a job, root only (ctld.noalloc)
    Opt("immediate", "I", OPTIONAL, env=("SLURM_IMMEDIATE",)),
    Opt("no-torch-env", None, NO_ARG),
    Opt("verbose", "v", NO_ARG),
    Opt("quiet", "Q", NO_ARG),
    Opt("help", "h", NO_ARG),
    Opt("usage", None, NO_ARG),
    Opt("version", "V", NO_ARG),
    Opt("pty", None, OPTIONAL),
    Opt("multi-prog", None, NO_ARG),
    Opt("test-only", None, NO_ARG),
    Opt("mpi"),
    Opt("cpu-bind", env=("SLURM_CPU_BIND",)),
    Opt("exact", None, NO_ARG),
    Opt("disable-status", "X", NO_ARG),
    Opt("slurmd-debug"),
    Opt("task-prolog", env=("SLURM_TASK_PROLOG",)),
    Opt("task-epilog", env=("SLURM_TASK_EPILOG",)),
    *CONTAINER_OPTIONS,  # pyxis's --container-* and Slurm's --container (cli.containeropts)
)

_FORWARDED = ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGCONT", "SIGALRM")


def table() -> OptionTable:
    # srun's -q is --qos, as in Slurm 22.05 (--quit-on-interrupt has no short form).
    # srun's -m, --gpu-bind and -W are its own (the job table ignores or lacks them).
    own = {o.key for o in SRUN_OPTIONS}
    job = tuple(o for o in job_options("SLURM", frozenset("mW")) if o.key not in own)
    return OptionTable(job, SRUN_OPTIONS)


class Run:
    """Everything srun decided before talking to anyone."""

    def __init__(self) -> None:
        self.spec: dict[str, object] = {}
        self.argv: list[str] = []
        self.job_id: int | None = None
        self.step: dict[str, object] = {}
        self.label = False
        self.unbuffered = False
        self.kill_bad_exit = False
        self.wait: float | None = None
        self.quit_on_interrupt = False
        self.torch_env = True
        self.verbose = 0
        self.quiet = False
        self.env: dict[str, str] = {}
        self.cwd = "/"
        self.stdin: dict[str, object] = {"mode": "stream"}
        self.stdout: dict[str, object] = {"mode": "stream"}
        self.stderr: dict[str, object] | None = None
        self.open_mode: str | None = None
        self.cpu_bind: str | None = None
        self.multi_prog: MultiProg | None = None  # --multi-prog (cli.multiprog)
        self.pty = False  # --pty: task 0 in a pseudo-terminal, srun's terminal raw
        self.debugger_test = False  # --debugger-test: print the task table, run nothing
        self.no_allocate = False  # -Z: run on -w's nodes without a job (root, SlurmUser)
        self.preserve_env: dict[str, str] = {}  # -E: the allocation's counts, kept
        self.immediate: int | None = None  # -I[secs]: give up when not running by then
        self.het: dict[str, int] | None = None  # one component's part of a het step (cli.hetstep)
        self.rlimits: dict[str, int] | None = None  # the soft limits the tasks get (core.rlimits)
        self.container: dict[str, object] | None = None  # the tasks' container (cli.containeropts)
        self.task_prolog: str | None = None  # --task-prolog: run by each task first (agent.taskprolog)
        self.task_epilog: str | None = None  # --task-epilog: run once each task ended (agent.stepd)
        self.name = ""
        self.defined: list[tuple[str, str]] = []  # the options given, for -v's summary


def _io_mode(value: str) -> dict[str, object]:
    """``-o/-e/-i``: ``none``, ``all``, a task number, or a file pattern."""
    text = value.strip()
    if text.lower() == "none":
        return {"mode": "none"}
    if text.lower() == "all" or not text:
        return {"mode": "stream"}
    if text.isdigit():
        return {"mode": "stream", "tasks": [int(text)]}
    return {"mode": "file", "path": text}


def build(argv: list[str], environ: dict[str, str], cwd: str) -> Run | str:
    tbl = table()
    parsed, operands = job_getopt(PROG, argv, tbl)
    keys = {opt.key for opt, _ in parsed}
    text = info_text(keys, HELP, USAGE)
    if text is not None:
        return text

    from_env = env_options(tbl, environ)
    explicit_layout = keys & {"ntasks", "nodes", "ntasks-per-node"}
    in_job = "jobid" in keys or bool(environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID"))
    if in_job:
        # Within an allocation SLURM_JOB_NAME is the job's, not a step name (Slurm's rule).
        from_env = [(o, v) for o, v in from_env if o.key != "job-name"]
    else:
        # Outside one, the layout variables are requests (-n, -N), as in Slurm's srun;
        # within one they describe the allocation (``_inherited_layout``).
        for var, name in (("SLURM_NTASKS", "ntasks"), ("SLURM_NPROCS", "ntasks"), ("SLURM_NNODES", "nodes")):
            number = (environ.get(var) or "").strip()
            if number and name not in keys and not any(o.key == name for o, _ in from_env):
                from_env.append((tbl.by_long[name], number))
    run = Run()
    run.defined = _defined(parsed)
    req = JobRequest()
    layered = from_env + parsed
    apply_job_options(req, layered)
    for opt, value in layered:
        k = opt.key
        if k == "label":
            run.label = True
        elif k == "unbuffered":
            run.unbuffered = True
        elif k == "kill-on-bad-exit":
            run.kill_bad_exit = value is None or value.strip() not in ("0", "")
        elif k == "wait":
            try:
                run.wait = float(value or "0") or None
            except ValueError:
                raise CommandError(f"Invalid --wait value: {value}", RC_BAD_OPTION) from None
        elif k == "jobid":
            try:
                run.job_id = int(str(value).split("_")[0].split(".")[0])
            except ValueError:
                raise CommandError(f"Invalid job id: {value}", RC_BAD_OPTION) from None
        elif k == "overlap":
            run.step["overlap"] = True
        elif k == "overcommit":
            run.step["overcommit"] = True
        elif k == "distribution":
            dist = (value or "block").split(":")[0].split(",")[0].lower()
            if dist not in ("block", "cyclic", "arbitrary", "*"):
                raise CommandError(f"Invalid --distribution specification: {value}", RC_BAD_OPTION)
            run.step["distribution"] = "block" if dist == "*" else dist
        elif k == "gpu-bind":
            from muster.core.gpubind import GpuBindError, parse_gpu_bind

            try:
                parse_gpu_bind(value)
            except GpuBindError as e:
                raise CommandError(str(e), RC_BAD_OPTION) from None
            run.step["gpu_bind"] = (value or "").strip() or None
        elif k == "cpu-bind":
            from muster.core.cpubind import CpuBindError, parse_cpu_bind

            try:
                parse_cpu_bind(value)
            except CpuBindError as e:
                raise CommandError(str(e), RC_BAD_OPTION) from None
            run.cpu_bind = value or None
        elif k == "quit-on-interrupt":
            run.quit_on_interrupt = True
        elif k == "debugger-test":
            run.debugger_test = True
        elif k == "no-allocate":
            run.no_allocate = True
        elif k == "preserve-env":
            run.preserve_env = {
                var: environ[var]
                for var in ("SLURM_NNODES", "SLURM_JOB_NUM_NODES", "SLURM_NTASKS", "SLURM_NPROCS")
                if environ.get(var)
            }
        elif k == "immediate":
            try:
                run.immediate = max(1, int(value)) if value else 1
            except ValueError:
                raise CommandError(f"Invalid --immediate value: {value}", RC_BAD_OPTION) from None
        elif k == "no-torch-env":
            run.torch_env = False
        elif k == "verbose":
            run.verbose += 1
        elif k == "quiet":
            run.quiet = True
        elif k == "task-prolog":
            run.task_prolog = os.path.join(cwd, value) if value else None
        elif k == "task-epilog":
            run.task_epilog = os.path.join(cwd, value) if value else None
        elif k == "test-only":
            raise CommandError("--test-only is not supported by muster")
    run.container = container_request(layered, cwd)
    if environ.get("MUSTER_TORCH_ENV", "1").strip().lower() in ("0", "no", "false", "off"):
        run.torch_env = False
    if not operands:
        raise CommandError("No command given to execute.", 1)
    run.argv = operands
    if "multi-prog" in keys:
        from muster.cli.multiprog import parse_multi_prog

        try:
            with open(operands[0]) as f:
                run.multi_prog = parse_multi_prog(operands[0], f.read())
        except OSError as e:
            raise CommandError(f"Unable to open multi-prog config file {operands[0]}: {e.strerror}", 1) from None
    spec = finish_job_request(req, environ, cwd)
    run.rlimits = spec.get("rlimits")  # type: ignore[assignment]
    run.cwd = str(spec["workdir"])
    run.env = export_environment(req.export or environ.get("SLURM_EXPORT_ENV") or "ALL", environ)
    het = run.env.pop("MUSTER_HET_STEP", None) or environ.get("MUSTER_HET_STEP")
    if het:  # started by a het step's srun (cli.hetstep): where this part's ranks start
        fields = [int(x) if x.isdigit() else 0 for x in het.split(":")]
        run.het = dict(zip(("first", "total", "size", "group"), fields, strict=False))
    if "cpus-per-task" in keys or "cpus-per-task" in {o.key for o, _ in from_env}:
        # Slurm's srun sets it when -c is asked for, 1 included, and the tasks inherit it
        run.env["SLURM_CPUS_PER_TASK"] = str(req.spec.get("cpus_per_task") or 1)
    for key, target in (("stdout", "stdout"), ("stderr", "stderr"), ("stdin", "stdin")):
        given = spec.pop(key, None)
        if given is not None:
            setattr(run, target, _io_mode(str(given)))
    run.open_mode = spec.get("open_mode")  # type: ignore[assignment]
    if "pty" in keys:
        # Slurm's --pty: task 0 runs in a pseudo-terminal and gets srun's input; the other
        # tasks' output goes nowhere. Output is passed on as it comes, unlabelled.
        run.pty, run.unbuffered, run.label = True, True, False
        run.stdin = {"mode": "stream", "tasks": [0]}
    run.name = str(spec.get("name") or "")
    if not run.name:
        spec["name"] = os.path.basename(run.argv[0]) or run.argv[0]
    spec["argv"] = list(run.argv)
    spec["environment"] = {}
    run.spec = spec

    step = run.step
    step["cpus_per_task"] = spec.get("cpus_per_task") or 1
    for src, dst in (("gpus_per_task", "gpus_per_task"), ("gpus", "gpus")):
        if spec.get(src) is not None:
            step[dst] = spec[src]
    if spec.get("gpus_per_node"):
        step["gpus_per_node"] = spec["gpus_per_node"]
    if spec.get("nodelist"):
        step["nodelist"] = spec["nodelist"]
    if spec.get("exclude"):
        step["exclude"] = spec["exclude"]
    if explicit_layout or not in_job:
        if "nodes" in keys or (not in_job and spec.get("min_nodes")):
            step["min_nodes"] = spec.get("min_nodes")
        if spec.get("ntasks") is not None:
            step["ntasks"] = spec["ntasks"]
        if spec.get("ntasks_per_node") is not None:
            step["ntasks_per_node"] = spec["ntasks_per_node"]
    else:
        step.update(_inherited_layout(environ))
    if in_job and spec.get("exclusive"):
        step["exclusive"] = True
    if in_job and "time" in keys and spec.get("time_limit"):
        step["time_limit"] = spec["time_limit"]  # the step's own limit, within the job's
    if step.get("distribution") == "arbitrary":
        _arbitrary(step, spec, environ, in_job)
    if run.job_id is None and in_job:
        raw = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID") or ""
        try:
            run.job_id = int(raw)
        except ValueError:
            raise CommandError(f"Invalid SLURM_JOB_ID: {raw}") from None
    return run


def _arbitrary(step: dict[str, object], spec: dict[str, object], environ: dict[str, str], in_job: bool) -> None:
    """``-m arbitrary``: task i on the i-th host of ``SLURM_HOSTFILE`` (one a line, or comma
    separated; with ``-n`` its first N); without the variable, block (srun(1))."""
    from muster.core.optionvalues import OptionValueError
    from muster.slurm.jobrequest import read_hostfile

    try:
        hosts = read_hostfile(environ, step.get("ntasks"))
    except OptionValueError as e:
        raise CommandError(str(e), 1) from None
    if hosts is None:
        step["distribution"] = "block"
        return
    for key in ("min_nodes", "ntasks_per_node", "nodelist"):
        step.pop(key, None)
    step["task_nodes"], step["ntasks"] = hosts, len(hosts)
    if not in_job:  # the allocation: those nodes, room on each for the tasks named for it
        unique = list(dict.fromkeys(hosts))
        spec.pop("ntasks", None)
        spec.update(nodelist=unique, min_nodes=len(unique), ntasks_per_node=max(hosts.count(h) for h in unique))


def _inherited_layout(environ: dict[str, str]) -> dict[str, object]:
    """The allocation's layout, from the variables a batch script or salloc sets."""
    out: dict[str, object] = {}
    for var, key in (
        ("SLURM_NNODES", "min_nodes"),
        ("SLURM_NTASKS", "ntasks"),
        ("SLURM_NTASKS_PER_NODE", "ntasks_per_node"),
    ):
        raw = environ.get(var) or (environ.get("SLURM_NPROCS") if var == "SLURM_NTASKS" else None)
        if raw and raw.strip().isdigit() and int(raw) > 0:
            out[key] = int(raw)
    return out


# --- talking to the controller -------------------------------------------------------------


def create_step(ctl: object, run: Run, job_id: int, own: bool) -> dict[str, Any]:
    """The step, once the controller has placed it (waiting as long as it takes)."""
    from muster.protocol.client import ApiError, ConnectError

    body = {
        "request": run.step,
        "name": run.name or os.path.basename(run.argv[0]),
        "argv": run.argv,
        "srun_host": _hostname(),
        "srun_pid": os.getpid(),
        "wait": 2.0,
        "busy_now": True,
    }
    noted: set[str] = set()
    while True:
        try:
            answer: dict[str, Any] = ctl.post(f"/v1/jobs/{job_id}/steps", body)  # type: ignore[attr-defined]
        except ConnectError as e:
            raise CommandError(connect_message(e), exit_error_code()) from None
        except ApiError as e:
            if e.code == "invalid_job_id":
                raise CommandError(
                    f"Unable to confirm allocation for job {job_id}: {e.message}\n"
                    f"{PROG}: Check SLURM_JOB_ID environment variable. Expired or invalid job {job_id}",
                    exit_error_code(),
                ) from None
            if own:
                raise CommandError(e.message, exit_error_code()) from None
            raise CommandError(f"Unable to create step for job {job_id}: {e.message}", exit_error_code()) from None
        pending = answer.get("pending")
        if not pending:
            if "step" in noted and not run.quiet:
                _note(f"Step created for job {job_id}")
            if "job" in noted and not run.quiet:
                _note(f"job {job_id} has been allocated resources")
            return answer
        if pending not in noted and not run.quiet:
            if pending == "job":
                _note(f"job {job_id} queued and waiting for resources")
            else:
                _note(f"Job {job_id} step creation temporarily disabled, retrying ({answer.get('reason')})")
        noted.add(str(pending))
        body["wait"] = 30.0
        body["busy_now"] = False


def _defined(parsed: list[tuple[Opt, str | None]]) -> list[tuple[str, str]]:
    """The command line's options as ``srun -v`` lists them: repeated flags counted."""
    out: dict[str, str] = {}
    for opt, value in parsed:
        if opt.key == "verbose":
            out["verbose"] = str(int(out.get("verbose", "0")) + 1)
        else:
            out[opt.key] = "set" if value is None else value
    return list(out.items())


def _note(text: str) -> None:
    sys.stderr.write(f"{PROG}: {text}\n")
    sys.stderr.flush()


def _tls_ahead(ca: str | None, job_id: int | None) -> None:
    """With ``TLSType=tls/muster``: ``_ssl``'s import and the TLS client context (OpenSSL's
    set-up, the CA: a few milliseconds) done while the controller works on srun's requests
    (the allocation's, then the step's), not after."""
    if not ca:
        return
    from muster.protocol.client import when_waiting

    def load() -> None:
        from muster.protocol import tlsclient  # noqa: F401 - imported ahead

    def make() -> None:
        from muster.protocol import tlsclient

        tlsclient.context(ca)  # a failure is raised again, and reported, at the handshake

    if job_id is None:  # the allocation's request first: the import then
        when_waiting(load)
    when_waiting(make)


def _hostname() -> str:
    return os.uname().nodename.split(".")[0]


def no_allocate(run: Run) -> int:
    """``-Z``: the step on ``-w``'s nodes without a job (srun(1): "bypassing the normal
    resource allocation step"; root and SlurmUser only, ``ctld.noalloc``)."""
    import socket

    from muster.cli.alloc import post_retrying
    from muster.cli.steprun import StepRun
    from muster.protocol.client import ApiError

    names = run.spec.get("nodelist") or []
    if isinstance(names, str):
        from muster.core.hostlist import HostlistError, expand

        try:
            names = expand(names)
        except HostlistError as e:
            raise CommandError(str(e)) from None
    if not names:
        raise CommandError("must specify a node list with -Z, --no-allocate.")
    _note("do not allocate resources")
    ctl = connect(PROG)
    body = {
        "nodes": list(names),  # type: ignore[call-overload]
        "ntasks": run.spec.get("ntasks"),
        "ntasks_per_node": run.spec.get("ntasks_per_node"),
        "cpus_per_task": run.spec.get("cpus_per_task") or 1,
        "name": run.spec.get("name"),
        "argv": run.argv,
        "workdir": run.cwd,
        "srun_host": socket.gethostname().split(".")[0],
    }
    try:
        answer: dict[str, Any] = ctl.post("/v1/steps/no_allocate", body)
    except ApiError as e:
        if e.status == 403:  # Slurm's words: the nodes refuse the launch
            _note(f"error: Application launch failed: {e.message}")
            _note("Job step aborted")
            return 1
        raise CommandError(e.message) from None
    job_id = int(answer["step"]["job_id"])
    if run.verbose:
        _note(f"jobid {job_id}: nodes({answer['step']['num_nodes']}):`{answer['step']['nodelist']}', no allocation")
    try:
        rc = StepRun(run, job_id, answer, ctl).run()[0]
    finally:
        try:
            post_retrying(ctl, f"/v1/steps/no_allocate/{job_id}/done", {})
        except Exception as e:  # noqa: BLE001 - the tasks' outcome matters more than this report
            _note(f"error: could not report the end of the step: {e}")
    return rc


def main(argv: list[str] | None = None) -> int:
    args = argv_or_sys(argv)
    try:
        cwd = os.getcwd()
    except OSError as e:
        return report(PROG, CommandError(f"getcwd failed: {e.strerror}"))
    ctl = None
    own_job: int | None = None
    try:
        from muster.cli import hetstep

        try:
            parts = hetstep.plan(args, dict(os.environ), table())
        except hetstep.NeedsAllocation:  # srun A : B outside an allocation
            return hetstep.allocate_and_run(args, dict(os.environ), cwd, table(), build)
        if parts is not None:  # srun --het-group=..., srun A : B
            return hetstep.run(parts, dict(os.environ))
        result = build(args, dict(os.environ), cwd)
        if isinstance(result, str):
            sys.stdout.write(result)
            return 0
        run = result
        if run.verbose:
            _note("defined options")
            _note(f"{'-' * 20} {'-' * 20}")
            for name, value in run.defined:
                _note(f"{name:<20}: {value}")
            _note(f"{'-' * 20} {'-' * 20}")
            _note("end of defined options")
        if run.no_allocate:
            return no_allocate(run)
        ctl = connect(PROG)
        _tls_ahead(None if run.debugger_test else ctl.settings.tls_ca, run.job_id)
        if run.job_id is None:
            from muster.cli import alloc

            own_job = alloc.request(ctl, PROG, run.spec)
            job_id = own_job
            if run.immediate is not None:
                if run.verbose:
                    _note(f"jobid {job_id}: submitted with --immediate={run.immediate}")
                alloc.wait_running(ctl, PROG, job_id, run.quiet, immediate=float(run.immediate))
        else:
            job_id = run.job_id
        answer = create_step(ctl, run, job_id, own_job is not None)
        if run.verbose:
            s = answer["step"]
            _note(f"jobid {job_id}: nodes({s['num_nodes']}):`{s['nodelist']}', tasks {s['num_tasks']}")
        from muster.cli.steprun import StepRun

        try:
            step = StepRun(run, job_id, answer, ctl)
        except CommandError:
            # Nothing was launched (a --multi-prog file that leaves a task without a
            # program): the step ends at once, and srun's own allocation with it.
            from muster.cli.alloc import post_retrying

            done: dict[str, object] = {"exit_code": 1, "signal": 0, "cancelled": False, "end_job": own_job is not None}
            post_retrying(ctl, f"/v1/jobs/{job_id}/steps/{answer['step']['step_id']}/done", done)
            own_job = None
            raise
        if run.debugger_test:
            # What a parallel debugger would attach to (Slurm's MPIR table); no task runs.
            for node in step.nodes:
                for t in node.tasks:
                    argv0 = (step.task_argv or {}).get(t, run.argv)[0]
                    _note(f"task:{t}, host:{node.name}, pid:0, executable:{argv0}")
        rc, code, sig, aborted = step.run() if not run.debugger_test else (0, 0, 0, False)
        done = {"exit_code": code, "signal": sig, "cancelled": aborted, "end_job": own_job is not None}
        from muster.cli.stepverdict import usage_report

        usage = usage_report(step.usage)
        if usage is not None:
            done["usage"] = usage
        if step.oom_tasks:  # the step ends OUT_OF_MEMORY (0:125), as in Slurm
            done["oom_kills"] = sum(step.oom_tasks.values())
        try:
            from muster.cli.alloc import post_retrying

            post_retrying(ctl, f"/v1/jobs/{job_id}/steps/{answer['step']['step_id']}/done", done)
        except Exception as e:  # noqa: BLE001 - the tasks' outcome matters more than this report
            _note(f"error: could not report the end of the step: {e}")
        own_job = None
        return rc
    except CommandError as e:
        return report(PROG, e)
    except KeyboardInterrupt:
        if own_job is not None and ctl is not None:
            from muster.cli import alloc

            alloc.revoke(ctl, own_job)
            _note(f"Job allocation {own_job} has been revoked.")
            own_job = None
        return 130
    finally:
        if own_job is not None and ctl is not None:
            from muster.cli import alloc

            alloc.revoke(ctl, own_job)


USAGE = """\
Usage: srun [-N nnodes] [-n ntasks] [-c ncpus] [-p partition] [-t minutes]
            [-J jobname] [-o out] [-e err] [-i in] [-D dir] [-l] [-u] [-K] [-W sec]
            [-m block|cyclic] [--gres=list] [--gpus-per-task=n] [--gpu-bind=...]
            [--cpu-bind=type] [--multi-prog] [--pty]
            [--exclusive] [--overlap] [--jobid=id] [--no-torch-env] executable [args...]
"""

HELP = """\
Usage: srun [OPTIONS(0)... [executable(0) [args(0)...]]] [ : [OPTIONS(N)...]] executable(N) [args(N)...]

Parallel run options:
  -A, --account=name          charge job to specified account
  -b, --begin=time            defer job until HH:MM MM/DD/YY
  -c, --cpus-per-task=ncpus   number of cpus required per task
      --comment=name          arbitrary comment
      --cpu-bind=type         pin tasks to CPUs: none, cores, threads, rank, sockets,
                              map_cpu:<list>, mask_cpu:<list>; verbose reports it
  -d, --dependency=type:jobid[:time] defer job until condition on jobid is satisfied
  -D, --chdir=path            change remote current working directory
  -e, --error=err             location of stderr redirection (file pattern, none, task id)
  -E, --preserve-env          env vars for node and task counts override
                              command-line flags
      --exclusive             whole nodes (a job), or dedicated resources (a step)
      --export=env_vars|NONE  environment variables passed to the tasks
  -H, --hold                  submit job in held state
  -i, --input=in              location of stdin redirection (file pattern, none, all, task id)
  -I, --immediate[=secs]      exit if resources not available in "secs"
  -J, --job-name=jobname      name of job (or of the step, within an allocation)
      --het-group=value       hetjob components to run on (0,1 or 0-1), in a
                              heterogeneous job's allocation
      --jobid=id              run under already allocated job
  -k, --no-kill               do not kill job on node failure
  -K, --kill-on-bad-exit      kill the job step if any task exits non-zero
  -l, --label                 prepend task number to lines of stdout/err
  -m, --distribution=type     block, cyclic or arbitrary (SLURM_HOSTFILE) distribution of tasks
      --mem=MB                minimum amount of real memory
      --mincpus=n             minimum number of logical processors per node
      --multi-prog            the executable is a file naming each task's program
                              (ranks, then the command line; %t rank, %o offset)
  -n, --ntasks=ntasks         number of tasks to run
      --nice[=value]          decrease scheduling priority by value
      --ntasks-per-node=n     number of tasks to invoke on each node
  -N, --nodes=N               number of nodes on which to run (N = min[-max])
  -o, --output=out            location of stdout redirection (file pattern, none, task id)
  -O, --overcommit            overcommit resources
      --overlap               share resources with the job's other steps
  -p, --partition=partition   partition requested
      --propagate[=rlimits]   propagate all [or specific list of] rlimits
      --pty                   run task zero in a pseudo terminal (an interactive shell)
  -q, --qos=qos               quality of service
  -Q, --quiet                 quiet mode (suppress informational messages)
      --quit-on-interrupt     quit on single Ctrl-C
  -s, --oversubscribe         over-subscribe resources with other jobs
  -t, --time=minutes          time limit
      --task-epilog=program   run "program" after each task terminates
      --task-prolog=program   run "program" before launching each task; its
                              "export NAME=value" lines set the task's variables
      --tmp=MB                minimum amount of temporary disk
  -u, --unbuffered            do not line-buffer stdout/err
  -v, --verbose               verbose mode (multiple -v's increase verbosity)
  -W, --wait=sec              seconds to wait after first task exits before killing job
  -w, --nodelist=hosts...     request a specific list of hosts
  -x, --exclude=hosts...      exclude a specific list of hosts

GPU scheduling options:
  -G, --gpus=n                count of GPUs required for the job
      --gpus-per-node=n       number of GPUs required per allocated node
      --gpus-per-task=n       number of GPUs required per spawned task
      --gres=list             required generic resources (gpu[:type]:count)
      --gpu-bind=[verbose,]type  bind tasks to GPUs: none, closest, single:<tasks_per_gpu>,
                              per_task:<gpus_per_task>, map_gpu:<list>, mask_gpu:<list>
                              (default: each task sees all of the step's GPUs on its node)

Container options (pyxis's, and Slurm's --container; docs/containers.md):
      --container-image=IMAGE a rootfs tarball or directory, or NAME[:TAG] from the
                              site's image directory
      --container-mounts=SRC[:DST[:FLAGS]][,...]  bind mounts (FLAGS: ro, rprivate...)
      --container-workdir=DIR working directory inside the container
      --container-name=NAME   keep the container for the job's later steps
      --container-writable    writable container (--container-readonly: the default)
      --[no-]container-mount-home  bind the home directory (default: yes)
      --container-env=NAMES   keep the host's value of these variables
      --container=PATH        an OCI bundle of your own (with oci.conf on the nodes)

muster options:
      --no-torch-env          do not set MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE,
                              LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK (or MUSTER_TORCH_ENV=0)

Help options:
  -h, --help                  show this help message
      --usage                 display brief usage message

Other options:
  -V, --version               output version information and exit
"""


if __name__ == "__main__":
    sys.exit(main())
