"""``squeue -s/--steps``: the running job steps, as Slurm's squeue lists them.

Default format ``%.15i %.8j %.9P %.8u %.9M %N`` (``STEPID NAME PARTITION USER TIME
NODELIST``); each running batch job shows its ``N.batch`` step too. Fields: ``%i`` step id,
``%j`` name, ``%P`` partition, ``%u`` user, ``%U`` uid, ``%M`` time used, ``%l`` time limit,
``%N`` nodes, ``%A`` tasks, ``%b`` GPUs per node (``gres:gpu:2``), ``%S`` start time,
``%T`` the step's state (``RUNNING``, ``SUSPENDED`` while its job is suspended).
Filters: ``-j`` jobs, ``-u`` users, ``--me``, ``-p`` partitions, ``-n`` names, and the
optional value of ``-s`` itself (``12.0,13.batch``).
"""

from __future__ import annotations

from muster.cli.common import CommandError, print_lines
from muster.client.controller import connect, connect_message
from muster.slurm.columns import letter_columns, render

TYPE_CHECKING = False  # typing costs a command milliseconds to import
if TYPE_CHECKING:
    from typing import Any

PROG = "squeue"
DEFAULT_FORMAT = "%.15i %.8j %.9P %.8u %.9M %N"

_HEADERS = {
    "i": "STEPID",
    "j": "NAME",
    "P": "PARTITION",
    "u": "USER",
    "U": "UID",
    "M": "TIME",
    "l": "TIME_LIMIT",
    "N": "NODELIST",
    "A": "TASKS",
    "b": "TRES_PER_NODE",
    "S": "START_TIME",
    "T": "STATE",
}


def _field(step: dict[str, Any], letter: str) -> str:
    from muster.core import timefmt

    if letter == "i":
        return str(step.get("id", ""))
    if letter == "j":
        return str(step.get("name", ""))
    if letter == "P":
        return str(step.get("partition", ""))
    if letter == "u":
        return str(step.get("user", ""))
    if letter == "U":
        return str(step.get("uid", ""))
    if letter == "M":
        return timefmt.format_duration(int(step.get("run_time") or 0))
    if letter == "l":
        limit = step.get("time_limit")
        return "UNLIMITED" if limit is None else timefmt.format_duration(int(limit))
    if letter == "N":
        return str(step.get("nodelist", ""))
    if letter == "A":
        return str(step.get("num_tasks", ""))
    if letter == "b":
        return str(step.get("tres_per_node") or "N/A")
    if letter == "S":
        return timefmt.format_timestamp(step.get("start_time"))
    if letter == "T":
        return str(step.get("state", ""))
    return ""


class StepsQuery:
    """What ``squeue -s`` was asked (built by ``squeue.parse_args``)."""

    def __init__(self, parsed: list[Any], environ: dict[str, str]) -> None:
        self.fmt = DEFAULT_FORMAT
        self.header = True
        self.jobs: list[str] = []
        self.users: list[str] = []
        self.partitions: list[str] = []
        self.names: list[str] = []
        self.steps: set[str] = set()
        for opt, value in parsed:
            key = opt.key
            if key == "noheader":
                self.header = False
            elif key == "format":
                self.fmt = value or DEFAULT_FORMAT
            elif key == "jobs":
                self.jobs += _split(value)
            elif key == "user":
                self.users += _split(value)
            elif key == "me":
                from muster.cli.common import current_user

                self.users.append(current_user())
            elif key == "partition":
                self.partitions += _split(value)
            elif key == "name":
                self.names += _split(value)
            elif key == "steps" and value:
                self.steps |= set(_split(value))

    def lines(self) -> list[str]:
        from muster.protocol.client import ApiError, ConnectError

        query = []
        job_ids = {s.split(".")[0] for s in self.steps} | {j.split("_")[0] for j in self.jobs}
        if job_ids:
            if not all(j.isdigit() for j in job_ids):
                raise CommandError("Invalid job id specified")
            query.append("job_id=" + ",".join(sorted(job_ids)))
        if self.users:
            query.append("user=" + ",".join(self.users))
        try:
            answer = connect(PROG).get("/v1/steps" + ("?" + "&".join(query) if query else ""))
        except ConnectError as e:
            raise CommandError(f"slurm_load_jobs error: {connect_message(e)}", 1, raw=True) from None
        except ApiError as e:
            raise CommandError(f"slurm_load_jobs error: {e.message}", 1, raw=True) from None
        steps = [s for s in answer.get("steps") or [] if isinstance(s, dict)]
        if self.steps:
            steps = [s for s in steps if s.get("id") in self.steps]
        if self.partitions:
            steps = [s for s in steps if s.get("partition") in self.partitions]
        if self.names:
            steps = [s for s in steps if s.get("name") in self.names]
        # Any letter is accepted: one this table does not know shows as itself, empty.
        cols = letter_columns(
            self.fmt,
            lambda c: (_HEADERS.get(c, c), lambda s, c=c: _field(s, c), True),
            "",
        )
        return [line.rstrip() for line in render(steps, cols, self.header)]

    def run(self) -> int:
        print_lines(self.lines())
        return 0


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]
