"""strigger: event triggers set, listed and cleared in the controller (``ctld.triggers``):
node events (``--down``, ``--drained``, ``--fail``, ``--up``, ``--idle``, ``--reconfig``)
and job events (``--fini``, ``--time`` with ``--offset``), each running ``--program`` as
the user who set it, on the controller's host, with the nodes or the job id as argument."""

from __future__ import annotations

import sys

from muster.cli.acctfmt import call
from muster.cli.common import CommandError, argv_or_sys, report, usage_error, version_line
from muster.slurm.argscan import NO_ARG, OPTIONAL, Opt, OptionError, OptionTable, getopt

PROG = "strigger"

HELP = """\
Usage: strigger [--set | --get | --clear] [OPTIONS]
      --set           create a trigger
      --get           get trigger information
      --clear         delete a trigger

      --burst_buffer  trigger event on burst buffer error
  -a, --primary_slurmctld_failure
                      trigger event on primary slurmctld failure
  -A, --primary_slurmctld_resumed_operation
                      trigger event on primary slurmctld resuming operation
  -b, --primary_slurmctld_resumed_control
                      trigger event on primary slurmctld resuming control
  -B, --backup_slurmctld_failure
                      trigger event on backup slurmctld failure
  -c, --backup_slurmctld_resumed_operation
                      trigger event on backup slurmctld resuming operation
  -C, --backup_slurmctld_assumed_control
                      trigger event on backup slurmctld assuming control
  -d, --down          trigger event when node goes DOWN
  -D, --drained       trigger event when node becomes DRAINED
  -F, --fail          trigger event when node is expected to FAIL
  -f, --fini          trigger event when job finishes
      --flags=flags   trigger flags (PERM: do not purge the trigger once it fires)
  -i, --id=#          a trigger's ID number
  -I, --idle          trigger event when node remains IDLE
  -j, --jobid=#       trigger related to specific jobid
  -M, --cluster=name  cluster to issue commands to
  -n, --node[=host]   trigger related to specific node, all nodes by default
  -N, --noheader      do not print the header line
  -o, --offset=#      trigger's offset time from event, negative to precede event
  -p, --program=path  pathname of the program to execute when the event occurs
  -Q, --quiet         do not report non-fatal errors
  -r, --reconfig      trigger event on configuration changes
  -t, --time          trigger event on job's time limit
  -u, --up            trigger event when node returned to service from DOWN state
      --user          a user name or ID to filter triggers by
  -v, --verbose       print detailed event logging
  -V, --version       print version information and exit

Help options:
  --help              show this help message
  --usage             display brief usage message
"""

USAGE = "Usage: strigger [--set | --get | --clear | --version] [-dDfiIjnNopstuv]\n"

# event options: key -> the event's name
EVENTS = {
    "down": "down",
    "drained": "drained",
    "fail": "fail",
    "fini": "fini",
    "idle": "idle",
    "reconfig": "reconfig",
    "time": "time",
    "up": "up",
}
# events of the controllers and the database: muster has none of them to watch
UNSUPPORTED = (
    "primary_slurmctld_failure",
    "primary_slurmctld_resumed_operation",
    "primary_slurmctld_resumed_control",
    "backup_slurmctld_failure",
    "backup_slurmctld_resumed_operation",
    "backup_slurmctld_assumed_control",
    "primary_slurmdbd_failure",
    "primary_slurmdbd_resumed_operation",
    "primary_database_failure",
    "primary_database_resumed_operation",
    "primary_slurmctld_acct_buffer_full",
    "burst_buffer",
    "draining",
    "resume",
)

OPTIONS = (
    Opt("set", None, NO_ARG),
    Opt("get", None, NO_ARG),
    Opt("clear", None, NO_ARG),
    Opt("down", "d", NO_ARG),
    Opt("drained", "D", NO_ARG),
    Opt("fail", "F", NO_ARG),
    Opt("fini", "f", NO_ARG),
    Opt("idle", "I", NO_ARG),
    Opt("reconfig", "r", NO_ARG),
    Opt("time", "t", NO_ARG),
    Opt("up", "u", NO_ARG),
    Opt("flags"),
    Opt("id", "i"),
    Opt("jobid", "j"),
    Opt(("node", "nodes"), "n", OPTIONAL, key="node"),
    Opt("noheader", "N", NO_ARG),
    Opt("offset", "o"),
    Opt("program", "p"),
    Opt("quiet", "Q", NO_ARG),
    Opt("user"),
    Opt(("cluster", "clusters"), "M", key="cluster"),
    Opt("verbose", "v", NO_ARG),
    Opt("version", "V", NO_ARG),
    Opt("help", None, NO_ARG),
    Opt("usage", None, NO_ARG),
    Opt("primary_slurmctld_failure", "a", NO_ARG),
    Opt("primary_slurmctld_resumed_operation", "A", NO_ARG),
    Opt("primary_slurmctld_resumed_control", "b", NO_ARG),
    Opt("backup_slurmctld_failure", "B", NO_ARG),
    Opt("backup_slurmctld_resumed_operation", "c", NO_ARG),
    Opt("backup_slurmctld_assumed_control", "C", NO_ARG),
    Opt("primary_slurmdbd_failure", "g", NO_ARG),
    Opt("primary_slurmdbd_resumed_operation", "G", NO_ARG),
    Opt("primary_database_failure", "h", NO_ARG),
    Opt("primary_database_resumed_operation", "H", NO_ARG),
    Opt("primary_slurmctld_acct_buffer_full", "e", NO_ARG),
    Opt("burst_buffer", None, NO_ARG),
    Opt("draining", None, NO_ARG),
    Opt("resume", "R", NO_ARG),
)


def _int(opts: dict[str, str | None], key: str, what: str) -> int | None:
    raw = opts.get(key)
    if raw is None:
        return None
    try:
        return int(str(raw).strip())
    except ValueError:
        raise CommandError(f"Invalid {what}: {raw}") from None


def _job_id(opts: dict[str, str | None]) -> int | None:
    raw = opts.get("jobid")
    if raw is None:
        return None
    text = str(raw).strip()
    if not text.isdigit():
        raise CommandError(f"Invalid job id: {raw}")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    args = argv_or_sys(argv)
    try:
        parsed, operands = getopt(args, OptionTable(OPTIONS))
    except OptionError as e:
        return usage_error(PROG, str(e))
    opts: dict[str, str | None] = {}
    for o, v in parsed:
        opts[o.key] = v
    if "help" in opts:
        sys.stdout.write(HELP)
        return 0
    if "usage" in opts:
        sys.stdout.write(USAGE)
        return 0
    if "version" in opts:
        sys.stdout.write(version_line() + "\n")
        return 0
    if operands:
        return usage_error(PROG, f"Unrecognized option: {operands[0]}")
    modes = [m for m in ("set", "get", "clear") if m in opts]
    if len(modes) != 1:
        return usage_error(PROG, "Must specify one of --set, --get, or --clear")
    quiet = "quiet" in opts
    try:
        job_id = _job_id(opts)
        if job_id is not None and "node" in opts:
            raise CommandError("--jobid and --node options are mutually exclusive")
        node = opts.get("node") or None
        if modes[0] == "set":
            return _set(opts, job_id, node)
        trig_id = _int(opts, "id", "trigger id")
        query = {"trig_id": trig_id, "job_id": job_id, "user": opts.get("user"), "node": node}
        if modes[0] == "get":
            answer = call(PROG, "POST", "/v1/triggers/get", query)
            from muster.core.triggers import table

            sys.stdout.write(table(answer.get("triggers") or [], header="noheader" not in opts))
            return 0
        if trig_id is None and job_id is None and opts.get("user") is None:
            raise CommandError("--id, --jobid, or --user must be specified")
        call(PROG, "POST", "/v1/triggers/clear", query)
        return 0
    except CommandError as e:
        if quiet and modes[0] == "clear":
            return 1
        return report(PROG, e)


def _set(opts: dict[str, str | None], job_id: int | None, node: str | None) -> int:
    events = [EVENTS[k] for k in EVENTS if k in opts]
    unsupported = [k for k in UNSUPPORTED if k in opts]
    if unsupported:
        raise CommandError(f"--{unsupported[0]} is not supported by muster (it has no such event)")
    if not events:
        raise CommandError("You must specify a trigger (--fini, --time, --down, --up, ...)")
    if not opts.get("program"):
        raise CommandError("You must specify a --program value")
    if "time" in events or "fini" in events:
        if job_id is None:
            raise CommandError("--time and --fini require --jobid")
    offset = _int(opts, "offset", "offset") or 0
    flags = [f.strip() for f in str(opts.get("flags") or "").split(",") if f.strip()]
    for event in events:
        body = {
            "event": event,
            "job_id": job_id,
            "node": node if "node" in opts else None,
            "offset": offset,
            "program": opts["program"],
            "flags": flags,
        }
        call(PROG, "POST", "/v1/triggers", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
