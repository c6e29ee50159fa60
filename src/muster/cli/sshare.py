"""sshare: fair-share standing of associations (Fair Tree, see ``muster.sched.fairshare``).

Columns as Slurm's: ``Account User RawShares NormShares RawUsage EffectvUsage FairShare``;
``-l`` adds ``NormUsage LevelFS GrpTRESMins TRESRunMins``. Accounts are indented by depth.
Without ``-a`` (or ``-u``) only your own user associations are listed (with every
account); ``-A`` keeps the named accounts and what is below them. RawUsage is the decayed
billing usage in TRES-seconds; FairShare is the Fair Tree factor, 0 to 1, of user rows.
"""

from __future__ import annotations

import sys

from muster.cli.acctfmt import call, read_options
from muster.cli.common import (
    CommandError,
    current_user,
    print_lines,
    report,
)
from muster.slurm.columns import Printer, field_list
from muster.slurm.options import NO_ARG, Opt

TYPE_CHECKING = False  # typing costs a command milliseconds to import
if TYPE_CHECKING:
    from typing import Any

PROG = "sshare"

OPTIONS = (
    Opt("all", "a", NO_ARG),
    Opt("accounts", "A"),
    Opt("users", "u"),
    Opt("long", "l", NO_ARG),
    Opt("noheader", "n", NO_ARG),
    Opt("parsable", "p", NO_ARG),
    Opt("parsable2", "P", NO_ARG),
    Opt("format", "o"),
    Opt("clusters", "M"),
    Opt("Users", "U", NO_ARG),
    Opt("verbose", "v", NO_ARG),
    Opt("version", "V", NO_ARG),
    Opt("help", "h", NO_ARG),
    Opt("usage", None, NO_ARG),
)


def _f6(v: object) -> str:
    if v is None:
        return ""
    x = float(v)  # type: ignore[arg-type]
    return "inf" if x in (float("inf"), float("-inf")) else f"{x:.6f}"


FIELDS = {
    "account": ("Account", -20, lambda r: " " * r["depth"] + r["account"]),
    "user": ("User", 10, lambda r: r["user"]),
    "rawshares": ("RawShares", 10, lambda r: "" if r["raw_shares"] is None else str(r["raw_shares"])),
    "normshares": ("NormShares", 11, lambda r: _f6(r["norm_shares"])),
    "rawusage": ("RawUsage", 11, lambda r: str(int(round(r["raw_usage"])))),
    "normusage": ("NormUsage", 11, lambda r: _f6(r["effective_usage"])),
    "effectvusage": ("EffectvUsage", 13, lambda r: _f6(r["effective_usage"])),
    "fairshare": ("FairShare", 10, lambda r: _f6(r["fairshare"]) if r["user"] else ""),
    "levelfs": ("LevelFS", 10, lambda r: _f6(r["level_fs"]) if r["account"] != "root" or r["user"] else ""),
    "grptresmins": ("GrpTRESMins", 20, lambda r: r.get("grp_tres_mins", "")),
    "tresrunmins": ("TRESRunMins", 20, lambda r: r.get("tres_run_mins", "")),
}
DEFAULT = "account,user,rawshares,normshares,rawusage,effectvusage,fairshare"
LONG = "account,user,rawshares,normshares,rawusage,normusage,effectvusage,fairshare,levelfs,grptresmins,tresrunmins"


def select(
    rows: list[dict[str, Any]], users: list[str] | None, accounts: list[str] | None, users_only: bool
) -> list[dict[str, Any]]:
    out = []
    keep_below: int | None = None
    for r in rows:
        if accounts:
            if not r["user"] and r["account"] in accounts:
                keep_below = r["depth"]
            elif keep_below is not None and r["depth"] <= keep_below and not (r["user"] and r["account"] in accounts):
                keep_below = None
            if keep_below is None and r["account"] not in accounts:
                continue
        if r["user"]:
            if users is not None and r["user"] not in users:
                continue
        elif users_only:
            continue
        out.append(r)
    return out


def main(argv: list[str] | None = None) -> int:
    opts = read_options(PROG, argv, OPTIONS, __doc__)
    if isinstance(opts, int):
        return opts
    try:
        fmt = opts.get("format") or (LONG if "long" in opts else DEFAULT)
        cols = field_list(fmt, FIELDS, 'Invalid field requested: "{}"')
        users: list[str] | None
        if opts.get("users"):
            users = [u for u in str(opts["users"]).split(",") if u]
        elif "all" in opts:
            users = None
        else:
            users = [current_user()]
        accounts = [a for a in str(opts.get("accounts") or "").split(",") if a] or None
        answer = call(PROG, "GET", "/v1/accounting/shares")
        rows = select(answer.get("rows") or [], users, accounts, "Users" in opts)
        parsable2 = "parsable2" in opts
        printer = Printer(
            parsable="parsable" in opts or parsable2,
            trailing="parsable" in opts and not parsable2,
            header="noheader" not in opts,
        )
        print_lines(printer.lines([(h, w) for h, w, _ in cols], [[fn(r) for _h, _w, fn in cols] for r in rows]))
        return 0
    except CommandError as e:
        return report(PROG, e)


if __name__ == "__main__":
    sys.exit(main())
