"""Association and QOS limits: the first limit a job would break, and Slurm's reason."""

from __future__ import annotations

import pytest

from muster.core.states import Reason
from muster.ctld.accounting import Enforce
from muster.ctld.acct_objects import Qos
from muster.ctld.assoc import AssocDB
from muster.ctld.limits import JobLoad, Running, check


def _db() -> AssocDB:
    db = AssocDB("c")
    db.bootstrap()
    req = {"verb": "add", "entity": "account", "names": ["A"], "set": {}}
    db.apply(req, "root", True)
    db.apply({"verb": "add", "entity": "user", "names": ["alice", "bob"], "set": {"Account": "A"}}, "root", True)
    return db


def _load(
    db: AssocDB, user: str = "alice", gpus: int = 4, qos: Qos | None = None, time_limit: int | None = 600
) -> JobLoad:
    a = db.assoc("A", user)
    assert a is not None
    return JobLoad(
        db.chain(a), qos, user, {"cpu": 1, "mem": 1000, "node": 1, "gres/gpu": gpus, "billing": 1}, time_limit
    )


def _set(db: AssocDB, entity: str, name: str, **sets: str) -> None:
    db.apply({"verb": "modify", "entity": entity, "names": [name], "set": sets}, "root", True)


def test_grp_tres_counts_the_whole_account() -> None:
    db = _db()
    _set(db, "account", "A", GrpTRES="gres/gpu=8")
    running = Running()
    running.add(_load(db, "alice"))
    assert check(_load(db, "bob"), running, db) is None
    running.add(_load(db, "bob"))
    assert check(_load(db, "bob", gpus=1), running, db) is Reason.ASSOC_GRP_GRES
    assert check(_load(db, "bob", gpus=0), running, db) is None


@pytest.mark.parametrize(
    ("entity", "sets", "expected"),
    [
        ("account", {"MaxJobs": "1"}, Reason.ASSOC_MAX_JOBS),
        ("account", {"GrpJobs": "1"}, Reason.ASSOC_GRP_JOBS),
        ("account", {"GrpTRES": "cpu=1"}, Reason.ASSOC_GRP_CPU),
        ("account", {"MaxWall": "5"}, Reason.ASSOC_MAX_WALL),
        ("user", {"MaxJobs": "1"}, Reason.ASSOC_MAX_JOBS),
    ],
)
def test_association_limits_give_slurms_reasons(entity: str, sets: dict[str, str], expected: Reason) -> None:
    db = _db()
    _set(db, entity, "A" if entity == "account" else "alice", **sets)
    running = Running()
    running.add(_load(db, "alice"))
    assert check(_load(db, "alice"), running, db) is expected


def test_qos_limits_give_slurms_reasons() -> None:
    db = _db()
    q = Qos("short", max_wall=3600, max_jobs_per_user=1, max_tres_per_user={"gres/gpu": 4})
    running = Running()
    assert check(_load(db, qos=q, time_limit=7200), running, db) is Reason.QOS_MAX_WALL
    assert check(_load(db, qos=q, time_limit=None), running, db) is Reason.QOS_MAX_WALL
    assert check(_load(db, qos=q, gpus=8), running, db) is Reason.QOS_MAX_GRES_PER_USER
    running.add(_load(db, qos=q))
    assert check(_load(db, qos=q), running, db) is Reason.QOS_MAX_JOBS_PER_USER
    assert check(_load(db, "bob", qos=q), running, db) is None


def test_grp_tres_mins_counts_usage_and_what_the_job_may_use() -> None:
    db = _db()
    _set(db, "account", "A", GrpTRESMins="gres/gpu=100")
    used = {"a|": {"gres/gpu": 90 * 60.0}}  # account A is kept as "a", as in Slurm
    assert check(_load(db, gpus=1, time_limit=600), Running(), db, used) is None
    assert check(_load(db, gpus=2, time_limit=600), Running(), db, used) is Reason.ASSOC_GRP_GRES_MIN


def test_enforce_words() -> None:
    assert Enforce.parse("associations,limits,qos") == Enforce(True, True, True)
    assert Enforce.parse("limits") == Enforce(True, True, False)
    assert Enforce.parse(None) == Enforce(False, False, False)
