"""Launchers for the Slurm commands that start at the interpreter's floor (``make install``).

pip's console scripts run with site processing: ``site`` reads every ``.pth`` file of the
environment (an editable install adds its source directory that way), imports ``sitecustomize``
and the like, and costs several milliseconds at every start of a command that otherwise
answers in a few more. The commands need none of it: they import only the standard library
and muster itself (a test parses their imports). So ``python -m muster.cli.launchers BIN``
replaces the console scripts of the commands in ``BIN`` with launchers that start the
interpreter with ``-S`` (no ``site``) and ``-P`` (no script directory in ``sys.path``), and
name the one directory ``muster`` is imported from, computed here at install time::

    #!/path/to/venv/bin/python -SP
    import sys
    sys.path.append('/path/to/checkout/src')
    from muster.cli.squeue import main
    from muster.cli.common import leave
    leave(main())

The commands but srun and salloc run without the cyclic garbage collector (``LONG_RUNNING``):
they ask, print and leave, and collecting the thousands of objects a long listing decodes
cost squeue ~1 ms of 14 with 1,000 jobs. Their paths that repeat or wait (``squeue -i``,
``sinfo -i``, ``sbatch --wait``, scontrol's prompt) turn it on first (``common.long_running``).

``leave`` skips the interpreter's finalization when nothing needs it: ~1.2 ms of every run
(srun's, with its sockets and stream buffers, 2-3 ms). The commands write their files through
raw descriptors or ``with`` blocks, and ``leave`` takes the ordinary way out when an ``atexit``
function is registered or a thread still runs.

``PYTHONPATH`` is still honoured, before that entry, as with pip's scripts. Where muster
cannot be imported that way (a zip, an import hook), every script is left as pip wrote it.
Only the Slurm commands get launchers: the daemons and ``muster`` itself import third-party
packages that ``site`` finds.
"""

from __future__ import annotations

import os
import subprocess
import sys

# The commands that import only the standard library and muster (tests/unit/cli checks it).
COMMANDS = (
    "sacct",
    "sacctmgr",
    "salloc",
    "sbatch",
    "scancel",
    "scontrol",
    "sdiag",
    "sinfo",
    "sprio",
    "sreport",
    "srun",
    "sshare",
    "squeue",
)
# The commands that run long (a job's tasks, an allocation's shell) keep the garbage collector
# (module docstring).
LONG_RUNNING = ("salloc", "srun")
FLAGS = "-SP"  # one word: a shebang line passes everything after the interpreter as one argument
MARK = "# muster launcher"


def import_root() -> str:
    """The directory that holds the ``muster`` package now imported."""
    import muster

    return os.path.dirname(os.path.dirname(os.path.abspath(muster.__file__)))


def launcher_text(python: str, root: str, command: str) -> str:
    return (
        f"#!{python} {FLAGS}\n"
        f"{MARK} (python -m muster.cli.launchers): {command} without site processing\n"
        + ("" if command in LONG_RUNNING else "import gc\ngc.disable()\n")
        + "import sys\n"
        f"sys.path.append({root!r})\n"
        f"from muster.cli.{command} import main\n"
        "from muster.cli.common import leave\n"
        "leave(main())\n"
    )


def works(python: str, root: str) -> bool:
    """Whether every command's module imports from ``root`` alone, without ``site``, and
    is the muster found there (not another one on ``PYTHONPATH``)."""
    modules = ",".join(f"muster.cli.{c}" for c in COMMANDS)
    code = f"import sys; sys.path.append({root!r}); import {modules}; import muster; print(muster.__file__)"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    try:
        out = subprocess.run(
            [python, FLAGS, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return False
    return os.path.dirname(os.path.dirname(os.path.abspath(out))) == root


def write_launchers(bin_dir: str, python: str, root: str) -> list[str]:
    """Replace the commands' scripts in ``bin_dir`` (atomically, keeping their mode);
    returns the commands written. A command with no script there is skipped."""
    written = []
    for command in COMMANDS:
        path = os.path.join(bin_dir, command)
        if not os.path.isfile(path):
            continue
        tmp = f"{path}.muster-tmp"
        with open(tmp, "w") as f:
            f.write(launcher_text(python, root, command))
        os.chmod(tmp, os.stat(path).st_mode & 0o7777 or 0o755)
        os.replace(tmp, path)
        written.append(command)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        sys.stderr.write("usage: python -m muster.cli.launchers BIN_DIR\n")
        return 2
    bin_dir = os.path.abspath(args[0])
    python = os.path.join(bin_dir, "python")
    if not os.path.exists(python):
        python = sys.executable
    root = import_root()
    if not works(python, root):
        sys.stdout.write(f"muster: commands keep pip's scripts (muster is not importable from {root} alone)\n")
        return 0
    written = write_launchers(bin_dir, python, root)
    sys.stdout.write(f"muster: {len(written)} commands in {bin_dir} start without site processing\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
