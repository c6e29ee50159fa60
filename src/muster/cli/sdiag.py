"""sdiag: the controller's scheduling diagnostics, in Slurm's sections.

Usage: sdiag [OPTIONS]
  -a, --all            show every statistic (the default)
  -r, --reset          reset the statistics (administrators only)
  -i, --sort-by-id     sort the RPCs by message type number
  -t, --sort-by-time   sort the RPCs by total run time
  -T, --sort-by-time2  sort the RPCs by average run time
  -M, --cluster=NAME   accepted for Slurm compatibility (one cluster)
  -h, --help           show this help message
      --usage          display brief usage message
  -V, --version        display current version number

Sections: server (event-loop tasks for "Server thread count", launches and signals in
flight for "Agent queue size"), jobs submitted/started/completed/canceled/failed since
the statistics were last reset, jobs pending and running now, the main scheduler's cycles
(muster's scheduling pass, in microseconds), backfill (the share of each pass that gave
planned starts or backfilled jobs), and the requests the controller answered by message
type and by user. Statistics start at the controller's start and at each ``--reset``.
RPC rows by other users are hidden from non-administrators when PrivateData hides users
or jobs.
"""

from __future__ import annotations

import sys
import time

from muster.cli.acctfmt import call, read_options
from muster.cli.common import CommandError, report
from muster.slurm.options import NO_ARG, Opt

TYPE_CHECKING = False  # typing costs a command milliseconds to import
if TYPE_CHECKING:
    from typing import Any

PROG = "sdiag"

OPTIONS = (
    Opt("all", "a", NO_ARG),
    Opt("reset", "r", NO_ARG),
    Opt("sort-by-id", "i", NO_ARG),
    Opt("sort-by-time", "t", NO_ARG),
    Opt("sort-by-time2", "T", NO_ARG),
    Opt("cluster", "M"),
    Opt("help", "h", NO_ARG),
    Opt("usage", None, NO_ARG),
    Opt("version", "V", NO_ARG),
)
USAGE = "Usage: sdiag [-M cluster] [-aritT]\n"
STARS = "*" * 55


def ctime(epoch: float | None) -> str:
    """Slurm's date in sdiag: ``Thu Dec 03 18:30:00 2026 (1764786600)``."""
    if not epoch:
        return "N/A"
    return f"{time.strftime('%a %b %d %H:%M:%S %Y', time.localtime(epoch))} ({int(epoch)})"


def _per(total: int, count: int) -> int:
    return total // count if count else 0


def render(d: dict[str, Any], sort: str = "count") -> list[str]:
    """sdiag's text from the controller's ``/v1/diag`` answer."""
    now = float(d["now"])
    minutes = max(1.0, (now - float(d["since"])) / 60.0)
    lines = [
        STARS,
        f"sdiag output at {ctime(now)}",
        f"Data since      {ctime(d['since'])}",
        STARS,
        f"Server version:       muster {d.get('version') or 'N/A'}",
        f"Server thread count:  {d['server_tasks']}",
        f"Agent queue size:     {d['agent_queue']}",
        f"Agent count:          {d['agent_queue']}",
        "Agent thread count:   0",
        "DBD Agent queue size: 0",
        "",
        f"Jobs submitted: {d['submitted']}",
        f"Jobs started:   {d['started']}",
        f"Jobs completed: {d['completed']}",
        f"Jobs canceled:  {d['canceled']}",
        f"Jobs failed:    {d['failed']}",
        "",
        f"Job states ts:  {ctime(now)}",
        f"Jobs pending:   {d['jobs_pending']}",
        f"Jobs running:   {d['jobs_running']}",
        "",
        "Main schedule statistics (microseconds):",
        f"\tLast cycle:   {d['cycle_last_us']}",
        f"\tMax cycle:    {d['cycle_max_us']}",
        f"\tTotal cycles: {d['cycles']}",
    ]
    if d["cycles"]:
        lines += [
            f"\tMean cycle:   {_per(d['cycle_sum_us'], d['cycles'])}",
            f"\tMean depth cycle:  {_per(d['depth_sum'], d['cycles'])}",
            f"\tCycles per minute: {int(d['cycles'] / minutes)}",
            f"\tLast queue length: {d['queue_last']}",
        ]
    lines += [
        "",
        "Backfilling stats",
        f"\tTotal backfilled jobs (since last slurm start): {d['backfilled_total']}",
        f"\tTotal backfilled jobs (since last stats cycle start): {d['backfilled']}",
        "\tTotal backfilled heterogeneous job components: 0",
        f"\tTotal cycles: {d['bf_cycles']}",
        f"\tLast cycle when: {ctime(d['bf_last_when'])}",
        f"\tLast cycle: {d['bf_last_us']}",
        f"\tMax cycle:  {d['bf_max_us']}",
    ]
    if d["bf_cycles"]:
        lines += [
            f"\tMean cycle: {_per(d['bf_sum_us'], d['bf_cycles'])}",
            f"\tLast depth cycle: {d['bf_depth_last']}",
            f"\tLast depth cycle (try sched): {d['bf_depth_last']}",
            f"\tDepth Mean: {_per(d['bf_depth_sum'], d['bf_cycles'])}",
            f"\tDepth Mean (try depth): {_per(d['bf_depth_sum'], d['bf_cycles'])}",
            f"\tLast queue length: {d['bf_queue_last']}",
        ]
    lines += ["", "Remote Procedure Call statistics by message type"]
    types = [(str(n), int(num), int(c), int(t)) for n, num, c, t in d["rpc_types"]]
    if sort == "id":
        types.sort(key=lambda r: (r[1], r[0]))
    elif sort == "time":
        types.sort(key=lambda r: (-r[3], r[0]))
    elif sort == "time2":
        types.sort(key=lambda r: (-_per(r[3], r[2]), r[0]))
    else:
        types.sort(key=lambda r: (-r[2], r[0]))
    for name, num, count, total in types:
        lines.append(f"\t{name:<40}({num:>5}) count:{count:<6} ave_time:{_per(total, count):<6} total_time:{total}")
    lines += ["", "Remote Procedure Call statistics by user"]
    users = [(str(u), int(uid), int(c), int(t)) for u, uid, c, t in d["rpc_users"]]
    if sort == "id":
        users.sort(key=lambda r: (r[1], r[0]))
    elif sort == "time":
        users.sort(key=lambda r: (-r[3], r[0]))
    elif sort == "time2":
        users.sort(key=lambda r: (-_per(r[3], r[2]), r[0]))
    else:
        users.sort(key=lambda r: (-r[2], r[0]))
    for user, uid, count, total in users:
        lines.append(f"\t{user:<16}({uid:>8}) count:{count:<6} ave_time:{_per(total, count):<6} total_time:{total}")
    lines += ["", "Pending RPC statistics", "\tNo pending RPCs"]
    return lines


def main(argv: list[str] | None = None) -> int:
    opts = read_options(PROG, argv, OPTIONS, __doc__, USAGE)
    if isinstance(opts, int):
        return opts
    try:
        if "reset" in opts:
            call_reset()
            sys.stdout.write("Reset scheduling statistics\n")
            return 0
        sort = "count"
        if "sort-by-id" in opts:
            sort = "id"
        elif "sort-by-time2" in opts:
            sort = "time2"
        elif "sort-by-time" in opts:
            sort = "time"
        answer = call(PROG, "GET", "/v1/diag")
        sys.stdout.write("\n".join(render(answer, sort)) + "\n")
        return 0
    except CommandError as e:
        return report(PROG, e)


def call_reset() -> None:
    """``--reset``: refused by the controller for anyone but an administrator, answered as
    Slurm's sdiag answers (``slurm_reset_statistics: Access/permission denied``)."""
    try:
        call(PROG, "POST", "/v1/diag/reset", {})
    except CommandError as e:
        raise CommandError(f"slurm_reset_statistics: {e.message}", raw=True) from None


if __name__ == "__main__":
    sys.exit(main())
