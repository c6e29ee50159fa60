"""squeue's selection: which jobs it shows (``Filters``) and in which order (``sort_jobs``).

The filters split in two: what the controller can select (``Filters.query``, the query
string of ``GET /v1/jobs``, so ended jobs kept for MinJobAge are not sent only to be
dropped) and what is checked here on each job (``Filters.keep``). Without ``-t`` and
``-j`` only pending, running, suspended and completing jobs are kept. The order is
Slurm's ``-S`` (letters, ``-`` for descending) over its default ``P,t,-p`` and then the
job id, so the output never depends on the order the controller sent.
"""

from muster.cli.common import CommandError
from muster.slurm.squeue_fields import job_spec, long_state, start_time

TYPE_CHECKING = False  # core.arrays and core.statenames: imported when -j and -t need them
if TYPE_CHECKING:
    from typing import Any

    from muster.core.arrays import JobRef

DEFAULT_SORT = "P,t,-p"

_ACTIVE = frozenset({"PENDING", "RUNNING", "SUSPENDED", "STOPPED"})
_STATE_ORDER = {
    name: i
    for i, name in enumerate(
        "PENDING RUNNING SUSPENDED COMPLETED CANCELLED FAILED TIMEOUT NODE_FAIL PREEMPTED "
        "BOOT_FAIL DEADLINE OUT_OF_MEMORY".split()
    )
}


def parse_states(text: str) -> set[str] | None:
    """``-t``: short or long names (``core.statenames``), comma separated, any case; ``all``
    means every state (None)."""
    from muster.core.statenames import parse_job_states

    try:
        return parse_job_states(text)
    except ValueError as e:
        raise CommandError(str(e)) from None


class Filters:
    __slots__ = (
        "job_ids",
        "users",
        "names",
        "partitions",
        "states",
        "accounts",
        "qos",
        "nodes",
        "reservations",
    )

    def __init__(self) -> None:
        self.job_ids: list[JobRef] | None = None
        self.users: list[str] | None = None
        self.names: list[str] | None = None
        self.partitions: list[str] | None = None
        self.states: set[str] | None = set()  # empty: the default (active jobs); None: all
        self.accounts: list[str] | None = None
        self.qos: list[str] | None = None
        self.nodes: set[str] | None = None
        self.reservations: list[str] | None = None

    def query(self) -> str:
        """The server-side part of the filter, as the query string of GET /v1/jobs."""
        params = []
        if self.job_ids:
            params.append("job_id=" + ",".join(_query_ids(self.job_ids)))
        if self.users:
            params.append("user=" + ",".join(self.users))
        if self.partitions:
            params.append("partition=" + ",".join(self.partitions))
        if self.names and len(self.names) == 1:
            params.append("name=" + _quote(self.names[0]))
        # Ask only for the states shown: the controller keeps ended jobs for MinJobAge,
        # and thousands of them would otherwise be sent only to be dropped here.
        if self.states:
            wanted = sorted(self.states - {"COMPLETING"}) + (["CG"] if "COMPLETING" in self.states else [])
            params.append("state=" + ",".join(wanted))
        elif self.states is not None and not self.job_ids:
            params.append("state=PD,R,S,CG")
        return ("?" + "&".join(params)) if params else ""

    def by_query(self) -> bool:
        """Whether ``query`` says all of it: the controller then sends only jobs ``keep``
        keeps (it selects states, users, partitions and a single name alike)."""
        client_side = self.job_ids or self.accounts or self.qos or self.reservations or self.nodes is not None
        return not client_side and (not self.names or len(self.names) == 1)

    def keep(self, job: dict[str, "Any"]) -> bool:
        state = long_state(job)
        if self.states is None:
            pass
        elif self.states:
            base = str(job.get("state") or "")
            if state not in self.states and base not in self.states:
                return False
        elif not self.job_ids and state != "COMPLETING" and state not in _ACTIVE:
            return False
        if self.job_ids:
            ids = (job.get("job_id"), job.get("array_job_id"), job.get("array_task_id"), job.get("het_job_id"))
            if not any(ref.matches(*ids) for ref in self.job_ids):
                return False
        if self.users and job.get("user") not in self.users:
            return False
        if self.names and job_spec(job).get("name") not in self.names:
            return False
        if self.partitions and job.get("partition") not in self.partitions:
            return False
        if self.accounts and str(job.get("account") or "").lower() not in {a.lower() for a in self.accounts}:
            return False
        if self.qos and (job.get("qos") or "normal") not in self.qos:
            return False
        if self.reservations and job_spec(job).get("reservation") not in self.reservations:
            return False
        if self.nodes is not None:
            from muster.core.hostlist import expand

            here = set(expand(job["nodelist"])) if job.get("nodelist") else set()
            if not here & self.nodes:
                return False
        return True


def _query_ids(refs: "list[JobRef]") -> list[str]:
    """Job ids for the query string: array task ranges one by one (no brackets, no commas)."""
    out = []
    for ref in refs:
        if ref.tasks is None:
            out.append(str(ref.job_id))
        else:
            out.extend(f"{ref.job_id}_{t}" for t in ref.tasks)
    return out


def _quote(text: str) -> str:
    safe = []
    for ch in text:
        if ch.isalnum() or ch in "-_.~":
            safe.append(ch)
        else:
            safe.extend(f"%{b:02X}" for b in ch.encode())
    return "".join(safe)


def _inf_if_none(value: object) -> float:
    return float("inf") if value is None else float(value)  # type: ignore[arg-type]


SORT_KEYS: dict[str, object] = {
    "i": lambda j: int(j.get("job_id") or 0),
    "A": lambda j: int(j.get("job_id") or 0),
    "j": lambda j: str(job_spec(j).get("name") or ""),
    "u": lambda j: str(j.get("user") or ""),
    "U": lambda j: int(j.get("uid") or 0),
    "t": lambda j: _STATE_ORDER.get(str(j.get("state")), 99),
    "T": lambda j: _STATE_ORDER.get(str(j.get("state")), 99),
    "p": lambda j: int(j.get("priority") or 0),
    "Q": lambda j: int(j.get("priority") or 0),
    "P": lambda j: str(j.get("partition") or ""),
    "M": lambda j: int(j.get("run_time") or 0),
    "l": lambda j: _inf_if_none(j.get("time_limit")),
    "L": lambda j: _inf_if_none(
        None if j.get("time_limit") is None else int(j["time_limit"]) - int(j.get("run_time") or 0)
    ),
    "D": lambda j: int(j.get("num_nodes") or 0),
    "C": lambda j: int(j.get("num_cpus") or 0),
    "S": lambda j: _inf_if_none(start_time(j)),
    "V": lambda j: float(j.get("submit_time") or 0),
    "e": lambda j: _inf_if_none(j.get("end_time")),
    "N": lambda j: str(j.get("nodelist") or ""),
    "r": lambda j: str(j.get("reason") or ""),
    "a": lambda j: str(j.get("account") or ""),
    "q": lambda j: str(j.get("qos") or ""),
    "g": lambda j: str(j.get("group") or ""),
    "y": lambda j: int(job_spec(j).get("nice") or 0),
}


def _default_order(j: dict[str, "Any"]) -> tuple[str, int, int, int]:
    """``P,t,-p`` and then the job id, in one key (one sort of a thousand rows, not four)."""
    state = _STATE_ORDER.get(str(j.get("state")), 99)
    return str(j.get("partition") or ""), state, -int(j.get("priority") or 0), int(j.get("job_id") or 0)


def sort_jobs(jobs: list[dict[str, "Any"]], order: str = DEFAULT_SORT) -> list[dict[str, "Any"]]:
    """Slurm's ``-S``: comma-separated letters, ``-`` for descending.

    Ties fall back to the default order (``P,t,-p``) and then to the job id, so the output
    never depends on the order the controller happened to send.
    """
    out = sorted(jobs, key=_default_order)
    if order != DEFAULT_SORT:
        keys = [k.strip() for k in order.split(",") if k.strip()]
        for key in reversed(keys):
            fn = SORT_KEYS.get(key.lstrip("+-"))
            if fn is None:
                raise CommandError(f"Invalid sort specification: {key}")
            out.sort(key=fn, reverse=key.startswith("-"))  # type: ignore[arg-type]
    return out
