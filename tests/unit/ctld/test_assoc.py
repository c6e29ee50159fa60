"""sacctmgr's model: adding, modifying and deleting accounts, users and QOS."""

from __future__ import annotations

import pytest

from muster.core.errors import InvalidRequest, PermissionDenied
from muster.ctld.acct_objects import assoc_key
from muster.ctld.assoc import AssocDB


def _db() -> AssocDB:
    db = AssocDB("c")
    db.bootstrap()
    return db


def apply(db: AssocDB, verb: str, entity: str, names: list[str] | None = None, where=None, set=None):  # noqa: A002, ANN001, ANN201
    return db.apply(
        {"verb": verb, "entity": entity, "names": names or [], "where": where or {}, "set": set or {}}, "root", True
    )


def test_a_new_database_holds_root_and_the_normal_qos() -> None:
    db = _db()
    assert set(db.accounts) == {"root"} and set(db.qos) == {"normal"}
    assert db.users["root"].admin_level == "Administrator"
    assert db.assoc("root", "root") is not None


def test_accounts_users_and_limits() -> None:
    db = _db()
    apply(db, "add", "account", ["a", "b"], set={"Fairshare": "2"})
    apply(db, "add", "account", ["a1"], set={"Parent": "a"})
    r = apply(db, "add", "user", ["alice"], set={"Account": "a1,b", "DefaultAccount": "b"})
    assert " Adding User(s)" in r.lines and db.users["alice"].default_account == "b"
    apply(db, "modify", "account", where={"Name": ["a"]}, set={"GrpTRES": "gres/gpu=8", "MaxJobs": "3"})
    a1_alice = db.assoc("a1", "alice")
    assert a1_alice is not None
    assert [x.key for x in db.chain(a1_alice)] == ["a1|alice", "a1|", "a|", "root|"]
    assert db.inherited(a1_alice, "max_jobs") == 3  # MaxJobs comes down the tree
    assert db.assoc("a").limits.grp_tres == {"gres/gpu": 8}
    apply(db, "modify", "account", where={"Name": ["a"]}, set={"GrpTRES": "gres/gpu=-1"})
    assert db.assoc("a").limits.grp_tres == {}
    assert db.assoc("b").shares == 2


def test_a_wrong_request_changes_nothing() -> None:
    db = _db()
    apply(db, "add", "account", ["a"])
    before = db.rows()
    with pytest.raises(InvalidRequest):
        apply(db, "modify", "account", where={"Name": ["a"]}, set={"GrpJobs": "4", "DefaultQOS": "nosuch"})
    assert db.rows() == before
    with pytest.raises(InvalidRequest, match="doesn't exist"):
        apply(db, "add", "user", ["bob"], set={"Account": "nosuch"})
    with pytest.raises(InvalidRequest, match="Unknown option"):
        apply(db, "modify", "qos", ["normal"], set={"Bogus": "1"})


def test_qos_and_deletion() -> None:
    db = _db()
    apply(
        db,
        "add",
        "qos",
        ["long"],
        set={"MaxWall": "2-00:00:00", "MaxJobsPerUser": "2", "MaxTRESPerUser": "gres/gpu=16", "Flags": "DenyOnLimit"},
    )
    q = db.qos["long"]
    assert (q.max_wall, q.max_jobs_per_user, q.max_tres_per_user, q.flags) == (
        172800,
        2,
        {"gres/gpu": 16},
        ["DenyOnLimit"],
    )
    apply(db, "add", "account", ["a"])
    apply(db, "add", "user", ["alice"], set={"Account": "a"})
    apply(db, "modify", "user", ["alice"], set={"QOS": "+long"})
    assert db.assoc("a", "alice").qos == ["normal", "long"]
    apply(db, "delete", "account", ["a"])
    assert "a" not in db.accounts and db.assoc("a", "alice") is None and "alice" not in db.users
    assert apply(db, "delete", "qos", ["nosuch"]).nothing


def test_only_administrators_change_things() -> None:
    db = _db()
    with pytest.raises(PermissionDenied):
        db.apply({"verb": "add", "entity": "account", "names": ["x"]}, "alice", False)
    assert assoc_key("x") not in db.assocs
