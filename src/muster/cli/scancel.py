"""scancel: cancel or signal jobs, as Slurm's scancel does.

Jobs are named by id (array tasks as ``123_7`` or ``123_[1-3]``; an array's id alone names
every task of it), or selected by filters (``-u``, ``-n``, ``-p``, ``-t``, ``--me``);
both together cancel the named jobs that also match the filters. Slurm's quiet rules are
kept: a job id the controller does not know is silently ignored (reported with ``-v``,
and an error when filters were given), a job that already ended is not an error, and
another user's job is ``Access/permission denied`` with exit status 210.
"""

from __future__ import annotations

import sys

from muster.cli.common import CommandError, argv_or_sys, current_user, info_text, report, split_ids
from muster.client.controller import connect, connect_message
from muster.core.optionvalues import parse_signal_name
from muster.core.statenames import job_state_name
from muster.slurm.argscan import option_error
from muster.slurm.options import NO_ARG, Opt, OptionError, OptionTable, getopt

TYPE_CHECKING = False  # typing costs a command milliseconds to import
if TYPE_CHECKING:
    from typing import Any, TextIO

PROG = "scancel"

# Slurm exits with its error number modulo 256: ESLURM_ACCESS_DENIED (2002) gives 210.
RC_ACCESS_DENIED = 210

OPTIONS: tuple[Opt, ...] = (
    Opt("account", "A"),
    Opt("batch", "b", NO_ARG),
    Opt("full", "f", NO_ARG),
    Opt("hurry", "H", NO_ARG),
    Opt("interactive", "i", NO_ARG),
    Opt(("jobname", "name"), "n"),
    Opt("partition", "p"),
    Opt("qos", "q"),
    Opt("quiet", "Q", NO_ARG),
    Opt("reservation", "R"),
    Opt("signal", "s"),
    Opt("state", "t"),
    Opt("user", "u"),
    Opt("me", None, NO_ARG),
    Opt("nodelist", "w"),
    Opt("wckey"),
    Opt("verbose", "v", NO_ARG),
    Opt("version", "V", NO_ARG),
    Opt("clusters", "M"),
    Opt("sibling"),
    Opt("help", None, NO_ARG),
    Opt("usage", None, NO_ARG),
)


_CANCELLABLE = frozenset({"PENDING", "RUNNING", "SUSPENDED", "STOPPED"})


class Cancel:
    """What to cancel and how."""

    __slots__ = (
        "job_ids",
        "steps",
        "user",
        "name",
        "partition",
        "states",
        "signal",
        "batch",
        "verbose",
        "quiet",
        "interactive",
        "unsupported",
    )

    def __init__(self) -> None:
        self.job_ids: list[int | str] = []  # int, or "123_7" / "123_[1-3]" for array tasks
        self.steps: list[tuple[int, int]] = []  # "123.4": (job id, step id)
        self.user: str | None = None
        self.name: str | None = None
        self.partition: str | None = None
        self.states: list[str] | None = None
        self.signal: str | None = None
        self.batch = False
        self.verbose = 0
        self.quiet = False
        self.interactive = False
        self.unsupported: list[str] = []

    @property
    def filtered(self) -> bool:
        return bool(self.user or self.name or self.partition or self.states)

    def body(self) -> dict[str, object]:
        body: dict[str, object] = {"job_ids": self.job_ids, "batch_only": self.batch}
        if self.user:
            body["user"] = self.user
        if self.name:
            body["name"] = self.name
        if self.partition:
            body["partition"] = self.partition
        if self.states:
            body["states"] = self.states
        if self.signal:
            body["signal"] = int(self.signal) if self.signal.isdigit() else self.signal
        return body


def parse_step_id(text: str) -> tuple[int, int] | None:
    """``123.4`` as (123, 4); None for anything that is not a step of a plain job id."""
    from muster.core.arrays import MAX_ID

    job, dot, step = text.strip().partition(".")
    if dot and job.isdigit() and step.isdigit():
        if int(step) > MAX_ID or not 0 < int(job) <= MAX_ID:
            raise CommandError(f"Invalid job id {text}")
        return int(job), int(step)
    return None


def parse_job_id(text: str) -> int | str:
    """``123`` (an int), or array tasks ``123_4`` / ``123_[1-3]`` (checked, kept as text);
    steps (``123.0``) are taken apart by ``parse_step_id`` first."""
    from muster.core.arrays import MAX_ID, parse_job_ref

    item = text.strip()
    if item.isdigit() and 0 < int(item) <= MAX_ID:
        return int(item)
    head = item.split("_", 1)[0].split(".", 1)[0]
    if head.isdigit() and "." in item:
        raise CommandError(f"Invalid job id {text}")  # a step id that is not a number
    try:
        ref = parse_job_ref(item)
    except ValueError:
        raise CommandError(f"Invalid job id {text}") from None
    return str(ref)


def parse_args(argv: list[str]) -> Cancel | str:
    try:
        parsed, operands = getopt(argv, OptionTable(OPTIONS))
    except OptionError as e:
        raise option_error(PROG, e) from None
    c = Cancel()
    for opt, value in parsed:
        key = opt.key
        text = info_text((key,), HELP, USAGE)
        if text is not None:
            return text
        if key == "batch":
            c.batch = True
        elif key == "jobname":
            c.name = value
        elif key == "partition":
            c.partition = value
        elif key == "quiet":
            c.quiet = True
        elif key == "signal":
            sig = parse_signal_name(value or "")
            if sig is None:
                raise CommandError(f"Invalid job signal: {value}")
            c.signal = sig
        elif key == "state":
            # Names and codes as everywhere (core.statenames), but, as in Slurm, only the
            # states a job can be cancelled in.
            states = []
            for item in (value or "").split(","):
                name = job_state_name(item)
                if name not in _CANCELLABLE:
                    raise CommandError(f"Invalid job state specified: {item.strip()}")
                states.append(name)
            c.states = states
        elif key == "user":
            c.user = value
        elif key == "me":
            c.user = current_user()
        elif key == "verbose":
            c.verbose += 1
        elif key == "interactive":
            c.interactive = True
        elif key in ("account", "qos", "reservation", "nodelist", "wckey"):
            c.unsupported.append(f"--{key}")
        # --full, --hurry, --clusters, --sibling: nothing to do in muster.
    for word in operands:
        for item in split_ids(word):
            step = parse_step_id(item)
            if step is not None:
                c.steps.append(step)
            else:
                c.job_ids.append(parse_job_id(item))
    if c.unsupported:
        raise CommandError(f"{', '.join(c.unsupported)}: filter not supported by muster yet")
    if not c.job_ids and not c.filtered and not c.steps:
        raise CommandError("No job identification provided")
    return c


def cancel_steps(c: Cancel, ctl: object, err: TextIO | None = None) -> int:
    """``scancel N.S``: cancel (or signal) job steps, one request each."""
    from muster.protocol.client import ApiError, ConnectError

    err = err if err is not None else sys.stderr
    rc = 0
    signal: object = int(c.signal) if c.signal and c.signal.isdigit() else c.signal
    for job_id, step_id in c.steps:
        if c.verbose:
            verb = f"Signal {signal_number(c.signal)} to" if c.signal else "Terminating"
            err.write(f"{PROG}: {verb} step {job_id}.{step_id}\n")
        try:
            ctl.post(f"/v1/jobs/{job_id}/steps/{step_id}/signal", {"signal": signal})  # type: ignore[attr-defined]
        except ConnectError as e:
            raise CommandError(f"Kill job error: {connect_message(e)}") from None
        except ApiError as e:
            if e.code == "invalid_job_id" and not c.verbose:
                continue  # as for jobs: an unknown id is silent
            err.write(f"{PROG}: error: Kill job error on job step id {job_id}.{step_id}: {e.message}\n")
            rc = max(rc, RC_ACCESS_DENIED if e.code == "permission_denied" else 1)
    return rc


def signal_number(name: str) -> str:
    """-v's lines name a signal by its number, as Slurm's do (``Signal 1 to job N``)."""
    if name.isdigit():
        return name
    import _signal

    return str(getattr(_signal, f"SIG{name}", name))


def outcome(c: Cancel, results: list[dict[str, Any]], err: TextIO | None = None) -> int:
    """Print Slurm's messages for the controller's per-job results; return the exit status."""
    err = err if err is not None else sys.stderr
    rc = 0
    for r in results:
        job_id = r.get("job_id")
        if r.get("ok"):
            continue
        code = r.get("code")
        message = r.get("error") or "Unknown error"
        if code == "invalid_job_id":
            # Slurm: silent for a plain id, an error when the user filtered as well.
            if c.filtered:
                err.write(f"{PROG}: error: Kill job error on job id {job_id}: {message}\n")
                rc = max(rc, 1)
            elif c.verbose:
                err.write(f"{PROG}: error: Kill job error on job id {job_id}: {message}\n")
            continue
        if not c.quiet:
            err.write(f"{PROG}: error: Kill job error on job id {job_id}: {message}\n")
        rc = RC_ACCESS_DENIED if code == "permission_denied" else max(rc, 1)
    return rc


def _confirm(job_id: int | str) -> bool:
    sys.stdout.write(f"Cancel job_id={job_id} [y/n]? ")
    sys.stdout.flush()
    answer = sys.stdin.readline().strip().lower()
    return answer.startswith("y")


def main(argv: list[str] | None = None) -> int:
    from muster.protocol.client import ApiError, ConnectError

    try:
        c = parse_args(argv_or_sys(argv))
        if isinstance(c, str):
            sys.stdout.write(c)
            return 0
        if c.interactive:
            c.job_ids = [j for j in c.job_ids if _confirm(j)]
            if not c.job_ids and not c.filtered:
                return 0
        if c.verbose:
            for job_id in c.job_ids:
                if c.signal:
                    sys.stderr.write(f"{PROG}: Signal {signal_number(c.signal)} to job {job_id}\n")
                else:
                    sys.stderr.write(f"{PROG}: Terminating job {job_id}\n")
        ctl = connect(PROG)
        step_rc = cancel_steps(c, ctl) if c.steps else 0
        if c.steps and not c.job_ids and not c.filtered:
            return step_rc
        try:
            answer = ctl.post("/v1/jobs/signal", c.body())
        except ConnectError as e:
            raise CommandError(f"Kill job error: {connect_message(e)}") from None
        except ApiError as e:
            rc = RC_ACCESS_DENIED if e.code == "permission_denied" else 1
            raise CommandError(f"Kill job error: {e.message}", rc) from None
        results = [r for r in answer.get("results") or [] if isinstance(r, dict)]
        if c.verbose and not c.job_ids:
            for r in results:
                if r.get("ok"):
                    verb = f"Signal {signal_number(c.signal)} to" if c.signal else "Terminating"
                    sys.stderr.write(f"{PROG}: {verb} job {r.get('job_id')}\n")
        return max(outcome(c, results), step_rc)
    except CommandError as e:
        return report(PROG, e)


USAGE = """\
Usage: scancel [-A account] [--batch] [--full] [--interactive] [-n job_name]
               [-p partition] [-Q] [-q qos] [--reservation=reservation]
               [-s signal | integer] [-t PENDING | RUNNING | SUSPENDED]
               [--usage] [-u user_name] [--hurry] [-V] [-v] [-w hosts...]
               [--wckey=wckey] [--me] [job_id[_array_id][.step_id]]
"""

HELP = """\
Usage: scancel [OPTIONS] [job_id[_array_id][.step_id]]
  -A, --account=account           act only on jobs charging this account
  -b, --batch                     signal batch shell for specified job
  -f, --full                      signal batch shell and all steps for specified job
  -H, --hurry                     avoid burst buffer stage out
  -i, --interactive               require response from user for each job
  -n, --name=job_name             act only on jobs with this name
  -p, --partition=partition       act only on jobs in this partition
  -Q, --quiet                     disable warnings
  -q, --qos=qos                   act only on jobs with this quality of service
  -R, --reservation=reservation   act only on jobs with this reservation
  -s, --signal=name | integer     signal to send to job, default is SIGKILL
  -t, --state=states              act only on jobs in this state.  Valid job
                                  states are PENDING, RUNNING and SUSPENDED
  -u, --user=user_name            act only on jobs of this user
      --me                        act only on jobs of the current user
  -V, --version                   output version information and exit
  -v, --verbose                   verbosity level
  -w, --nodelist                  act only on jobs on these nodes

Help options:
  --help                          show this help message
  --usage                         display brief usage message
"""


if __name__ == "__main__":
    sys.exit(main())
