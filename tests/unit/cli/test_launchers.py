"""The commands start at the interpreter's floor: nothing heavy is imported, and ``make
install``'s launchers run them without site processing (``cli.launchers``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from muster.cli.launchers import (
    COMMANDS,
    FLAGS,
    SERVED,
    import_root,
    launcher_text,
    main,
    start_server,
    works,
    write_launchers,
)

# What each command may import beyond the interpreter's own start (``python -S -c pass``):
# os and what it needs, and muster itself. No enum, re, typing, collections, json or socket.
ALLOWED = {"__future__", "_collections_abc", "_stat", "genericpath", "os", "os.path", "posixpath", "stat"}


@pytest.mark.parametrize("command", COMMANDS)
def test_a_command_imports_only_os_and_muster(command: str) -> None:
    code = (
        "import sys; before = set(sys.modules);"
        f"sys.path.append({import_root()!r}); import muster.cli.{command};"
        "print(' '.join(sorted(m for m in set(sys.modules) - before if not m.startswith('muster'))))"
    )
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True)
    assert set(out.stdout.split()) <= ALLOWED


# The commands typed most often do without os too (~0.9 ms of a start: client.sysenv.environ), and
# without __future__ (~0.07 ms): their modules quote the names only a type checker imports.
WITHOUT_OS = ("sbatch", "squeue", "sinfo", "scontrol")


@pytest.mark.parametrize("command", WITHOUT_OS)
def test_the_busiest_commands_run_without_importing_os(command: str, tmp_path: Path) -> None:
    code = (
        f"import sys; sys.path.append({import_root()!r}); import muster.cli.{command} as m;"
        "sys.argv = ['x', '--version']; rc = m.main(); print(rc, 'os' in sys.modules, '__future__' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split()[-3:] == ["0", "False", "False"]


# What those commands import as they run (``squeue -j``, ``sinfo``, ``scontrol show job``,
# ``show node``), not at start: as light, without ``__future__`` and without ``re``.
AT_RUN_TIME = ("muster.core.arrays", "muster.core.timetext", "muster.core.hostlist", "muster.core.memtext")


@pytest.mark.parametrize("module", AT_RUN_TIME)
def test_what_the_busiest_commands_import_as_they_run_is_as_light(module: str) -> None:
    code = (
        f"import sys; sys.path.append({import_root()!r}); import {module};"
        "print(' '.join(m for m in ('__future__', 're', 'enum', 'typing', 'os') if m in sys.modules) or '-')"
    )
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["-"]


def test_os_free_helpers_agree_with_os(monkeypatch: pytest.MonkeyPatch) -> None:
    from muster.client import sysenv

    for head, tail in (("/a", "b"), ("/a/", "b"), ("", "b"), ("/a", "/b"), ("a", "b/c")):
        assert sysenv.join(head, tail) == os.path.join(head, tail)
    for path in ("/a/b", "/a/b/", "a", "/", "//x", "a//b", "", "/a//b"):
        assert sysenv.dirname(path) == os.path.dirname(path)
    assert sysenv.path_exists("/") and not sysenv.path_exists("/nonexistent/x") and not sysenv.path_exists("a\0b")
    monkeypatch.setenv("MUSTER_TEST_X", "y\u00e9")
    assert sysenv.getenv("MUSTER_TEST_X") == "y\u00e9" and sysenv.environ() == dict(os.environ)
    code = (
        f"import sys; sys.path.append({import_root()!r}); from muster.client import sysenv;"
        "env = sysenv.environ(); import os; print(env == dict(os.environ), sysenv.getenv('MUSTER_TEST_X'))"
    )
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "y\u00e9"]


@pytest.mark.parametrize(
    ("body", "rc", "out", "err"),
    [
        ("sys.stdout.write('unflushed'); leave(3)", 3, "unflushed", ""),
        ("leave(None)", 0, "", ""),
        ("leave(256 + 7)", 7, "", ""),
        ("leave('a message')", 1, "", "a message\n"),
        ("import atexit; atexit.register(lambda: print('atexit ran')); leave(0)", 0, "atexit ran\n", ""),
        (
            "import threading, time; threading.Thread(target=lambda: (time.sleep(0.2), print('joined'))).start(); leave(2)",
            2,
            "joined\n",
            "",
        ),
    ],
)
def test_leave_exits_as_sys_exit_does(body: str, rc: int, out: str, err: str) -> None:
    code = f"import sys; sys.path.append({import_root()!r}); from muster.cli.common import leave; {body}"
    p = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True)
    assert (p.returncode, p.stdout, p.stderr) == (rc, out, err)


def test_a_launcher_names_the_interpreter_flags_and_the_import_root() -> None:
    text = launcher_text("/venv/bin/python", "/src", "squeue")
    assert text.startswith("#!/venv/bin/python -SP\n")
    assert "sys.path.append('/src')\nfrom muster.cli.squeue import main\n" in text
    assert text.endswith("from muster.cli.common import leave\nleave(main())\n")
    assert launcher_text("/venv/bin/python", "/src", "srun").endswith(
        "from muster.cli.srun import main\nfrom muster.cli.common import leave\nleave(main())\n"
    )
    assert " " not in FLAGS  # a shebang passes one argument


def _fake_bin(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("sbatch", "squeue", "musterctld"):
        script = bin_dir / name
        script.write_text("#!/bin/sh\necho pip\n")
        script.chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)
    return bin_dir


def test_launchers_replace_the_commands_scripts_and_run_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", str(tmp_path / "no-compiler"))  # the client: the next test
    bin_dir = _fake_bin(tmp_path)
    assert main([str(bin_dir)]) == 0
    assert (bin_dir / "musterctld").read_text() == "#!/bin/sh\necho pip\n"  # a daemon keeps pip's
    assert not (bin_dir / "sinfo").exists()  # only scripts pip installed are replaced
    sbatch = bin_dir / "sbatch"
    assert sbatch.read_text().startswith(f"#!{bin_dir / 'python'} -SP\n")
    assert os.stat(sbatch).st_mode & 0o777 == 0o755
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([str(sbatch), "--version"], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.startswith("slurm 22.05")


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler: the commands keep their launchers")
def test_with_a_compiler_the_served_commands_become_the_client(tmp_path: Path) -> None:
    bin_dir = _fake_bin(tmp_path)
    assert main([str(bin_dir)]) == 0
    libexec = tmp_path / "libexec" / "muster"
    for command in ("sbatch", "squeue"):  # the commands pip installed, both served
        assert (bin_dir / command).read_bytes().startswith(b"\x7fELF")
        assert os.path.samefile(bin_dir / command, libexec / "client")
        assert (libexec / command).read_text().startswith(f"#!{bin_dir / 'python'} -SP\n")
    assert "from muster.cli.cmdserver import main" in (libexec / "cmdserver").read_text()
    # Told not to use a server, the client runs the command's launcher itself.
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "MUSTER_CMD_SERVER": "0"}
    out = subprocess.run([str(bin_dir / "sbatch"), "--version"], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.startswith("slurm 22.05")
    bad = subprocess.run([str(bin_dir / "sbatch"), "--no-such-option"], capture_output=True, text=True, env=env)
    assert (bad.returncode, bad.stderr.splitlines()[0]) == (255, "sbatch: unrecognized option '--no-such-option'")
    # Installed again, it is built again and nothing is left over.
    assert main([str(bin_dir)]) == 0
    assert not [p for p in (*bin_dir.iterdir(), *libexec.iterdir()) if p.name.endswith(".muster-tmp")]


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler: the commands keep their launchers")
def test_start_server_brings_up_the_users_server_unless_turned_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = _fake_bin(tmp_path)
    assert main([str(bin_dir)]) == 0
    monkeypatch.delenv("PYTHONPATH", raising=False)
    server = f"{tmp_path}/libexec/muster/cmdserver /tmp/muster-cmd-"

    def servers() -> list[str]:
        return subprocess.run(["pgrep", "-f", server], capture_output=True, text=True).stdout.split()

    monkeypatch.setenv("MUSTER_CMD_SERVER", "0")
    assert not start_server(str(bin_dir)) and servers() == []
    monkeypatch.delenv("MUSTER_CMD_SERVER")
    try:
        assert start_server(str(bin_dir))
        assert len(servers()) >= 1  # it answered: it runs, waiting for this install's commands
    finally:
        subprocess.run(["pkill", "-f", server])
    assert not start_server(str(tmp_path))  # no client there: nothing to start


def test_served_commands_are_the_one_shot_ones() -> None:
    assert set(SERVED) == set(COMMANDS) - {"srun", "salloc"}


def test_a_root_muster_cannot_be_imported_from_keeps_pips_scripts(tmp_path: Path) -> None:
    bin_dir = _fake_bin(tmp_path)
    assert not works(str(bin_dir / "python"), str(tmp_path / "nowhere"))
    assert works(str(bin_dir / "python"), import_root())
    assert write_launchers(str(bin_dir), str(bin_dir / "python"), import_root()) == ["sbatch", "squeue"]


def test_usage() -> None:
    assert main([]) == 2


@pytest.mark.parametrize("command", COMMANDS)
def test_one_shot_commands_run_without_the_garbage_collector(command: str) -> None:
    text = launcher_text(sys.executable, import_root(), command)
    assert text.count("leave(main())") == 1
    code = text.replace("leave(main())", "import gc; print(gc.isenabled())")
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(command in ("srun", "salloc"))]


def _gc_when_sleeping(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """time.sleep records whether the collector is on, then stops the loop (^C)."""
    import gc
    import time

    seen: list[bool] = []

    def sleep(_seconds: float) -> None:
        seen.append(gc.isenabled())
        raise KeyboardInterrupt

    monkeypatch.setattr(time, "sleep", sleep)
    gc.disable()  # as the launcher leaves it
    return seen


def test_repeating_listings_collect_their_garbage(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from muster.cli import sinfo, squeue

    try:
        seen = _gc_when_sleeping(monkeypatch)
        monkeypatch.setattr(squeue, "fetch", lambda req: ([], 0.0))
        assert squeue.main(["-i", "5"]) == 0
        gc.disable()
        monkeypatch.setattr(sinfo, "fetch", lambda fields: ([], [], 0.0))
        assert sinfo.main(["-i", "5"]) == 0
        assert seen == [True, True]
    finally:
        gc.enable()


def test_sbatch_wait_collects_its_garbage() -> None:
    import gc

    from muster.cli import sbatch

    seen = []

    class Ctl:
        def get(self, path: str) -> dict:
            seen.append(gc.isenabled())
            return {"job": {"state": "COMPLETED", "exit_code": 0}}

    gc.disable()
    try:
        assert sbatch.wait_for(Ctl(), 7) == 0
        assert seen == [True]
    finally:
        gc.enable()


def test_scontrols_prompt_collects_its_garbage(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc
    import io

    from muster.cli import scontrol

    monkeypatch.setattr(sys, "stdin", io.StringIO("quit\n"))
    gc.disable()
    try:
        assert scontrol.interactive(scontrol.Flags()) == 0
        assert gc.isenabled()
    finally:
        gc.enable()
