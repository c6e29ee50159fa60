"""Daemons of this release and of muster 0.2.0 (release N-1, tag v0.2.0 on commit 22f68a7) in
one local cluster: the support window's tests (integration/test_support_window.py) and the
upgrade procedure's (integration/test_upgrade.py).

The old release is built as docs/upgrade.md says a site gets it: its wheel, built from its
commit (``git archive`` of 22f68a7, ``pip wheel --no-build-isolation`` with this venv's
hatchling: no network), installed with ``pip install --no-deps --target`` into a
temporary directory; its daemons and commands run with this venv's Python and
``PYTHONPATH`` on that directory (its dependencies are the same as this release's). ``spawn`` starts one daemon of a ``Harness``'s cluster where
``LocalCluster.stop`` finds it (its pid file), so ``Harness.down`` ends it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from harness import Harness

V020 = "22f68a7"  # tag v0.2.0
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def unpack_old_src() -> Iterator[str]:
    """A directory holding muster 0.2.0 as its wheel installs it, built from git (a pytest
    fixture's body: it skips when git or the commit is missing, and removes everything
    afterwards)."""
    # CI (``MUSTER_TEST_REQUIRE_OLD_RELEASE=1``, .ci/run) fails instead: a shallow clone
    # without the release would otherwise skip the upgrade's tests silently.
    missing = pytest.fail if os.environ.get("MUSTER_TEST_REQUIRE_OLD_RELEASE") == "1" else pytest.skip
    if shutil.which("git") is None:
        missing("git is not installed")
    probe = subprocess.run(["git", "cat-file", "-e", f"{V020}^{{commit}}"], cwd=ROOT, capture_output=True)
    if probe.returncode != 0:
        missing(f"commit {V020} (v0.2.0) is not in this clone (a shallow clone? fetch its history)")
    tree = tempfile.mkdtemp(prefix="muster-v0.2.0-")
    try:
        source, dist, site = (os.path.join(tree, d) for d in ("source", "dist", "site"))
        os.mkdir(source)
        archive = subprocess.Popen(["git", "archive", V020], cwd=ROOT, stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", source], stdin=archive.stdout, check=True)
        assert archive.wait() == 0
        pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", dist, source], check=True)
        (wheel,) = (os.path.join(dist, w) for w in os.listdir(dist) if w.endswith(".whl"))
        subprocess.run([*pip, "install", "--no-deps", "--no-compile", "--target", site, wheel], check=True)
        assert os.path.isfile(os.path.join(site, "muster", "ctld", "main.py")), os.listdir(site)
        yield site
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def spawn(
    h: Harness, name: str, module: str, args: list[str], pythonpath: str | None, conf: str | None = None
) -> subprocess.Popen[bytes]:
    """Start one daemon of ``h``'s cluster (its pid file where ``LocalCluster.stop`` finds
    it), from the tree on ``pythonpath`` (None: this one), reading ``conf`` (None: the
    cluster's muster.conf)."""
    cluster = h.cluster
    conf = conf or cluster.conf_path
    env = dict(os.environ, MUSTER_CONF=conf)
    env.pop("PYTHONPATH", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    log_path = os.path.join(cluster.state_dir, "log", f"{name}.log")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, "--conf", conf, *args, "--log-file", log_path],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            env=env,
        )
    with open(os.path.join(cluster.state_dir, "run", f"{name}.pid"), "w") as f:
        f.write(f"{proc.pid}\n")
    return proc


def spawn_ctld(h: Harness, pythonpath: str | None) -> subprocess.Popen[bytes]:
    return spawn(h, "musterctld", "muster.ctld.main", ["--index", "0"], pythonpath)


def spawn_agent(h: Harness, node: str, pythonpath: str | None, conf: str | None = None) -> subprocess.Popen[bytes]:
    state = os.path.join(h.cluster.state_dir, "nodes", node)
    os.makedirs(state, exist_ok=True)
    return spawn(h, node, "muster.agent.main", ["--node", node, "--state-dir", state], pythonpath, conf)


def log(h: Harness, name: str) -> str:
    path = os.path.join(h.cluster.state_dir, "log", f"{name}.log")
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError as exc:
        return f"({path}: {exc}; state directory listing: {os.listdir(h.root) if os.path.isdir(h.root) else 'gone'})"


def wait(
    check: Callable[[], Any], what: str, h: Harness, timeout: float = 120.0, logs: tuple[str, ...] = ("node1",)
) -> Any:
    """``check()``'s first true answer within ``timeout``; else an AssertionError with the
    controller's log and the ``logs`` of those daemons."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as exc:  # noqa: BLE001 - a controller still starting
            last = exc
        else:
            if last:
                return last
        time.sleep(0.1)
    shown = "".join(f"\n--- {name} ---\n{log(h, name)}" for name in ("musterctld", *logs))
    raise AssertionError(f"{what}: {last!r}{shown}")


def old_command(h: Harness, old_src: str, command: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run muster 0.2.0's ``command`` (its ``main``) against ``h``'s controller."""
    code = f"import sys; from muster.cli.{command} import main; sys.exit(main(sys.argv[1:]))"
    return h.run([sys.executable, "-c", code, *args], env={"PYTHONPATH": old_src, "MUSTER_CMD_SERVER": "0"})
