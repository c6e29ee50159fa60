"""sacctmgr's grammar: words to requests, as Slurm reads them."""

from __future__ import annotations

import pytest

from muster.cli.common import CommandError
from muster.cli.sacctmgr import parse_command, show


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (
            "add account a,b Parent=root Fairshare=10",
            ("add", "account", ["a", "b"], {}, {"Parent": "root", "Fairshare": "10"}),
        ),
        (
            "create user alice Account=a DefaultAccount=a AdminLevel=Operator",
            ("add", "user", ["alice"], {}, {"Account": "a", "DefaultAccount": "a", "AdminLevel": "Operator"}),
        ),
        (
            "modify account where name=a set GrpTRES=gres/gpu=8 MaxJobs=4",
            ("modify", "account", ["a"], {}, {"GrpTRES": "gres/gpu=8", "MaxJobs": "4"}),
        ),
        (
            "update user alice where account=a set MaxSubmitJobs=10",
            ("modify", "user", ["alice"], {"account": ["a"]}, {"MaxSubmitJobs": "10"}),
        ),
        ("modify user alice set qos+=long,high", ("modify", "user", ["alice"], {}, {"qos": "+long,+high"})),
        ("delete qos where name=long", ("delete", "qos", ["long"], {}, {})),
        ("remove user alice account=b", ("delete", "user", ["alice"], {"account": ["b"]}, {})),
        (
            "add qos long MaxWall=1-0 MaxTRESPerUser=gres/gpu=16 Flags=DenyOnLimit",
            ("add", "qos", ["long"], {}, {"MaxWall": "1-0", "MaxTRESPerUser": "gres/gpu=16", "Flags": "DenyOnLimit"}),
        ),
    ],
)
def test_words_become_requests(words: str, expected: tuple) -> None:  # type: ignore[type-arg]
    cmd = parse_command(words.split())
    assert (cmd.verb, cmd.entity, cmd.names, cmd.where, cmd.set) == expected


def test_show_reads_format_and_tree() -> None:
    cmd = parse_command("show assoc where account=a format=account,user,share tree".split())
    assert (cmd.verb, cmd.entity, cmd.where, cmd.format, cmd.tree) == (
        "show",
        "assoc",
        {"account": ["a"]},
        "account,user,share",
        True,
    )


@pytest.mark.parametrize(
    "words", ["", "frobnicate account a", "add", "add assoc x", "modify account a", "delete account"]
)
def test_malformed_commands_are_refused(words: str) -> None:
    with pytest.raises(CommandError):
        parse_command(words.split())


def test_show_assoc_tree_indents_accounts_from_the_left() -> None:
    from muster.slurm.columns import Printer

    objects = {
        "cluster": "c",
        "assocs": [
            {"account": "root", "user": "", "parent": None, "shares": 1, "limits": {}, "qos": [], "depth": 0},
            {
                "account": "a",
                "user": "",
                "parent": "root",
                "shares": 1,
                "limits": {"grp_tres": {"gres/gpu": 8}},
                "qos": [],
                "depth": 1,
            },
            {"account": "a", "user": "alice", "parent": None, "shares": 1, "limits": {}, "qos": [], "depth": 2},
        ],
    }
    cmd = parse_command("show assoc format=account,user,share,grptres tree".split())
    assert show(cmd, objects, Printer()) == [
        "Account          User     Share       GrpTRES ",
        "---------- ---------- --------- ------------- ",
        "root                          1               ",
        " a                            1    gres/gpu=8 ",
        "  a             alice         1               ",
    ]
    cmd = parse_command("show assoc format=account,user,grptres".split())
    assert show(cmd, objects, Printer(parsable=True))[1:] == ["root||", "a||gres/gpu=8", "a|alice|"]


OBJECTS = {
    "cluster": "c",
    "accounts": [{"name": "root"}, {"name": "a"}, {"name": "b"}],
    "users": [
        {"name": "alice", "default_account": "a", "admin_level": "None"},
        {"name": "bob", "default_account": "b", "admin_level": "None"},
    ],
    "assocs": [
        {"account": "root", "user": "", "parent": None, "shares": 1, "limits": {}, "qos": [], "depth": 0},
        {"account": "a", "user": "", "parent": "root", "shares": 1, "limits": {}, "qos": [], "depth": 1},
        {"account": "b", "user": "", "parent": "root", "shares": 1, "limits": {}, "qos": [], "depth": 1},
        {"account": "a", "user": "alice", "parent": None, "shares": 1, "limits": {}, "qos": [], "depth": 2},
        {"account": "b", "user": "alice", "parent": None, "shares": 1, "limits": {}, "qos": [], "depth": 2},
        {"account": "b", "user": "bob", "parent": None, "shares": 1, "limits": {}, "qos": [], "depth": 2},
    ],
}


def test_dash_s_lists_a_users_associations(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``sacctmgr -n -s list user X format=account``: the accounts X may charge, one a line."""
    from muster.cli import sacctmgr

    monkeypatch.setattr(sacctmgr, "call", lambda *a, **k: OBJECTS)
    assert sacctmgr.main(["-n", "-s", "list", "user", "alice", "format=account"]) == 0
    assert capsys.readouterr().out.split() == ["a", "b"]
    assert sacctmgr.main(["-P", "list", "user", "bob", "withassoc", "format=user,account,defaultaccount"]) == 0
    assert capsys.readouterr().out.splitlines() == ["User|Account|Def Acct", "bob|b|b"]
    assert sacctmgr.main(["-n", "-P", "-s", "list", "account", "b", "format=account,user"]) == 0
    assert capsys.readouterr().out.splitlines() == ["b|", "b|alice", "b|bob"]


def test_help_and_usage_print_the_commands_entities_and_specs(capsys) -> None:
    # sacctmgr(1): --usage and -h/--help both show the description of use
    from muster.cli import sacctmgr as cmd

    for flag in ("--usage", "--help", "-h"):
        assert cmd.main([flag]) == 0
        out = capsys.readouterr().out
        assert out.startswith("sacctmgr [<OPTION>] [<COMMAND>]\n")
        for words in ("Valid <OPTION> values are:", "Valid <COMMAND> values are:", "<ENTITY> may be"):
            assert words in out
        for pair in ("add account", "list associations", "modify user", "delete qos", "list cluster"):
            assert pair in out
