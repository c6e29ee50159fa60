"""sbcast: copy a file to every node of a job's allocation, as Slurm's sbcast does.

``sbcast [-Cfjpstv] SOURCE DEST`` runs in a job (``SLURM_JOB_ID``) or names one (``-j``). The
file travels as a job step of that job (``srun --overlap``, one task per node, the file on
every task's stdin), so it needs no other door into the nodes than the ones srun already has
and runs as the job's user. Each node writes it to a temporary name beside DEST and renames
it into place, so that a reader never sees half a file. DEST not absolute is taken from the
directory sbcast runs in, as sbcast(1) says when BcastParameters names no destination.

* ``-C[lib]``/``--compress``: the bytes travel compressed (gzip; ``lz4``, Slurm's default
  library, is accepted and means the same here; ``none`` turns it off); each node inflates them.
* ``-f``: replace an existing DEST (without it, an existing DEST is an error on that node).
* ``-p``: keep the source's modification and access times (its mode is always kept).
* ``-w``: only these nodes of the job. ``-s``, ``-t``, ``-F`` are accepted (the step's stream
  has its own sizes and limits).

A node that cannot write DEST is named in an error line; sbcast then exits non-zero.
"""

from __future__ import annotations

import os
import sys

from muster.cli.common import CommandError, argv_or_sys, info_text, report, usage_error
from muster.client.controller import connect
from muster.slurm.options import NO_ARG, OPTIONAL, Opt, OptionError, OptionTable, getopt

PROG = "sbcast"

OPTIONS: tuple[Opt, ...] = (
    Opt("compress", "C", OPTIONAL, env=("SBCAST_COMPRESS",)),
    Opt("force", "f", NO_ARG, env=("SBCAST_FORCE",)),
    Opt("jobid", "j"),
    Opt("nodelist", "w"),
    Opt("no-allocation", "Z", NO_ARG),
    Opt("preserve", "p", NO_ARG, env=("SBCAST_PRESERVE",)),
    Opt("size", "s", env=("SBCAST_SIZE",)),
    Opt("timeout", "t", env=("SBCAST_TIMEOUT",)),
    Opt(("treewidth", "fanout"), "F", env=("SBCAST_FANOUT",)),
    Opt("exclude", None, env=("SBCAST_EXCLUDE",)),
    Opt("send-libs", None, OPTIONAL, env=("SBCAST_SEND_LIBS",)),
    Opt("verbose", "v", NO_ARG),
    Opt("help", "h", NO_ARG),
    Opt("usage", None, NO_ARG),
    Opt("version", "V", NO_ARG),
)

# Each node's side, run by /bin/sh as the job's user: $1 DEST, $2 mode (octal), $3 force,
# $4 "atime mtime" or "", $5 compressed. Errors name the node (SLURMD_NODENAME).
RECEIVE = r"""
dest=$1 mode=$2 force=$3 times=$4 packed=$5
where=${SLURMD_NODENAME:-$(hostname)}
if [ -e "$dest" ] && [ "$force" != 1 ]; then
  cat >/dev/null; echo "sbcast: error: $where: $dest: File exists" >&2; exit 17
fi
tmp="$dest.sbcast.$$"
if [ "$packed" = 1 ]; then gzip -dc >"$tmp"; else cat >"$tmp"; fi || {
  rc=$?; rm -f "$tmp"; echo "sbcast: error: $where: cannot write $dest" >&2; exit $rc; }
chmod "$mode" "$tmp" || exit 1
if [ -n "$times" ]; then touch -m -d "@${times#* }" "$tmp" && touch -a -d "@${times% *}" "$tmp" || exit 1; fi
mv -f "$tmp" "$dest" || { rm -f "$tmp"; echo "sbcast: error: $where: cannot rename into $dest" >&2; exit 1; }
"""


class Request:
    __slots__ = ("source", "dest", "job_id", "nodes", "compress", "force", "preserve", "verbose")

    def __init__(self) -> None:
        self.source = self.dest = ""
        self.job_id: int | None = None
        self.nodes: str | None = None
        self.compress = False
        self.force = self.preserve = False
        self.verbose = 0


def parse_args(argv: list[str], environ: dict[str, str], cwd: str) -> Request | str:
    table = OptionTable(OPTIONS)
    parsed, operands = getopt(argv, table)
    keys = {opt.key for opt, _ in parsed}
    text = info_text(keys, HELP, USAGE)
    if text is not None:
        return text
    from muster.slurm.options import env_options

    req = Request()
    for opt, value in [*env_options(table, environ), *parsed]:
        key = opt.key
        if key == "compress":
            lib = (value or "lz4").lower()
            if lib not in ("lz4", "zlib", "gzip", "none"):
                raise CommandError(f"Invalid compression library: {value}")
            req.compress = lib != "none"
        elif key == "force":
            req.force = value is None or value.lower() not in ("0", "no", "false")
        elif key == "preserve":
            req.preserve = True
        elif key == "jobid":
            job = (value or "").split(".")[0].split("+")[0]
            if not job.isdigit():
                raise CommandError(f"Invalid job id: {value}")
            req.job_id = int(job)
        elif key == "nodelist":
            req.nodes = value or None
        elif key == "no-allocation":
            raise CommandError("--no-allocation is not supported by muster (copy into a job's allocation)")
        elif key == "verbose":
            req.verbose += 1
        elif key in ("size", "timeout", "treewidth"):
            if not (value or "").rstrip("kKmM").isdigit() and value != "off":
                raise CommandError(f"Invalid --{key} value: {value}")
    if len(operands) != 2:
        raise CommandError("Need two file names, have " + str(len(operands)) + " names")
    req.source = operands[0]
    req.dest = operands[1] if os.path.isabs(operands[1]) else os.path.join(cwd, operands[1])
    if req.job_id is None:
        job = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID") or ""
        if not job.isdigit():
            raise CommandError(
                "Need a job id to run this command.  Run from within a Slurm job or use the --jobid option."
            )
        req.job_id = int(job)
    return req


def step_argv(srun: str, req: Request, nodes: list[str], mode: int, times: str) -> list[str]:
    """The srun command line that writes the file on ``nodes`` (one task each)."""
    n = str(len(nodes))
    return [
        srun, f"--jobid={req.job_id}", "--overlap", "-N", n, "-n", n, "--ntasks-per-node=1",
        "-w", ",".join(nodes), "--input=all", "-Q", "--job-name=sbcast",
        "/bin/sh", "-c", RECEIVE, "sbcast", req.dest, f"{mode:o}", "1" if req.force else "0", times,
        "1" if req.compress else "0",
    ]  # fmt: skip


def run(req: Request, environ: dict[str, str]) -> int:
    import subprocess

    from muster.core.hostlist import expand

    try:
        info = os.stat(req.source)
        with open(req.source, "rb") as f:
            data = f.read()
    except OSError as e:
        raise CommandError(f"Can't open `{req.source}`: {e.strerror}") from None
    from muster.protocol.client import ApiError

    try:
        job = connect(PROG).call("GET", f"/v1/jobs/{req.job_id}")["job"]
    except ApiError as e:
        raise CommandError(e.message) from None
    if job.get("state") != "RUNNING":
        raise CommandError(f"Job {req.job_id} is not running")
    nodes = [a["node"] for a in job.get("alloc") or []]
    if req.nodes is not None:
        wanted = expand(req.nodes)
        outside = [n for n in wanted if n not in nodes]
        if outside:
            raise CommandError(f"Node {outside[0]} is not part of job {req.job_id}")
        nodes = [n for n in nodes if n in wanted]
    if req.compress:
        import gzip

        data = gzip.compress(data, compresslevel=1)
    times = f"{int(info.st_atime)} {int(info.st_mtime)}" if req.preserve else ""
    here = os.path.join(os.path.dirname(os.path.abspath(sys.argv[0] or "srun")), "srun")
    srun = here if os.path.exists(here) else "srun"
    argv = step_argv(srun, req, nodes, info.st_mode & 0o7777, times)
    if req.verbose:
        sys.stderr.write(f"{PROG}: {req.source} -> {req.dest} on {','.join(nodes)} ({len(data)} bytes sent)\n")
    env = {k: v for k, v in environ.items() if not k.startswith(("SLURM_STEP", "SLURM_NTASKS", "SLURM_NPROCS"))}
    done = subprocess.run(argv, input=data, env=env, check=False)
    return 0 if done.returncode == 0 else 1


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            cwd = os.getcwd()
        except OSError as e:
            raise CommandError(f"getcwd failed: {e.strerror}") from None
        req = parse_args(argv_or_sys(argv), dict(os.environ), cwd)
        if isinstance(req, str):
            sys.stdout.write(req)
            return 0
        return run(req, dict(os.environ))
    except OptionError as e:
        return usage_error(PROG, str(e))
    except CommandError as e:
        return report(PROG, e)
    except KeyboardInterrupt:
        return 1


USAGE = """\
Usage: sbcast [-CfFjpstvV] SOURCE DEST
"""

HELP = """\
Usage: sbcast [OPTIONS] SOURCE DEST
  -C, --compress[=lib]  compress the file being transmitted
  -f, --force           replace destination file as required
  -F, --fanout=num      specify message fanout
  -j, --jobid=#[.#]     specify job ID and optional step ID
  -p, --preserve        preserve modes and times of source file
  -s, --size=num        block size in bytes (rounded off)
  -t, --timeout=secs    specify message timeout (seconds)
  -v, --verbose         provide detailed event logging
  -V, --version         print version information and exit
  -w, --nodelist=nodes  the nodes of the job to send the file to

Help options:
  --help                show this help message
  --usage               display brief usage message
"""


if __name__ == "__main__":
    sys.exit(main())
