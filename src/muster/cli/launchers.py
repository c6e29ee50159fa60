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

Where a C compiler is at hand (``cc``, or ``$CC``), ``build_client`` then compiles
``client.c`` and puts it in place of the ``SERVED`` commands (all but srun and salloc), whose
launchers move to ``BIN/../libexec/muster`` beside the command server's (``cli.cmdserver``):
the client hands each command to the user's warm server and runs the launcher itself
whatever the server cannot take. A client that does not build, or does not run a probe
command, leaves the launchers where they are.
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
    "sbcast",
    "scancel",
    "scontrol",
    "sdiag",
    "sinfo",
    "sprio",
    "sreport",
    "srun",
    "sshare",
    "squeue",
    "sstat",
    "strigger",
)
# The commands that run long (a job's tasks, an allocation's shell) keep the garbage collector
# (module docstring).
LONG_RUNNING = ("salloc", "srun")
# The commands the compiled client hands to the user's command server (``cli.cmdserver``):
# all but those that run a job's tasks or an allocation's shell in the terminal.
SERVED = tuple(c for c in COMMANDS if c not in LONG_RUNNING)
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


def client_id(python: str, root: str, libexec: str) -> str:
    """This install's name for its server's socket: another checkout or venv has its own."""
    import hashlib

    return hashlib.sha256("\0".join((python, root, libexec)).encode()).hexdigest()[:16]


def build_client(bin_dir: str, python: str, root: str) -> list[str]:
    """Put the compiled client (``client.c``) in place of the served commands' launchers,
    which move to ``BIN/../libexec/muster`` with the server's; returns the commands now
    served. Without a C compiler, or where the client does not run, nothing changes."""
    import shutil
    import tempfile

    compiler = shutil.which(os.environ.get("CC") or "cc")
    served = [c for c in SERVED if os.path.isfile(os.path.join(bin_dir, c))]
    if compiler is None or not served:
        return []
    libexec = os.path.join(os.path.dirname(bin_dir), "libexec", "muster")
    os.makedirs(libexec, exist_ok=True)
    for command in (*served, "cmdserver"):
        path = os.path.join(libexec, command)
        with open(f"{path}.muster-tmp", "w") as f:
            f.write(launcher_text(python, root, command))
        os.chmod(f"{path}.muster-tmp", 0o755)
        os.replace(f"{path}.muster-tmp", path)
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "client.c")
    client = os.path.join(libexec, "client")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "client")
        cmd = [compiler, "-O2", "-o", out, source, f'-DMUSTER_LIBEXEC="{libexec}"']
        cmd.append(f'-DMUSTER_ID="{client_id(python, root, libexec)}"')
        try:
            subprocess.run(cmd, check=True, capture_output=True, timeout=120)
            probe = os.path.join(tmp, "sbatch")
            os.link(out, probe)
            env = {**os.environ, "MUSTER_CMD_SERVER": "0"}
            version = subprocess.run([probe, "--version"], env=env, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return []
        if version.returncode != 0 or not version.stdout.startswith("slurm "):
            return []
        shutil.copy2(out, f"{client}.muster-tmp")
    os.replace(f"{client}.muster-tmp", client)
    for command in served:
        path = os.path.join(bin_dir, command)
        tmp_path = f"{path}.muster-tmp"
        if os.path.exists(tmp_path):
            os.unlink(tmp_path)
        os.link(client, tmp_path)
        os.replace(tmp_path, path)
    return served


def start_server(bin_dir: str, timeout: float = 15.0) -> bool:
    """Start the user's command server now, where ``bin_dir``'s commands are the compiled
    client and the user has not turned the server off (``muster up``: the session's first
    commands are then served too, rather than racing the server's start). True once one
    answers."""
    client = os.path.join(bin_dir, "sbatch")
    try:
        with open(client, "rb") as f:
            if f.read(4) != b"\x7fELF":
                return False
    except OSError:
        return False
    if os.environ.get("MUSTER_CMD_SERVER") == "0":
        return False
    env = {**os.environ, "MUSTER_CMD_SERVER": "wait"}
    try:
        done = subprocess.run([client, "--version"], env=env, capture_output=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


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
    served = build_client(bin_dir, python, root)
    if served:
        sys.stdout.write(f"muster: {len(served)} of them run in a warm command server (cli/cmdserver.py)\n")
    else:
        sys.stdout.write("muster: no C compiler or no working client: every command starts its own interpreter\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
