"""sacctmgr: accounts, users, associations and QOS, with Slurm's grammar.

::

    sacctmgr [-i] [-n] [-p|-P] add|create account NAME[,NAME] [Parent=P] [Fairshare=N] ...
    sacctmgr [-i] add user NAME Account=A[,B] [DefaultAccount=A] [AdminLevel=Administrator]
    sacctmgr [-i] add qos NAME [Priority=N] [MaxWall=1-0] [MaxTRESPerUser=gres/gpu=8] ...
    sacctmgr [-i] modify|update account|user|qos [where] COND... set KEY=VALUE...
    sacctmgr [-i] delete|remove account|user|qos [where] COND...
    sacctmgr show|list account|user|qos|assoc [where COND...] [format=F[%W],...] [tree]

``parse_command`` turns the words into a request (``verb``, ``entity``, ``names``, ``where``,
``set``, show's ``format``/``tree``); the controller validates and applies it
(``muster.ctld.assoc``). ``KEY+=V``/``KEY-=V`` add to or remove from a list (QOS). Without
``-i`` a change is shown first and committed only when you answer ``y``.
"""

from __future__ import annotations

import os
import sys

from muster.cli.acctfmt import call
from muster.cli.common import (
    CommandError,
    argv_or_sys,
    print_lines,
    report,
    version_line,
)
from muster.slurm.columns import Printer, field_list

TYPE_CHECKING = False  # typing and collections.abc cost a command milliseconds to import
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeAlias

PROG = "sacctmgr"

VERBS = {
    "add": "add",
    "create": "add",
    "modify": "modify",
    "update": "modify",
    "delete": "delete",
    "remove": "delete",
    "show": "show",
    "list": "show",
}
ENTITIES = {
    "account": "account",
    "accounts": "account",
    "user": "user",
    "users": "user",
    "qos": "qos",
    "association": "assoc",
    "associations": "assoc",
    "assoc": "assoc",
    "cluster": "cluster",
    "clusters": "cluster",
}


class ParsedCommand:
    __slots__ = ("verb", "entity", "names", "where", "set", "format", "tree", "withassoc")

    def __init__(self, verb: str, entity: str) -> None:
        self.verb = verb
        self.entity = entity
        self.names: list[str] = []
        self.where: dict[str, list[str]] = {}
        self.set: dict[str, str] = {}
        self.format: str | None = None
        self.tree = False
        self.withassoc = False

    def body(self) -> dict[str, Any]:
        return {"verb": self.verb, "entity": self.entity, "names": self.names, "where": self.where, "set": self.set}


def _split_assignment(word: str) -> tuple[str, str, str] | None:
    """``Key=Value``, ``Key+=Value``, ``Key-=Value`` -> (key, op, value)."""
    eq = word.find("=")
    if eq <= 0:
        return None
    key = word[:eq]
    op = "="
    if key.endswith(("+", "-")):
        op = key[-1] + "="
        key = key[:-1]
    return key, op, word[eq + 1 :]


def parse_command(words: list[str]) -> ParsedCommand:
    """The grammar; raises CommandError with what is wrong."""
    if not words:
        raise CommandError("No command given")
    verb = VERBS.get(words[0].lower())
    if verb is None:
        raise CommandError(f"Invalid command: {words[0]}")
    if len(words) < 2:
        raise CommandError(f"Nothing to {verb}: give account, user, qos or association")
    entity = ENTITIES.get(words[1].lower())
    if entity is None or (entity in ("assoc", "cluster") and verb != "show"):
        raise CommandError(f"Unknown entity: {words[1]}")
    cmd = ParsedCommand(verb, entity)
    section = "where" if verb in ("modify", "delete", "show") else "set"
    for word in words[2:]:
        low = word.lower()
        if low == "where":
            section = "where"
            continue
        if low == "set":
            if verb != "modify":
                raise CommandError("'set' is only for modify")
            section = "set"
            continue
        if verb == "show" and low in ("tree", "withassoc", "withassocs", "wassoc"):
            cmd.tree = cmd.tree or low == "tree"
            cmd.withassoc = cmd.withassoc or low != "tree"
            continue
        parts = _split_assignment(word)
        if parts is None:
            cmd.names += [n for n in word.split(",") if n]
            continue
        key, op, value = parts
        lkey = key.lower()
        if verb == "show" and lkey == "format":
            cmd.format = value
            continue
        if lkey in ("name", "names") or (verb == "add" and lkey in ("user", "users") and cmd.entity == "user"):
            cmd.names += [n for n in value.split(",") if n]
            continue
        if section == "where" and verb != "add":
            cmd.where.setdefault(key, []).extend(v for v in value.split(",") if v)
        else:
            if op != "=":
                value = ",".join(op[0] + v for v in value.split(",") if v)
            cmd.set[key] = value
    if verb == "modify" and not cmd.set:
        raise CommandError("You didn't give me anything to set")
    if verb == "delete" and not cmd.names and not cmd.where:
        raise CommandError("You need to specify what to delete")
    return cmd


# --- show -------------------------------------------------------------------------------------


def _tres(d: dict[str, int] | None) -> str:
    if not d:
        return ""
    parts = []
    for name in sorted(d):
        v = d[name]
        if name == "mem":
            parts.append(f"mem={v // 1024}G" if v and v % 1024 == 0 else f"mem={v}M")
        else:
            parts.append(f"{name}={v}")
    return ",".join(parts)


def _wall(seconds: int | None) -> str:
    if seconds is None:
        return ""
    days, rest = divmod(int(seconds), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return f"{days}-{h:02d}:{m:02d}:{s:02d}" if days else f"{h:02d}:{m:02d}:{s:02d}"


def _opt(v: object) -> str:
    return "" if v is None else str(v)


Getter: TypeAlias = "Callable[[dict[str, Any]], str]"


def _lim(name: str, fmt: Callable[[Any], str] = _opt) -> Getter:
    return lambda r: fmt((r.get("limits") or {}).get(name))


# entity -> field key -> (header, width, getter)
_ASSOC_FIELDS: dict[str, tuple[str, int, Getter]] = {
    "cluster": ("Cluster", 10, lambda r: r["_cluster"]),
    "account": ("Account", 10, lambda r: r["_account_shown"]),
    "user": ("User", 10, lambda r: r.get("user", "")),
    "partition": ("Partition", 10, lambda r: ""),
    "fairshare": ("Share", 9, lambda r: _opt(r.get("shares"))),
    "share": ("Share", 9, lambda r: _opt(r.get("shares"))),
    "shares": ("Share", 9, lambda r: _opt(r.get("shares"))),
    "priority": ("Priority", 10, lambda r: ""),
    "grpjobs": ("GrpJobs", 7, _lim("grp_jobs")),
    "grptres": ("GrpTRES", 13, _lim("grp_tres", _tres)),
    "grpsubmit": ("GrpSubmit", 9, _lim("grp_submit_jobs")),
    "grpsubmitjobs": ("GrpSubmit", 9, _lim("grp_submit_jobs")),
    "grpwall": ("GrpWall", 11, lambda r: ""),
    "grptresmins": ("GrpTRESMins", 13, _lim("grp_tres_mins", _tres)),
    "maxjobs": ("MaxJobs", 7, _lim("max_jobs")),
    "maxtres": ("MaxTRES", 13, _lim("max_tres_per_job", _tres)),
    "maxtrespernode": ("MaxTRESPerNode", 14, lambda r: ""),
    "maxsubmit": ("MaxSubmit", 9, _lim("max_submit_jobs")),
    "maxsubmitjobs": ("MaxSubmit", 9, _lim("max_submit_jobs")),
    "maxwall": ("MaxWall", 11, _lim("max_wall", _wall)),
    "maxwalldurationperjob": ("MaxWall", 11, _lim("max_wall", _wall)),
    "maxtresmins": ("MaxTRESMins", 13, lambda r: ""),
    "qos": ("QOS", 20, lambda r: ",".join(r.get("_qos") or [])),
    "defaultqos": ("Def QOS", 9, lambda r: _opt(r.get("default_qos"))),
    "grptresrunmins": ("GrpTRESRunMins", 13, lambda r: ""),
    "parentname": ("Par Name", 10, lambda r: _opt(r.get("parent")) if not r.get("user") else ""),
}
ASSOC_DEFAULT = (
    "cluster,account,user,partition,share,priority,grpjobs,grptres,grpsubmit,grpwall,"
    "grptresmins,maxjobs,maxtres,maxtrespernode,maxsubmit,maxwall,maxtresmins,qos,"
    "defaultqos,grptresrunmins"
)

_ACCOUNT_FIELDS: dict[str, tuple[str, int, Getter]] = {
    "account": ("Account", 10, lambda r: r["name"]),
    "name": ("Account", 10, lambda r: r["name"]),
    "descr": ("Descr", 20, lambda r: r.get("description", "")),
    "description": ("Descr", 20, lambda r: r.get("description", "")),
    "org": ("Org", 20, lambda r: r.get("organization", "")),
    "organization": ("Org", 20, lambda r: r.get("organization", "")),
}
ACCOUNT_DEFAULT = "account,descr,org"
ACCOUNT_ASSOC_DEFAULT = (
    "account,descr,org,cluster,parentname,user,share,priority,grpjobs,grptres,"
    "maxjobs,maxtres,maxsubmit,maxwall,qos,defaultqos"
)

_USER_FIELDS: dict[str, tuple[str, int, Getter]] = {
    "user": ("User", 10, lambda r: r["name"]),
    "name": ("User", 10, lambda r: r["name"]),
    "defaultaccount": ("Def Acct", 10, lambda r: r.get("default_account", "")),
    "defacct": ("Def Acct", 10, lambda r: r.get("default_account", "")),
    "adminlevel": ("Admin", 9, lambda r: r.get("admin_level", "None")),
    "admin": ("Admin", 9, lambda r: r.get("admin_level", "None")),
}
USER_DEFAULT = "user,defaultaccount,adminlevel"
USER_ASSOC_DEFAULT = (
    "user,defaultaccount,adminlevel,cluster,account,partition,share,priority,maxjobs,maxsubmit,maxwall,qos,defaultqos"
)

_QOS_FIELDS: dict[str, tuple[str, int, Getter]] = {
    "name": ("Name", 10, lambda r: r["name"]),
    "description": ("Descr", 11, lambda r: r.get("description", "")),
    "descr": ("Descr", 11, lambda r: r.get("description", "")),
    "priority": ("Priority", 10, lambda r: str(r.get("priority", 0))),
    "gracetime": ("GraceTime", 10, lambda r: _wall(r.get("grace_time") or 0)),
    "preempt": ("Preempt", 10, lambda r: ",".join(r.get("preempt") or [])),
    "preemptexempttime": ("PreemptExemptTime", 19, lambda r: _wall(r.get("preempt_exempt_time"))),
    "preemptmode": ("PreemptMode", 11, lambda r: r.get("preempt_mode") or "cluster"),
    "expediterequeue": ("ExpediteRequeue", 15, lambda r: "Yes" if r.get("expedite_requeue") else "No"),
    "flags": ("Flags", 20, lambda r: ",".join(r.get("flags") or [])),
    "usagethres": ("UsageThres", 10, lambda r: ""),
    "usagefactor": ("UsageFactor", 11, lambda r: f"{float(r.get('usage_factor', 1.0)):.6f}"),
    "grptres": ("GrpTRES", 13, lambda r: _tres(r.get("grp_tres"))),
    "grptresmins": ("GrpTRESMins", 13, lambda r: ""),
    "grptresrunmins": ("GrpTRESRunMins", 13, lambda r: ""),
    "grpjobs": ("GrpJobs", 7, lambda r: _opt(r.get("grp_jobs"))),
    "grpsubmit": ("GrpSubmit", 9, lambda r: _opt(r.get("grp_submit_jobs"))),
    "grpsubmitjobs": ("GrpSubmit", 9, lambda r: _opt(r.get("grp_submit_jobs"))),
    "grpwall": ("GrpWall", 11, lambda r: ""),
    "maxtres": ("MaxTRES", 13, lambda r: _tres(r.get("max_tres_per_job"))),
    "maxtresperjob": ("MaxTRES", 13, lambda r: _tres(r.get("max_tres_per_job"))),
    "maxtrespernode": ("MaxTRESPerNode", 14, lambda r: ""),
    "maxtresmins": ("MaxTRESMins", 13, lambda r: ""),
    "maxwall": ("MaxWall", 11, lambda r: _wall(r.get("max_wall"))),
    "maxwalldurationperjob": ("MaxWall", 11, lambda r: _wall(r.get("max_wall"))),
    "maxtrespu": ("MaxTRESPU", 13, lambda r: _tres(r.get("max_tres_per_user"))),
    "maxtresperuser": ("MaxTRESPU", 13, lambda r: _tres(r.get("max_tres_per_user"))),
    "maxjobspu": ("MaxJobsPU", 9, lambda r: _opt(r.get("max_jobs_per_user"))),
    "maxjobsperuser": ("MaxJobsPU", 9, lambda r: _opt(r.get("max_jobs_per_user"))),
    "maxsubmitpu": ("MaxSubmitPU", 11, lambda r: _opt(r.get("max_submit_jobs_per_user"))),
    "maxsubmitjobsperuser": ("MaxSubmitPU", 11, lambda r: _opt(r.get("max_submit_jobs_per_user"))),
    "maxtrespa": ("MaxTRESPA", 13, lambda r: ""),
    "maxjobspa": ("MaxJobsPA", 9, lambda r: ""),
    "maxsubmitpa": ("MaxSubmitPA", 11, lambda r: ""),
    "mintres": ("MinTRES", 13, lambda r: ""),
}
QOS_DEFAULT = (
    "name,priority,gracetime,preempt,preemptexempttime,preemptmode,flags,usagethres,"
    "usagefactor,grptres,grptresmins,grptresrunmins,grpjobs,grpsubmit,grpwall,maxtres,"
    "maxtrespernode,maxtresmins,maxwall,maxtrespu,maxjobspu,maxsubmitpu,maxtrespa,"
    "maxjobspa,maxsubmitpa,mintres"
)

_CLUSTER_FIELDS: dict[str, tuple[str, int, Getter]] = {
    "cluster": ("Cluster", 10, lambda r: r["name"]),
    "controlhost": ("ControlHost", 15, lambda r: ""),
    "controlport": ("ControlPort", 12, lambda r: ""),
    "rpc": ("RPC", 5, lambda r: ""),
    "share": ("Share", 9, lambda r: "1"),
    "qos": ("QOS", 20, lambda r: "normal"),
}


def _columns(table: dict[str, tuple[str, int, Getter]], fmt: str) -> list[tuple[str, int, Getter]]:
    """``format=Name[%width],...``: names case- and space-blind."""
    return field_list(fmt, table, "Unknown field '{}'", squeeze=True)


def _matches(value: str, wanted: list[str] | None) -> bool:
    """Case-blind, as Slurm's sacctmgr (which keeps names in lower case)."""
    return not wanted or value.lower() in {w.lower() for w in wanted}


def show(cmd: ParsedCommand, objects: dict[str, Any], printer: Printer) -> list[str]:
    where = {k.lower(): v for k, v in cmd.where.items()}
    names = cmd.names + where.get("name", []) + where.get("names", [])
    if cmd.entity == "account":
        names += where.get("account", []) + where.get("accounts", [])
        rows = [a for a in objects["accounts"] if _matches(a["name"], names)]
        if cmd.withassoc:  # one row per association of each account
            rows = _with_assocs(rows, objects, lambda r, a: a["account"] == r["name"])
            cols = _columns(
                {**_ASSOC_FIELDS, **_ACCOUNT_FIELDS, "account": _ASSOC_FIELDS["account"]},
                cmd.format or ACCOUNT_ASSOC_DEFAULT,
            )
        else:
            cols = _columns(_ACCOUNT_FIELDS, cmd.format or ACCOUNT_DEFAULT)
    elif cmd.entity == "user":
        names += where.get("user", []) + where.get("users", [])
        accounts = where.get("account", []) + where.get("accounts", [])
        users_in = {a["user"] for a in objects["assocs"] if a["user"] and _matches(a["account"], accounts)}
        rows = [u for u in objects["users"] if _matches(u["name"], names) and (not accounts or u["name"] in users_in)]
        if cmd.withassoc:  # one row per association of each user (sacctmgr -s / withassoc)
            rows = _with_assocs(rows, objects, lambda r, a: a["user"] == r["name"] and _matches(a["account"], accounts))
            cols = _columns({**_ASSOC_FIELDS, **_USER_FIELDS}, cmd.format or USER_ASSOC_DEFAULT)
        else:
            cols = _columns(_USER_FIELDS, cmd.format or USER_DEFAULT)
    elif cmd.entity == "qos":
        rows = [q for q in objects["qos"] if _matches(q["name"], names)]
        cols = _columns(_QOS_FIELDS, cmd.format or QOS_DEFAULT)
    elif cmd.entity == "cluster":
        rows = [{"name": objects["cluster"]}]
        cols = _columns(_CLUSTER_FIELDS, cmd.format or "cluster,controlhost,controlport,rpc,share,qos")
    else:
        accounts = where.get("account", []) + where.get("accounts", []) + names
        users = where.get("user", []) + where.get("users", [])
        by_key = {f"{a['account']}|{a['user']}": a for a in objects["assocs"]}
        rows = []
        for a in objects["assocs"]:
            if not _matches(a["account"], accounts):
                continue
            if users and a["user"] not in users:
                continue
            r = dict(a)
            r["_cluster"] = objects["cluster"]
            r["_account_shown"] = (" " * a.get("depth", 0) + a["account"]) if cmd.tree else a["account"]
            r["_qos"] = _effective_qos(a, by_key)
            rows.append(r)
        cols = _columns(_ASSOC_FIELDS, cmd.format or ASSOC_DEFAULT)
        if cmd.tree:  # the tree reads from the left
            cols = [(h, -abs(w) if h == "Account" else w, fn) for h, w, fn in cols]
    return printer.lines([(h, w) for h, w, _ in cols], [[fn(r) for _h, _w, fn in cols] for r in rows])


def _with_assocs(
    rows: list[dict[str, Any]], objects: dict[str, Any], mine: Callable[[dict[str, Any], dict[str, Any]], bool]
) -> list[dict[str, Any]]:
    """Each row joined with each of its associations (``mine(row, assoc)``), in order."""
    by_key = {f"{a['account']}|{a['user']}": a for a in objects["assocs"]}
    out = []
    for r in rows:
        for a in objects["assocs"]:
            if not mine(r, a):
                continue
            joined = {**r, **a}  # the association's fields win (user, account, parent, limits)
            joined["_cluster"] = objects["cluster"]
            joined["_account_shown"] = a["account"]
            joined["_qos"] = _effective_qos(a, by_key)
            out.append(joined)
    return out


def _effective_qos(a: dict[str, Any], by_key: dict[str, dict[str, Any]]) -> list[str]:
    node: dict[str, Any] | None = a
    account = a["account"] if a["user"] else a.get("parent")
    seen = 0
    while node is not None and seen < 64:
        if node.get("qos"):
            return list(node["qos"])
        node = by_key.get(f"{account}|") if account else None
        account = node.get("parent") if node else None
        seen += 1
    return ["normal"]


# --- main ------------------------------------------------------------------------------------------


def _confirm() -> bool:
    sys.stdout.write("Would you like to commit changes? (You have 30 seconds to decide)\n(N/y): ")
    sys.stdout.flush()
    try:
        answer = sys.stdin.readline()
    except (OSError, KeyboardInterrupt):
        return False
    return answer.strip().lower() in ("y", "yes")


def main(argv: list[str] | None = None) -> int:
    args = argv_or_sys(argv)
    immediate = bool(os.environ.get("SACCTMGR_IMMEDIATE"))
    header = True
    parsable = trailing = withassoc = False
    words: list[str] = []
    for a in args:
        if a in ("-i", "--immediate"):
            immediate = True
        elif a in ("-n", "--noheader"):
            header = False
        elif a in ("-p", "--parsable"):
            parsable = trailing = True
        elif a in ("-P", "--parsable2"):
            parsable, trailing = True, False
        elif a in ("-s", "--associations"):
            withassoc = True
        elif a in ("-Q", "--quiet", "-v", "--verbose", "-r", "--readonly"):
            continue
        elif a in ("-V", "--version"):
            sys.stdout.write(version_line() + "\n")
            return 0
        elif a in ("-h", "--help", "help", "--usage"):  # Slurm's --usage prints the help too
            sys.stdout.write(HELP)
            return 0
        elif a.startswith("-") and not words:
            sys.stderr.write(f"sacctmgr: unrecognized option '{a}'\nTry \"sacctmgr --help\" for more information\n")
            return 1
        else:
            words.append(a)
    try:
        if words and words[0].lower() == "version":
            sys.stdout.write(version_line() + "\n")
            return 0
        cmd = parse_command(words)
        if withassoc and cmd.verb == "show":
            cmd.withassoc = True
        printer = Printer(parsable=parsable, trailing=trailing, header=header)
        if cmd.verb == "show":
            print_lines(show(cmd, call(PROG, "GET", "/v1/accounting/objects"), printer))
            return 0
        body = cmd.body()
        if not immediate:
            preview = call(PROG, "POST", "/v1/accounting/sacctmgr", {**body, "dry_run": True})
            print_lines(preview.get("lines") or [])
            if preview.get("nothing") or not preview.get("changed"):
                return 0
            if not _confirm():
                print_lines([" Changes Discarded"])
                return 0
            call(PROG, "POST", "/v1/accounting/sacctmgr", body)
            return 0
        answer = call(PROG, "POST", "/v1/accounting/sacctmgr", body)
        print_lines(answer.get("lines") or [])
        return 0
    except CommandError as e:
        if e.message.startswith(" "):
            sys.stderr.write(e.message + "\n")
            return e.rc
        return report(PROG, e)


HELP = """\
sacctmgr [<OPTION>] [<COMMAND>]
    Valid <OPTION> values are:
     -h or --help: equivalent to "help" command
     -i or --immediate: commit changes immediately without asking
     -n or --noheader: no header will be added to the beginning of output
     -p or --parsable: output will be '|' delimited with a '|' at the end
     -P or --parsable2: output will be '|' delimited without a '|' at the end
     -Q or --quiet: equivalent to "quiet" command
     -r or --readonly: equivalent to "readonly" command
     -s or --associations: equivalent to "associations" command
     -v or --verbose: equivalent to "verbose" command
     -V or --version: equivalent to "version" command

  <keyword> may be omitted from the execute line.

    Valid <COMMAND> values are:
     add <ENTITY> <SPECS>     add entity (create is the same)
     delete <ENTITY> <SPECS>  delete the specified entities (remove is the same)
     help                     print this description of use
     list <ENTITY> [<SPECS>]  display info of identified entity (show is the same)
     modify <ENTITY> <SPECS>  modify entity (update is the same)
     version                  display tool version number

  <ENTITY> may be "account", "association", "cluster", "qos" or "user".

  <SPECS> are different for each command entity pair.
       list account       - Names=, Parent=, Format=, WithAssoc, where ...
       add account        - Names=, Parent=, Description=, Organization=,
                            Fairshare=, DefaultQOS=, QOS=, GrpTRES=, MaxTRES=, ...
       modify account     - (where options) Names=, Parent=
                            (set options) Fairshare=, QOS=, DefaultQOS=, GrpTRES=, ...
       delete account     - Names=

       list associations  - Accounts=, Users=, Format=, Tree

       list cluster       - Format=
       add cluster, modify cluster, delete cluster
                          - not supported by muster: its one cluster is named by
                            ClusterName in the configuration

       list qos           - Names=, Format=
       add qos            - Names=, Priority=, MaxWall=, MaxTRESPerUser=,
                            MaxJobsPerUser=, Preempt=, PreemptMode=, Flags=, ...
       modify qos         - (where options) Names=
                            (set options) the same as add, KEY+=V and KEY-=V for lists
       delete qos         - Names=

       list user          - Names=, Accounts=, Format=, WithAssoc
       add user           - Names=, Accounts=, DefaultAccount=, AdminLevel=, ...
       modify user        - (where options) Names=, Accounts=
                            (set options) DefaultAccount=, AdminLevel=, Fairshare=, ...
       delete user        - Names=, Accounts=

  All commands, entities and options are case-insensitive.
"""


if __name__ == "__main__":
    sys.exit(main())
