"""sreport: usage over a time range, from the accounting records.

::

    sreport [-t Minutes|Hours|Seconds|Percent] [-T cpu|gres/gpu|...] [-P|-p] [-n]
            cluster utilization | user topusage [topcount=N] | cluster AccountUtilizationByUser
            | cluster UserUtilizationByAccount | job goodput [group=account|user|partition]
            [start=TIME] [end=TIME] [accounts=A,B] [users=U,V]

The default range is yesterday (midnight to midnight), as in Slurm; TIME takes sacct's
forms. ``-T gres/gpu -t hours`` reports GPU-hours. Utilization's Down is the time nodes
spent DOWN or drained (and empty), from the controller's record of node outages; Planned
Down and Planned are 0 (muster neither powers nodes down nor counts reserved idle time).

``job goodput`` is muster's own report (Slurm has none): for the jobs that ran in the
range, each counted whole over all its attempts, the GPU-hours allocated and, for those
that reported progress (``muster.progress``), how they split into startup, work lost to
failures and productive work; Goodput is productive over the allocated time of the jobs
that reported. A job without GPUs weighs as one GPU. Rows by account (default), user or
partition (``group=``). See docs/training.md.
"""

from __future__ import annotations

import sys
import time

from muster.cli.acctfmt import call, query_string
from muster.cli.common import CommandError, argv_or_sys, print_lines, report, version_line
from muster.slurm.columns import Printer

TYPE_CHECKING = False  # typing costs a command milliseconds to import
if TYPE_CHECKING:
    from typing import Any

PROG = "sreport"

_UNITS = {
    "minutes": ("Minutes", 60.0),
    "hours": ("Hours", 3600.0),
    "seconds": ("Seconds", 1.0),
    "percent": ("Percent", 0.0),
}
_RULE = "-" * 80


def _day_start(t: float) -> float:
    lt = time.localtime(t)
    return time.mktime((lt.tm_year, lt.tm_mon, lt.tm_mday, 0, 0, 0, 0, 0, -1))


def _ts(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def _proper_name(login: str) -> str:
    import pwd

    try:
        return pwd.getpwnam(login).pw_gecos.split(",")[0]
    except KeyError:
        return ""


class Options:
    def __init__(self) -> None:
        self.unit = ("Minutes", 60.0)
        self.tres = ["cpu"]
        self.tres_given = False
        self.printer = Printer()
        self.words: list[str] = []


def parse(argv: list[str]) -> Options:
    o = Options()
    header = True
    parsable = trailing = False
    i = 0
    while i < len(argv):
        a = argv[i]
        i += 1
        value = None
        for flag in ("-t", "--time-format", "-T", "--tres"):
            if a == flag or a.startswith(flag + "="):
                if "=" in a:
                    value = a.split("=", 1)[1]
                elif i < len(argv):
                    value = argv[i]
                    i += 1
                else:
                    raise CommandError(f"option {flag} requires an argument")
                if flag in ("-t", "--time-format"):
                    unit = _UNITS.get(value.lower().rstrip("s") + "s") or _UNITS.get(value.lower())
                    if unit is None:
                        raise CommandError(f"unknown time format {value}")
                    o.unit = unit
                else:
                    o.tres = [x.strip() for x in value.split(",") if x.strip()]
                    o.tres_given = True
                break
        if value is not None:
            continue
        if a in ("-n", "--noheader"):
            header = False
        elif a in ("-p", "--parsable"):
            parsable = trailing = True
        elif a in ("-P", "--parsable2"):
            parsable, trailing = True, False
        elif a in ("-a", "--all_clusters", "-v", "--verbose", "-Q", "--quiet"):
            continue
        elif a in ("-V", "--version"):
            o.words = ["version"]
            return o
        elif a in ("-h", "--help", "--usage"):
            o.words = ["help"]
            return o
        elif a.startswith("-"):
            raise CommandError(f"unrecognized option '{a}'")
        else:
            o.words.append(a)
    o.printer = Printer(parsable=parsable, trailing=trailing, header=header)
    return o


def _amount(seconds: float, o: Options, reported: float) -> str:
    if o.unit[0] == "Percent":
        return f"{(100.0 * seconds / reported) if reported else 0.0:.2f}%"
    return str(int(round(seconds / o.unit[1])))


def _banner(title: str, start: float, end: float, o: Options, secs: bool = False) -> list[str]:
    what = "TRES" if o.tres_given else "CPU"
    unit = o.unit[0]
    span = f" ({int(end - start)} secs)" if secs else ""
    lines = [_RULE, f"{title} {_ts(start)} - {_ts(end - 1)}{span}"]
    lines.append(f"Usage reported in {what} {unit}" if unit != "Percent" else "Usage reported in Percentage of Total")
    lines.append(_RULE)
    return lines


def _widen(columns: list[tuple[str, int]], rows: list[list[str]]) -> list[tuple[str, int]]:
    """Numbers never cut: a column grows to its widest value."""
    out = []
    for i, (name, w) in enumerate(columns):
        widest = max((len(r[i]) for r in rows), default=0)
        out.append((name, max(abs(w), widest) * (1 if w > 0 else -1)))
    return out


def utilization(report_: dict[str, Any], o: Options) -> list[str]:
    rows = []
    for t in o.tres:
        alloc = float(report_["allocated"].get(t, 0.0))
        cap = float(report_["capacity"].get(t, 0.0))
        down = float(report_["down"].get(t, 0.0))
        idle = max(0.0, cap - alloc - down)
        row = [report_["cluster"]]
        if o.tres_given:
            row.append(t)
        row += [
            _amount(alloc, o, cap),
            _amount(down, o, cap),
            _amount(0, o, cap),
            _amount(idle, o, cap),
            _amount(0, o, cap),
            _amount(cap, o, cap),
        ]
        rows.append(row)
    cols = (
        [("Cluster", 9)]
        + ([("TRES Name", 14)] if o.tres_given else [])
        + [("Allocated", 10), ("Down", 8), ("PLND Dow", 8), ("Idle", 8), ("Planned", 8), ("Reported", 8)]
    )
    return o.printer.lines(_widen(cols, rows), rows)


def _used(entry: dict[str, Any], t: str) -> float:
    return float((entry.get("tres") or {}).get(t, 0.0))


def topusage(report_: dict[str, Any], o: Options, top: int, users: set[str], accounts: set[str]) -> list[str]:
    t = o.tres[0]
    entries = [
        e
        for e in report_["usage"]
        if (not users or e["user"] in users) and (not accounts or e["account"] in accounts) and _used(e, t) > 0
    ]
    entries.sort(key=lambda e: (-_used(e, t), e["user"], e["account"]))
    cap = float(report_["capacity"].get(t, 0.0))
    rows = []
    for e in entries[:top]:
        row = [report_["cluster"], e["user"], _proper_name(e["user"]), e["account"]]
        if o.tres_given:
            row.append(t)
        row += [_amount(_used(e, t), o, cap), "0"]
        rows.append(row)
    cols = (
        [("Cluster", 9), ("Login", 9), ("Proper Name", 15), ("Account", 15)]
        + ([("TRES Name", 14)] if o.tres_given else [])
        + [("Used", 10), ("Energy", 8)]
    )
    return o.printer.lines(_widen(cols, rows), rows)


def by_account(
    report_: dict[str, Any], o: Options, users_first: bool, users: set[str], accounts: set[str]
) -> list[str]:
    """AccountUtilizationByUser: each account (its subtree's usage), then its users."""
    t = o.tres[0]
    cap = float(report_["capacity"].get(t, 0.0))
    tree = report_.get("accounts") or {}
    usage = report_["usage"]
    subtree_total: dict[str, float] = {}
    for e in usage:
        account = e["account"]
        seen = 0
        while account is not None and seen < 64:
            subtree_total[account] = subtree_total.get(account, 0.0) + _used(e, t)
            account = (tree.get(account) or {}).get("parent")
            seen += 1
    rows = []
    for account, info in tree.items():
        if accounts and account not in accounts:
            continue
        depth = int(info.get("depth", 0))
        row = [report_["cluster"], " " * depth + account, "", ""]
        if o.tres_given:
            row.append(t)
        rows.append(row + [_amount(subtree_total.get(account, 0.0), o, cap), "0"])
        for e in sorted((e for e in usage if e["account"] == account), key=lambda e: e["user"]):
            if users and e["user"] not in users:
                continue
            row = [report_["cluster"], " " * (depth + 1) + account, e["user"], _proper_name(e["user"])]
            if o.tres_given:
                row.append(t)
            rows.append(row + [_amount(_used(e, t), o, cap), "0"])
    cols = (
        [("Cluster", 9), ("Account", -15), ("Login", 9), ("Proper Name", 15)]
        + ([("TRES Name", 14)] if o.tres_given else [])
        + [("Used", 10), ("Energy", 8)]
    )
    del users_first
    return o.printer.lines(_widen(cols, rows), rows)


def goodput(report_: dict[str, Any], o: Options, group: str, users: set[str], accounts: set[str]) -> list[str]:
    """``job goodput``: GPU time of the jobs that ran in the range, by ``group``."""
    sums: dict[str, dict[str, float]] = {}
    for e in report_.get("goodput") or []:
        if (users and e["user"] not in users) or (accounts and e["account"] not in accounts):
            continue
        row = sums.setdefault(e[group], {})
        for k in ("jobs", "allocated", "reported_jobs", "reported", "startup", "lost", "productive"):
            row[k] = row.get(k, 0.0) + float(e.get(k) or 0.0)
    hours = o.unit if o.unit[0] != "Percent" else _UNITS["hours"]
    rows = []
    for key in sorted(sums):
        g = sums[key]
        share = f"{100.0 * g['productive'] / g['reported']:.2f}%" if g["reported"] > 0 else "n/a"
        rows.append(
            [report_["cluster"], key, str(int(g["jobs"])), str(int(g["reported_jobs"]))]
            + [str(int(round(g[k] / hours[1]))) for k in ("allocated", "startup", "lost", "productive")]
            + [share]
        )
    title = {"account": "Account", "user": "Login", "partition": "Partition"}[group]
    cols = [
        ("Cluster", 9),
        (title, -15),
        ("Jobs", 6),
        ("Reporting", 9),
        ("Allocated", 10),
        ("Startup", 10),
        ("Lost", 10),
        ("Productive", 10),
        ("Goodput", 8),
    ]
    return o.printer.lines(_widen(cols, rows), rows)


def main(argv: list[str] | None = None) -> int:
    try:
        o = parse(argv_or_sys(argv))
        if o.words[:1] == ["version"]:
            sys.stdout.write(version_line() + "\n")
            return 0
        if not o.words or o.words[:1] == ["help"]:
            sys.stdout.write(__doc__ or "")
            return 0
        now = time.time()
        start = _day_start(now) - 86400
        end = _day_start(now)
        top = 10
        users: set[str] = set()
        accounts: set[str] = set()
        group = "account"
        plain = []
        from muster.cli.sacct import parse_time

        for w in o.words:
            key, eq, value = w.partition("=")
            k = key.lower()
            if not eq:
                plain.append(k)
            elif k in ("start", "starttime"):
                start = parse_time(value, now)
            elif k in ("end", "endtime"):
                end = parse_time(value, now)
            elif k == "topcount":
                if not value.isdigit() or not 0 < int(value) <= 1_000_000:
                    raise CommandError(f"Invalid TopCount: {value}")
                top = int(value)
            elif k in ("group", "groupby") and value.lower() in ("account", "user", "partition"):
                group = value.lower()
            elif k in ("users", "user"):
                users = {u for u in value.split(",") if u}
            elif k in ("accounts", "account"):
                accounts = {a for a in value.split(",") if a}
            elif k in ("clusters", "cluster", "format", "tree"):
                continue
            else:
                raise CommandError(f"Unknown condition: {w}")
        if end <= start:
            raise CommandError("The end time must be after the start time")
        what = " ".join(plain)
        kinds = {
            "cluster utilization": "util",
            "cluster util": "util",
            "user topusage": "top",
            "user top": "top",
            "cluster accountutilizationbyuser": "acct",
            "cluster accountutilization": "acct",
            "cluster userutilizationbyaccount": "useracct",
            "job goodput": "goodput",
        }
        kind = kinds.get(what)
        if kind is None:
            raise CommandError(f"Not valid report: {what or '(none)'}")
        data = call(PROG, "GET", "/v1/accounting/usage" + query_string({"start": start, "end": end}))
        if kind == "goodput":
            unit = o.unit[0] if o.unit[0] != "Percent" else "Hours"
            lines = [_RULE, f"Job Goodput {_ts(start)} - {_ts(end - 1)} ({int(end - start)} secs)"]
            lines += [f"Time reported in GPU {unit}", _RULE] + goodput(data, o, group, users, accounts)
        elif kind == "util":
            lines = _banner("Cluster Utilization", start, end, o) + utilization(data, o)
        elif kind == "top":
            lines = _banner(f"Top {top} Users", start, end, o, secs=True) + topusage(data, o, top, users, accounts)
        elif kind == "acct":
            lines = _banner("Cluster/Account/User Utilization", start, end, o, secs=True) + by_account(
                data, o, False, users, accounts
            )
        else:
            lines = _banner("Cluster/User/Account Utilization", start, end, o, secs=True) + topusage(
                data, o, 1 << 30, users, accounts
            )
        if not o.printer.header:
            lines = [
                x
                for x in lines
                if x not in (_RULE,)
                and not x.startswith(
                    ("Cluster Utilization", "Top ", "Usage reported", "Cluster/", "Job Goodput", "Time reported")
                )
            ]
        print_lines(lines)
        return 0
    except CommandError as e:
        return report(PROG, e)


if __name__ == "__main__":
    sys.exit(main())
