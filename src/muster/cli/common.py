"""What every command shares: the version line, error output and exit statuses, argv, the
output helpers; reading the configuration and reaching the controller are
``muster.client``'s, the Slurm formats and option tables ``muster.slurm``'s.

Start-up time matters here more than anywhere (a command is typed hundreds of times a day
and scripts call them in loops), so this module imports only ``sys``, the built-in
``posix``, ``core.errors`` (``CommandError``, the commands' one error, which ``client`` and
``slurm`` raise too) and ``client.sysenv`` (the little of ``os`` a command needs, without
``os``) at load time.
"""

# No ``from __future__ import annotations`` here: sbatch's modules leave it out, which spares
# a plain submission the ``__future__`` module; names known only to type checkers are quoted.

import posix
import sys

from muster.client.sysenv import getenv
from muster.core.errors import CommandError as CommandError  # the commands import it from here

SLURM_VERSION = "22.05.8"


def version_line() -> str:
    """What ``--version`` prints, the same for every command.

    Tools that wrap Slurm read the version from ``slurm X.Y.Z``; we keep that shape,
    name the Slurm release whose behaviour we follow, and say honestly what runs.
    """
    from muster import __version__

    return f"slurm {SLURM_VERSION} (muster {__version__})"


def die(prog: str, msg: str, rc: int = 1) -> int:
    """Print ``<prog>: error: <msg>`` on stderr and return ``rc`` (for ``return die(...)``)."""
    sys.stderr.write(f"{prog}: error: {msg}\n")
    return rc


def report(prog: str, err: CommandError) -> int:
    if err.raw:
        sys.stderr.write(err.message + "\n")
    else:
        sys.stderr.write(f"{prog}: error: {err.message}\n")
    return err.rc


def usage_error(prog: str, message: str, rc: int = 1) -> int:
    """getopt's complaint plus Slurm's hint, as every Slurm command prints them."""
    sys.stderr.write(f'{prog}: {message}\nTry "{prog} --help" for more information\n')
    return rc


def no_operands(prog: str, operands: list[str]) -> None:
    """Refuse operands for a command that takes none, as Slurm's query commands do."""
    if operands:
        from muster.slurm.argscan import option_error

        raise option_error(prog, f"unrecognized argument '{operands[0]}'")


def info_text(keys: tuple[str, ...] | set[str], help_text: str, usage_text: str) -> str | None:
    """The text --help, --usage or --version asks for (in that precedence) when one is in
    ``keys``; None when none is."""
    if "help" in keys:
        return help_text
    if "usage" in keys:
        return usage_text
    if "version" in keys:
        return version_line() + "\n"
    return None


def parse_iterate(value: str | None) -> float:
    """An --iterate period: a positive number of seconds."""
    try:
        period = float(value or "")
    except ValueError:
        period = 0.0
    if not 0 < period <= 2**31 - 1:  # also refuses inf and nan, which sleep() cannot take
        raise CommandError(f"Invalid --iterate value: {value}")
    return period


def exit_error_code(default: int = 1) -> int:
    """``SLURM_EXIT_ERROR`` overrides the status a command uses for a Slurm error."""
    raw = getenv("SLURM_EXIT_ERROR")
    if raw is not None:
        try:
            return int(raw)
        except ValueError:
            pass
    return default


def argv_or_sys(argv: list[str] | None) -> list[str]:
    return sys.argv[1:] if argv is None else list(argv)


def leave(status: object) -> None:
    """``sys.exit(status)`` for a launcher, without the interpreter's finalization (tearing
    down every module costs ~1.2 ms, a sixth of a command's start) when nothing needs it:
    the output is flushed here, and a registered ``atexit`` function, a running thread or a
    status that is not a number takes the ordinary way out."""
    if status is not None and not isinstance(status, int):
        sys.exit(status)  # type: ignore[arg-type]  # SystemExit takes any object (printed)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        sys.exit(status)  # the interpreter reports it as it always did
    atexit = sys.modules.get("atexit")  # a function is registered through it: never imported, none
    threading = sys.modules.get("threading")
    if (atexit is not None and atexit._ncallbacks()) or (threading is not None and threading.active_count() > 1):
        sys.exit(status)
    posix._exit((status or 0) & 0xFF)


def long_running() -> None:
    """Collect cyclic garbage again: a command's launcher turns the collector off for a run
    that asks, prints and leaves (``cli.launchers``), and a command that instead repeats
    (``-i``), waits (``sbatch --wait``) or reads commands calls this first."""
    import gc

    gc.enable()


# --- output helpers ---------------------------------------------------------------------------


def split_ids(text: str) -> list[str]:
    """Split job ids on commas and blanks outside brackets: ``1,2_[3,5]`` -> ``1``,
    ``2_[3,5]`` (blank items dropped, the others as written)."""
    items: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        if ch in ", \t" and depth == 0:
            items.append("".join(current))
            current = []
            continue
        depth += ch == "["
        depth -= ch == "]"
        current.append(ch)
    items.append("".join(current))
    return [i for i in items if i.strip()]


def current_user() -> str:
    import pwd

    try:
        return pwd.getpwuid(posix.getuid()).pw_name
    except KeyError:
        return str(posix.getuid())


def print_lines(lines: list[str]) -> None:
    """Write many lines at once (one write beats thousands of prints)."""
    if lines:
        write_out("\n".join(lines) + "\n")


def write_out(text: str) -> None:
    """Write to stdout; a reader that went away (``squeue | head``) is not an error."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # Point stdout at /dev/null so the interpreter's final flush stays quiet too.
        import os

        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
