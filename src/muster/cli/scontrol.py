"""scontrol: look at and change jobs, nodes, partitions and the configuration.

Supported: ``show job|node|partition|config|topology|hostnames|hostlist|hostlistsorted``, ``hold``, ``uhold``,
``release``, ``update job``, ``ping``, ``takeover`` and ``version``, with ``-o`` (one line per record), ``-d``
(details) and ``-Q``. The record layouts are Slurm 22.05's, field for field where muster knows the value; fields
muster does not track show Slurm's own "unknown" spellings (``N/A``, ``(null)``), never made-up numbers. The layout
functions take wire dicts (docs/api.md) and return text, so they are tested without a controller.
"""

import sys

from muster.cli.common import (
    CommandError,
    argv_or_sys,
    long_running,
    print_lines,
    report,
    split_ids,
    version_line,
    write_out,
)
from muster.cli.scontrol_records import (
    _ts,
    config_text,
    format_node,
    format_record,
    job_record,
    node_record,
    partition_record,
)
from muster.client.controller import connect, connect_message
from muster.client.settings import load_settings
from muster.client.sysenv import getenv
from muster.slurm.argscan import NO_ARG, Opt, OptionError, OptionTable, getopt

PROG = "scontrol"

OPTIONS: tuple[Opt, ...] = (
    Opt("all", "a", NO_ARG),
    Opt("details", "d", NO_ARG),
    Opt("oneliner", "o", NO_ARG),
    Opt("quiet", "Q", NO_ARG),
    Opt("verbose", "v", NO_ARG),
    Opt("version", "V", NO_ARG),
    Opt("help", "h", NO_ARG),
    Opt("usage", None, NO_ARG),
    Opt("json", None, NO_ARG),
    Opt("yaml", None, NO_ARG),
    Opt("hide", None, NO_ARG),
    Opt("local", None, NO_ARG),
    Opt("sibling", None, NO_ARG),
    Opt("clusters", "M"),
    Opt("future", "F", NO_ARG),
)


class Flags:
    __slots__ = ("details", "oneliner", "quiet", "json")

    def __init__(self) -> None:
        self.details = False
        self.oneliner = False
        self.quiet = False
        self.json = False  # --json: show job/node/partition in data_parser v0.0.40's layout


# --- commands --------------------------------------------------------------------------------


def _matches(word: str, full: str, minimum: int) -> bool:
    """Slurm's abbreviations: ``word`` is a prefix of ``full`` at least ``minimum`` long."""
    w = word.lower()
    return len(w) >= minimum and full.startswith(w)


def _load_error(what: str, err: Exception) -> CommandError:
    from muster.protocol.client import ConnectError

    text = connect_message(err) if isinstance(err, ConnectError) else getattr(err, "message", str(err))
    return CommandError(f"slurm_load_{what} error: {text}", 1, raw=True)


def show(words: list[str], flags: Flags) -> int:
    if not words:
        raise CommandError("too few arguments for keyword:show", 1, raw=True)
    entity, eq, inline = words[0].partition("=")
    args = ([inline] if eq and inline else []) + words[1:]
    target = args[0] if args else None
    e = entity.lower()
    if _matches(e, "hostnames", 5):
        return show_hostnames(target)
    if _matches(e, "hostlistsorted", 9) or _matches(e, "hostlist", 5):
        return show_hostlist(target)
    if _matches(e, "jobs", 1) or e == "jobid":
        return show_jobs(target, flags)
    if _matches(e, "nodes", 1) or e == "nodename":
        return show_nodes(target, flags)
    if _matches(e, "partitions", 2) or e == "partitionname":
        return show_partitions(target, flags)
    if _matches(e, "config", 2):
        return show_config()
    if _matches(e, "topology", 1):
        from muster.cli.scontrol_topology import show_topology

        return show_topology(target)
    if _matches(e, "steps", 2):
        from muster.cli.scontrol_steps import show_steps

        return show_steps(target, flags.oneliner)
    if _matches(e, "reservations", 3) or e == "reservationname":
        from muster.cli import reservation

        return reservation.show(target, flags.oneliner)
    raise CommandError(f"invalid entity:{entity} for keyword:show ", 1, raw=True)


def show_hostnames(expr: str | None) -> int:
    from muster.core.hostlist import HostlistError, expand

    if expr is not None and not expr.strip():
        return 0  # an empty list given (``show hostnames ''``): no names, as Slurm prints
    text = expr or getenv("SLURM_JOB_NODELIST") or getenv("SLURM_NODELIST")
    if not text:
        raise CommandError("host list is empty (give one, or run inside a job)")
    try:
        print_lines(expand(text))
    except HostlistError as e:
        raise CommandError(str(e)) from None
    return 0


def show_hostlist(expr: str | None) -> int:
    from muster.core.hostlist import HostlistError, compress, expand

    if not expr:
        raise CommandError("host list is empty")
    try:
        names = expand(expr)
    except HostlistError as e:
        raise CommandError(str(e)) from None
    print_lines([compress(names)])
    return 0


def _job_id(text: str) -> str:
    """A job id as the user wrote it (``123``, ``123_4``, ``123_[1-3]``), checked; array
    task ranges come back one id per task for the query string."""
    item = text.strip()
    if item.lower().startswith(("jobid=", "job=")):
        item = item.split("=", 1)[1]
    if item.isascii() and item.isdigit() and item[0] != "0" and len(item) < 10:
        return item  # a plain id, well inside 32 bits: the common case needs no parser
    from muster.core.arrays import parse_job_ref

    try:
        ref = parse_job_ref(item)
    except ValueError:
        raise CommandError("slurm_load_jobs error: Invalid job id specified", 1, raw=True) from None
    if ref.tasks is None:
        return str(ref)  # ``123`` or a het job's component ``123+1``
    return ",".join(f"{ref.job_id}_{t}" for t in ref.tasks)


def show_jobs(target: str | None, flags: Flags) -> int:
    from muster.protocol.client import ApiError, ConnectError

    try:
        ctl = connect(PROG)
        if target is None:
            jobs = ctl.get("/v1/jobs").get("jobs") or []
        else:
            # an array's id names all its tasks, as in Slurm
            jobs = []
            for item in (i.strip() for i in split_ids(target)):
                query = _job_id(item).replace("+", "%2B")  # a het component: 123+1
                jobs.extend(ctl.get(f"/v1/jobs?job_id={query}").get("jobs") or [])
    except (ApiError, ConnectError) as e:
        raise _load_error("jobs", e) from None
    if not jobs:
        sys.stdout.write("No jobs in the system\n")
        return 0
    jobs = sorted(jobs, key=lambda j: int(j.get("job_id") or 0))
    if flags.json:
        from muster.slurm.slurmjson import document, squeue_job
        from muster.slurm.squeue_fields import long_state

        print_lines([document(["scontrol", "show", "job", "--json"], [squeue_job(j, long_state(j)) for j in jobs])])
        return 0
    if any(j.get("array_job_id") is not None for j in jobs):
        from muster.slurm.jobarrays import merge_array_rows

        jobs = merge_array_rows(jobs)
    write_out("".join(format_record(job_record(j, flags.details), flags.oneliner) for j in jobs))
    return 0


def show_nodes(target: str | None, flags: Flags) -> int:
    from muster.protocol.client import ApiError, ConnectError

    names: list[str] = []
    if target:
        from muster.core.hostlist import HostlistError, expand

        try:
            names = expand(target)
        except HostlistError:
            names = [target]
    try:
        path = "/v1/nodes" + ("?name=" + ",".join(names) if names else "")
        nodes = connect(PROG).get(path).get("nodes") or []
    except (ApiError, ConnectError) as e:
        raise _load_error("node", e) from None
    if names:
        by_name = {n.get("name"): n for n in nodes}
        missing = [n for n in names if n not in by_name]
        if missing and not by_name:
            sys.stdout.write(f"Node {target} not found\n")
            return 1
        nodes = [by_name[n] for n in names if n in by_name]
    if flags.json:
        from muster.slurm.slurmjson import document, node

        cluster = _cluster_name()
        print_lines([document(["scontrol", "show", "node", "--json"], [node(n, cluster) for n in nodes], "nodes")])
        return 0
    if not nodes:
        sys.stdout.write("No nodes in the system\n")
        return 0
    write_out("".join(format_node(node_record(n), flags.oneliner) for n in nodes))
    return 0


def show_partitions(target: str | None, flags: Flags) -> int:
    from muster.protocol.client import ApiError, ConnectError

    try:
        parts = connect(PROG).get("/v1/partitions").get("partitions") or []
    except (ApiError, ConnectError) as e:
        raise _load_error("partitions", e) from None
    if target:
        parts = [p for p in parts if p.get("name") == target]
        if not parts:
            sys.stdout.write(f"Partition {target} not found\n")
            return 1
    if flags.json:
        from muster.slurm.slurmjson import document, partition

        cluster = _cluster_name()
        doc = document(
            ["scontrol", "show", "partition", "--json"], [partition(p, cluster) for p in parts], "partitions"
        )
        print_lines([doc])
        return 0
    if not parts:
        sys.stdout.write("No partitions in the system\n")
        return 0
    write_out("".join(format_node(partition_record(p), flags.oneliner) for p in parts))
    return 0


def _cluster_name() -> str:
    """ClusterName from the local config (as Slurm's commands read slurm.conf); empty when
    it cannot be read."""
    from muster.client.settings import load_settings

    try:
        return load_settings(PROG).cluster_name
    except CommandError:
        return ""


def show_config() -> int:
    from muster.protocol.client import ApiError, ConnectError

    settings = load_settings(PROG)
    try:
        answer = connect(PROG, settings).get("/v1/config")
    except (ApiError, ConnectError) as e:
        raise _load_error("ctl_conf", e) from None
    conf = answer.get("settings") or {}
    computed = {"MaxNodeCount": str(answer.get("node_count", "")), "NEXT_JOB_ID": str(answer.get("next_job_id", ""))}
    if answer.get("boot_time"):
        computed["BOOT_TIME"] = _ts(float(answer["boot_time"]))
    host = next((v for k, v in conf.items() if k.lower() == "slurmctldhost"), None)
    computed["SlurmctldHost[0]"] = str(host or settings.ctld_host)
    pings = None
    if len(settings.ctld_hosts) > 1:
        from muster.cli.scontrol_ha import ping_lines

        pings = ping_lines(settings)[0]
    write_out(config_text(conf, float(answer.get("now") or 0), settings.ctld_host, settings.path, computed, pings))
    return 0


def _id_list(words: list[str]) -> list[str]:
    out: list[str] = []
    for word in words:
        item = word
        for prefix in ("jobid=", "job="):
            if item.lower().startswith(prefix):
                item = item[len(prefix) :]
        out.extend(i.strip() for i in split_ids(item))
    return out


def _path_id(item: str) -> str:
    """A job id for a URL path (``123_[1-3]`` percent-encoded)."""
    return item.replace("%", "%25").replace("[", "%5B").replace("]", "%5D").replace(",", "%2C")


def _valid_id(item: str) -> bool:
    """``123``, or array tasks ``123_4`` / ``123_[1-3]`` (the controller resolves them)."""
    from muster.core.arrays import parse_job_ref

    try:
        parse_job_ref(item)
    except ValueError:
        return False
    return True


def hold_release(op: str, words: list[str], flags: Flags) -> int:
    """``hold``, ``uhold``/``holdu``, ``release``, ``requeue``, ``requeuehold``, ``suspend``
    and ``resume`` (operators only: ``ctld.suspend``); errors read ``<reason> for job <id>``."""
    from muster.protocol.client import ApiError, ConnectError

    ids = _id_list(words)
    if not ids:
        raise CommandError(f"too few arguments for keyword:{op}", 1, raw=True)
    rc = 0
    ctl = None
    for item in ids:
        if not _valid_id(item):
            if not flags.quiet:
                sys.stderr.write(f"Invalid job id specified for job {item}\n")
            rc = 1
            continue
        try:
            if ctl is None:
                ctl = connect(PROG)
            if op in ("release", "suspend", "resume"):
                ctl.post(f"/v1/jobs/{_path_id(item)}/{op}")
            elif op in ("requeue", "requeuehold"):
                ctl.post(f"/v1/jobs/{_path_id(item)}/requeue", {"hold": op == "requeuehold"})
            else:
                ctl.post(f"/v1/jobs/{_path_id(item)}/hold", {"admin": op == "hold"})
        except ConnectError as e:
            raise CommandError(f"slurm_update error: {connect_message(e)}", 1, raw=True) from None
        except ApiError as e:
            if not flags.quiet:
                sys.stderr.write(f"{e.message} for job {item}\n")
            rc = 1
    return rc


def update(words: list[str], flags: Flags) -> int:
    from muster.protocol.client import ApiError, ConnectError

    if not words:
        raise CommandError("too few arguments for keyword:update", 1, raw=True)
    first = words[0].split("=", 1)[0].lower()
    if first in ("reservationname", "reservation"):
        from muster.cli import reservation

        return reservation.update(words)
    if first in ("partitionname", "partition", "stepid"):
        raise CommandError(f"updating {first} records is not supported by muster yet")
    from muster.cli import scontrol_update  # only here: start-up time

    if first in ("nodename", "node"):
        return scontrol_update.update_nodes(words)

    ids, body = scontrol_update.parse_update(words)
    rc = 0
    ctl = connect(PROG)
    for item in ids:
        if not _valid_id(item):
            sys.stderr.write(f"Invalid job id specified for job {item}\n")
            rc = 1
            continue
        try:
            ctl.post(f"/v1/jobs/{_path_id(item)}/update", body)
        except ConnectError as e:
            raise CommandError(f"slurm_update error: {connect_message(e)}", 1, raw=True) from None
        except ApiError as e:
            if not flags.quiet:
                sys.stderr.write(f"{e.message} for job {item}\n")
            rc = 1
    return rc


def reconfigure(flags: Flags) -> int:
    """``scontrol reconfigure``: the controller re-reads its file and applies it live, whole
    or not at all (``ctld.reconfig``). Like Slurm, nothing is printed when it is applied;
    a refused file prints the reason and exits 1, the running configuration unchanged.
    The controller logs each changed key."""
    from muster.protocol.client import ApiError, ConnectError

    try:
        connect(PROG).post("/v1/reconfigure", {})
    except ConnectError as e:
        raise CommandError(f"slurm_reconfigure error: {connect_message(e)}", 1, raw=True) from None
    except ApiError as e:
        raise CommandError(f"slurm_reconfigure error: {e.message}", 1, raw=True) from None
    return 0


def run(words: list[str], flags: Flags) -> int:
    """One scontrol command line (after the options)."""
    if not words:
        return 0
    cmd = words[0].lower()
    rest = words[1:]
    if _matches(cmd, "show", 3) or _matches(cmd, "list", 3):
        return show(rest, flags)
    if cmd in ("hold", "uhold", "holdu", "release", "requeue", "requeuehold", "suspend", "resume"):
        return hold_release("uhold" if cmd == "holdu" else cmd, rest, flags)
    if _matches(cmd, "update", 1):
        return update(rest, flags)
    if _matches(cmd, "ping", 2):
        from muster.cli.scontrol_ha import ping

        return ping()
    if cmd == "takeover":
        from muster.cli.scontrol_ha import takeover

        return takeover(rest)
    if _matches(cmd, "version", 4):
        sys.stdout.write(version_line() + "\n")
        return 0
    if cmd in ("help", "-h"):
        sys.stdout.write(HELP)
        return 0
    if _matches(cmd, "reconfigure", 3):
        return reconfigure(flags)
    if cmd == "token":
        from muster.cli.scontrol_token import token

        return token(rest)
    if cmd in ("create", "delete"):
        from muster.cli import scontrol_partition

        if not rest:
            raise CommandError(f"too few arguments for {cmd} keyword", 1, raw=True)
        if scontrol_partition.is_partition_word(rest[0]):
            return scontrol_partition.create(rest) if cmd == "create" else scontrol_partition.delete(rest)
    if cmd in ("create", "delete") and rest and rest[0].lower().startswith("res"):
        from muster.cli import reservation

        return reservation.create(rest) if cmd == "create" else reservation.delete(rest[1:] or rest[:1])
    if cmd == "listpids":
        from muster.cli.scontrol_listpids import listpids

        return listpids(rest)
    if cmd in (
        "shutdown",
        "create",
        "delete",
        "reboot",
        "notify",
        "top",
        "wait_job",
    ):
        raise CommandError(f"scontrol {cmd} is not supported by muster yet")
    raise CommandError(f"invalid keyword: {words[0]}", 1, raw=True)


def interactive(flags: Flags) -> int:
    """No command given: read commands from stdin, one per line, as Slurm's prompt does."""
    import shlex

    long_running()
    rc = 0
    tty = sys.stdin.isatty()
    while True:
        if tty:
            sys.stdout.write("scontrol: ")
            sys.stdout.flush()
        line = sys.stdin.readline()
        if not line:
            return rc
        try:
            words = shlex.split(line)
        except ValueError as e:
            rc = report(PROG, CommandError(str(e)))
            continue
        if words and words[0].lower() in ("quit", "exit"):
            return rc
        try:
            rc = run(words, flags)
        except CommandError as e:
            rc = report(PROG, e)


def main(argv: list[str] | None = None) -> int:
    args = argv_or_sys(argv)
    try:
        parsed, words = getopt(args, OptionTable(OPTIONS))
    except OptionError as e:
        sys.stderr.write(f'{PROG}: {e}\nTry "{PROG} --help" for more information\n')
        return 1
    flags = Flags()
    for opt, _ in parsed:
        if opt.key == "help":
            sys.stdout.write(HELP)
            return 0
        if opt.key == "usage":
            sys.stdout.write(HELP)
            return 0
        if opt.key == "version":
            sys.stdout.write(version_line() + "\n")
            return 0
        if opt.key == "details":
            flags.details = True
        elif opt.key == "oneliner":
            flags.oneliner = True
        elif opt.key == "quiet":
            flags.quiet = True
        elif opt.key == "json":
            flags.json = True
        elif opt.key == "yaml":
            return report(PROG, CommandError("--yaml is not supported by muster; use --json"))
    try:
        if not words:
            return interactive(flags)
        return run(words, flags)
    except CommandError as e:
        return report(PROG, e)


HELP = """\
scontrol [<OPTION>] [<COMMAND>]
    Valid <OPTION> values are:
     -a or --all: equivalent to "all" command
     -d or --details: equivalent to "details" command
     -h or --help: equivalent to "help" command
     -o or --oneliner: equivalent to "oneliner" command
     -Q or --quiet: equivalent to "quiet" command
     -V or --version: equivalent to "version" command

  <keyword> may be omitted from the execute line and scontrol will execute
  in interactive mode. It will process commands as entered until explicitly
  terminated.

    Valid <COMMAND> values are:
     hold <job_list>          place a job on hold (an administrator's hold
                              when run by an administrator)
     uhold <job_list>         place a job on user hold
     release <job_list>       release a held job
     listpids [<job_id>[.<step_id>]] [<NodeName>]
                              list the processes of jobs' steps on this node
     ping                     print status of slurmctld daemons
     reconfigure              have the controller re-read and apply the configuration
                              file, whole or not at all (a refusal says why)
     requeue <job_list>       requeue a batch job
     requeuehold <job_list>   requeue a batch job and hold it
     resume <job_list>        resume a suspended job (operators only)
     suspend <job_list>       suspend a running job: its processes frozen, its
                              time not counted (operators only)
     create reservation <SPEC>  create a reservation
     delete reservation=<name>  delete a reservation
     show <ENTITY> [<ID>]     display state of identified entity, default
                              is all records
     takeover [<INDEX>]       ask SlurmctldHost[INDEX] (default 1, the first
                              backup; 0 fails back to the primary) to take over
     token [lifespan=<seconds>] [username=<user>]
                              get a JSON Web Token (SLURM_JWT=...) for the
                              REST API; only administrators name another user
     update job=<id> <SPEC>   update a job: TimeLimit, Priority, Nice,
                              JobName, Partition, Comment, StartTime,
                              NumNodes
     version                  display tool version number
     quit                     terminate this command

    Valid <ENTITY> values are:
     config, hostlist, hostlistsorted, hostnames, job, node, partition

  All commands and options are case-insensitive, although node names and
  partition names tests are case-sensitive (node names "LX" and "lx" are
  distinct).
"""


if __name__ == "__main__":
    sys.exit(main())
