"""sprio: the factors of pending jobs' multifactor priority.

``JOBID PARTITION PRIORITY SITE AGE FAIRSHARE JOBSIZE PARTITION QOS`` (``-l`` adds USER,
ASSOC, NICE and TRES): each factor multiplied by its ``PriorityWeight*``; ``-n`` shows the
factors themselves (0 to 1), ``-w`` the weights. PRIORITY is the job's priority from the
controller's last scheduling pass; FAIRSHARE is the Fair Tree factor of the job's
association (``sshare``).
"""

from __future__ import annotations

import sys

from muster.cli.acctfmt import call, read_options
from muster.cli.common import CommandError, print_lines, report
from muster.slurm.columns import letter_columns, render
from muster.slurm.options import NO_ARG, Opt

TYPE_CHECKING = False  # typing costs a command milliseconds to import
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

PROG = "sprio"

DEFAULT_FORMAT = "%.15i %9r %.10Y %.10S %.10A %.10F %.10J %.10P %.10Q"
LONG_FORMAT = "%.15i %9r %.8u %.10Y %.10S %.10A %.10B %.10F %.10J %.10P %.10Q %.11N %.20T"

OPTIONS = (
    Opt("jobs", "j"),
    Opt("user", "u"),
    Opt("long", "l", NO_ARG),
    Opt("norm", "n", NO_ARG),
    Opt("weights", "w", NO_ARG),
    Opt("noheader", "h", NO_ARG),
    Opt("format", "o"),
    Opt("partition", "p"),
    Opt("clusters", "M"),
    Opt("sort", "S"),
    Opt("verbose", "v", NO_ARG),
    Opt("version", "V", NO_ARG),
    Opt("help", None, NO_ARG),
    Opt("usage", None, NO_ARG),
)

# letter -> (header, factor key, weight key)
LETTERS = {
    "i": ("JOBID", None, None),
    "r": ("PARTITION", None, None),
    "u": ("USER", None, None),
    "Y": ("PRIORITY", None, None),
    "y": ("PRIORITY", None, None),
    "S": ("SITE", "site", "site"),
    "A": ("AGE", "age", "age"),
    "a": ("AGE", "age", "age"),
    "B": ("ASSOC", "assoc", "assoc"),
    "b": ("ASSOC", "assoc", "assoc"),
    "F": ("FAIRSHARE", "fairshare", "fairshare"),
    "f": ("FAIRSHARE", "fairshare", "fairshare"),
    "J": ("JOBSIZE", "jobsize", "jobsize"),
    "j": ("JOBSIZE", "jobsize", "jobsize"),
    "P": ("PARTITION", "partition_factor", "partition"),
    "p": ("PARTITION", "partition_factor", "partition"),
    "Q": ("QOS", "qos", "qos"),
    "q": ("QOS", "qos", "qos"),
    "N": ("NICE", None, None),
    "T": ("TRES", None, None),
    "t": ("TRES", None, None),
}


def value(letter: str, row: dict[str, Any], weights: dict[str, Any], norm: bool) -> str:
    header, factor, weight = LETTERS[letter]
    if letter == "i":
        return str(row["job_id"])
    if letter == "r":
        return str(row["partition"])
    if letter == "u":
        return str(row["user"])
    if letter in "Yy":
        return f"{row['priority'] / 4294967295:.10f}" if norm else str(row["priority"])
    if letter == "N":
        return str(row.get("nice", 0))
    if letter in "Tt":
        return str(row.get("tres") or "")
    f = float(row.get(factor) or 0.0)  # type: ignore[arg-type]
    if norm or letter.islower():
        return f"{f:.7f}"
    return str(int(round(f * float(weights.get(weight, 0)))))  # type: ignore[arg-type]


def weight_value(letter: str, weights: dict[str, Any]) -> str:
    header, factor, weight = LETTERS[letter]
    if weight is None:
        return "Weights" if letter == "i" else ""
    return str(weights.get(weight, 0))


def main(argv: list[str] | None = None) -> int:
    opts = read_options(PROG, argv, OPTIONS, HELP, USAGE)
    if isinstance(opts, int):
        return opts
    try:
        answer = call(PROG, "GET", "/v1/accounting/priority")
        if not answer.get("multifactor"):
            raise CommandError(
                f"You are not running a supported priority plugin\n({answer.get('priority_type')}).\n"
                "Only 'priority/multifactor' is supported.",
                raw=True,
            )
        fmt = opts.get("format") or (LONG_FORMAT if "long" in opts else DEFAULT_FORMAT)
        if "norm" in opts and not opts.get("format"):
            fmt = fmt.replace("%.10Y", "%.10y")
        # A row is a function of the letter: a job's factors, or the weights (-w).
        cols = letter_columns(
            fmt,
            lambda c: None if c not in LETTERS else (LETTERS[c][0], lambda get, c=c: get(c), True),
            "Invalid format specification: %{}",
        )
        weights = answer.get("weights") or {}
        rows = answer.get("jobs") or []
        if opts.get("jobs"):
            wanted = {j.strip() for j in str(opts["jobs"]).split(",") if j.strip()}
            rows = [r for r in rows if str(r["job_id"]) in wanted]
            missing = wanted - {str(r["job_id"]) for r in rows}
            if missing and not rows:
                raise CommandError("Unable to find jobs matching user/id(s) specified", raw=False)
        if opts.get("user"):
            users = {u for u in str(opts["user"]).split(",") if u}
            rows = [r for r in rows if r["user"] in users]
        if opts.get("partition"):
            parts = {p for p in str(opts["partition"]).split(",") if p}
            rows = [r for r in rows if r["partition"] in parts]

        getters: list[Callable[[str], str]]
        if "weights" in opts:
            getters = [lambda c: weight_value(c, weights)]
        else:
            norm = "norm" in opts

            def getter(r: dict[str, Any]) -> Callable[[str], str]:  # one job's row
                return lambda c: value(c, r, weights, norm)

            getters = [getter(r) for r in rows]
        print_lines(render(getters, cols, "noheader" not in opts))
        return 0
    except CommandError as e:
        return report(PROG, e)


USAGE = """\
Usage: sprio [-j jid[s]] [-u user_name[s]] [-o format] [-p partitions]
             [-S sort] [-M cluster] [--usage] [-h] [-l] [-n] [-v] [-w]
"""

HELP = """\
Usage: sprio [OPTIONS]
  -h, --noheader                  no headers on output
  -j, --jobs                      comma separated list of jobs
                                  to view, default is all
  -l, --long                      long report
  -M, --cluster=cluster_name      cluster to issue commands to (muster has one)
  -n, --norm                      display normalized values
  -o, --format=format             format specification
  -p, --partition=partition_name  comma separated list of partitions
  -S, --sort=sort_list            comma separated list of fields to sort on
  -u, --user=user_name            comma separated list of users to view
  -v, --verbose                   verbosity level
  -V, --version                   output version information and exit
  -w, --weights                   show the weights for each priority factor

Help options:
  --help                          show this help message
  --usage                         display a brief summary of sprio options
"""


if __name__ == "__main__":
    sys.exit(main())
