"""The objects ``sacctmgr`` manages, as muster keeps them: accounts, users, associations
(with their ``Limits``) and QOS, and their stored form (``to_data``/``from_data``: the JSON
of the store's ``acct_objects`` rows).

An association's ``key`` is ``account|user`` (``assoc_key``; the user is empty for an
account's own node in the tree): usage, fair-share standings and ``Snapshot.fairshare``
are all keyed by it. ``ctld.assoc.AssocDB`` holds these objects and changes them.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Account", "Assoc", "Limits", "Qos", "User", "assoc_key", "from_data", "to_data"]


@dataclass
class Limits:
    """Limits an association carries (a QOS has its own set, see ``Qos``)."""

    grp_tres: dict[str, int] = field(default_factory=dict)
    grp_tres_mins: dict[str, int] = field(default_factory=dict)
    grp_jobs: int | None = None
    grp_submit_jobs: int | None = None
    max_jobs: int | None = None
    max_submit_jobs: int | None = None
    max_wall: int | None = None
    max_tres_per_job: dict[str, int] = field(default_factory=dict)


@dataclass
class Assoc:
    account: str
    user: str = ""  # "" for the account's own node in the tree
    parent: str | None = None  # an account association's parent account (None for root)
    shares: int = 1
    limits: Limits = field(default_factory=Limits)
    qos: list[str] = field(default_factory=list)  # allowed QOS; empty: inherited
    default_qos: str | None = None

    @functools.cached_property
    def key(self) -> str:  # account and user never change once created
        return assoc_key(self.account, self.user)

    @property
    def is_user(self) -> bool:
        return bool(self.user)


def assoc_key(account: str, user: str = "") -> str:
    return f"{account}|{user}"


@dataclass
class Account:
    name: str
    description: str = ""
    organization: str = ""


@dataclass
class User:
    name: str
    default_account: str = ""
    admin_level: str = "None"


@dataclass
class Qos:
    name: str
    description: str = ""
    priority: int = 0
    flags: list[str] = field(default_factory=list)
    usage_factor: float = 1.0
    max_wall: int | None = None
    max_tres_per_user: dict[str, int] = field(default_factory=dict)
    max_jobs_per_user: int | None = None
    max_submit_jobs_per_user: int | None = None
    max_tres_per_job: dict[str, int] = field(default_factory=dict)
    grp_tres: dict[str, int] = field(default_factory=dict)
    grp_jobs: int | None = None
    grp_submit_jobs: int | None = None
    # Preemption (preempt/qos, docs/preemption.md): the QOS this one may preempt; how its
    # own jobs are preempted (None: the partition's or the cluster's mode); seconds of grace
    # between the signal and the kill; seconds a job runs before it may be preempted
    # (None: the cluster's PreemptExemptTime).
    preempt: list[str] = field(default_factory=list)
    preempt_mode: str | None = None
    grace_time: int = 0
    preempt_exempt_time: int | None = None
    # muster's: jobs of this QOS default to --requeue=expedite (docs/preemption.md)
    expedite_requeue: bool = False


def to_data(obj: Any) -> dict[str, Any]:
    return dataclasses.asdict(obj)


def from_data(kind: str, data: dict[str, Any]) -> Any:
    if kind == "assoc":
        d = dict(data)
        d["limits"] = Limits(**d.get("limits", {}))
        return Assoc(**d)
    cls = {"account": Account, "user": User, "qos": Qos}[kind]
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})
