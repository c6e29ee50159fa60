"""``muster up|status|down`` as a user runs them."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import tempfile

import pytest

from muster.cluster.local import cgroups_usable
from waiting import wait_for

pytestmark = pytest.mark.integration

MUSTER = [sys.executable, "-m", "muster.cli.muster"]


def muster(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MUSTER, *args], capture_output=True, text=True, timeout=120)


def test_up_status_restart_and_down() -> None:
    state = tempfile.mkdtemp(prefix="muster-up-")
    try:
        up = muster(
            "up",
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--cpus-per-node",
            "4",
            "--mem-per-node",
            "4000",
            "--state-dir",
            state,
        )
        assert up.returncode == 0, up.stderr
        assert f"export MUSTER_CONF={state}/muster.conf" in up.stdout
        assert oct(os.stat(f"{state}/muster.key").st_mode & 0o777) == "0o600"
        # auth/jwt for scontrol token and musterrestd: the key 0600, named in the config
        assert oct(os.stat(f"{state}/jwt_hs256.key").st_mode & 0o777) == "0o600"
        with open(f"{state}/muster.conf") as f:
            conf = f.read()
        assert "AuthAltTypes=auth/jwt" in conf and f"AuthAltParameters=jwt_key={state}/jwt_hs256.key" in conf
        assert "every TCP link is TLS" in up.stdout  # TLSType=tls/muster by default
        assert oct(os.stat(f"{state}/tls/slurmd_node1_cert_key.pem").st_mode & 0o777) == "0o600"
        if cgroups_usable():  # jobs confined by default wherever the machine allows (docs/containment.md)
            assert (
                "ProctrackType=proctrack/cgroup" in conf
                and "ConstrainRAMSpace=yes" in open(f"{state}/cgroup.conf").read()
            )
        else:
            assert "--mem is not enforced" in up.stderr

        daemons = json.loads(muster("status", "--state-dir", state, "--json").stdout)
        assert [d["name"] for d in daemons] == ["musterctld", "node1", "node2"]
        assert all(d["running"] for d in daemons)
        assert {d["state"] for d in daemons[1:]} == {"IDLE"}
        addresses = {d["address"].split(":")[0] for d in daemons[1:]}
        assert len(addresses) == 2  # each node on its own loopback address

        os.kill(daemons[2]["pid"], signal.SIGKILL)
        # Another process holds node2's lock: the agent `up` starts exits at once, and `up`
        # says so (which agent, why, its log) instead of reporting it started.
        lock = os.open(f"{state}/nodes/node2/musterd.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:

            def taken() -> bool:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return True
                except BlockingIOError:
                    return False

            # the killed agent's children let go of it first
            wait_for(taken, timeout=30, what="the killed agent's lock to be released")
            held = muster("up", "--state-dir", state)
        finally:
            os.close(lock)
        assert held.returncode == 1 and "started" not in held.stdout, held.stdout
        assert held.stderr.startswith(
            f"muster: error: agent node2 (node2) exited at once: musterd: error: another musterd uses "
            f"{state}/nodes/node2 (log: {state}/log/node2.log)"
        ), held.stderr
        again = muster("up", "--state-dir", state)
        assert again.returncode == 0, again.stderr
        assert "started: node2" in again.stdout
        assert all(d["running"] for d in json.loads(muster("status", "--state-dir", state, "--json").stdout))

        down = muster("down", "--state-dir", state)
        assert down.returncode == 0 and "musterctld" in down.stdout
        after = json.loads(muster("status", "--state-dir", state, "--json").stdout)
        assert not any(d["running"] for d in after)
    finally:
        muster("down", "--state-dir", state)


def test_bad_arguments_and_missing_clusters_fail_clearly() -> None:
    assert muster("up", "--nodes", "-1").returncode == 2
    missing = muster("status", "--state-dir", "/nonexistent/muster")
    assert missing.returncode == 1 and "no local cluster" in missing.stderr


def test_muster_up_renders_extra_settings_over_its_own(tmp_path) -> None:
    # render_config probes free ports: a socket, so not a unit test
    from muster.cluster.local import ClusterShape, LocalCluster
    from muster.core.config import ConfigError

    cluster = LocalCluster(str(tmp_path / "c"))
    cluster.create(ClusterShape(2, 0, 4, 1000, None), {"SlurmdTimeout": "5", "PriorityType": "priority/basic"})
    config = cluster.config()
    assert config.settings["SlurmdTimeout"] == "5" and config.settings["PriorityType"] == "priority/basic"
    bad = LocalCluster(str(tmp_path / "bad"))
    with pytest.raises(ConfigError):
        bad.create(ClusterShape(2, 0, 4, 1000, None), {"SlurmdTimeout": "soon"})
    assert not bad.exists


def test_muster_up_rest_starts_musterrestd_and_down_stops_it() -> None:
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    state = tempfile.mkdtemp(prefix="muster-up-rest-")
    try:
        up = muster(
            "up",
            "--nodes",
            "1",
            "--gpus-per-node",
            "1",
            "--cpus-per-node",
            "2",
            "--mem-per-node",
            "2000",
            "--state-dir",
            state,
            "--rest",
            f"127.0.0.1:{port}",
        )
        assert up.returncode == 0, up.stderr
        assert f"http://127.0.0.1:{port}/slurm/v0.0.40/" in up.stdout
        env = dict(os.environ, MUSTER_CONF=f"{state}/muster.conf")
        token = subprocess.run(
            [sys.executable, "-m", "muster.cli.scontrol", "token"], env=env, capture_output=True, text=True
        )
        assert token.returncode == 0 and token.stdout.startswith("SLURM_JWT="), token.stderr
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/slurm/v0.0.40/nodes",
            headers={"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": token.stdout.strip().split("=", 1)[1]},
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            assert [n["name"] for n in json.loads(r.read())["nodes"]] == ["node1"]
        down = muster("down", "--state-dir", state)
        assert down.returncode == 0 and "musterrestd" in down.stdout
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        bad = muster("up", "--state-dir", state, "--rest", "nope")
        assert bad.returncode == 2 and "invalid --rest address" in bad.stderr
        assert not any(d["running"] for d in json.loads(muster("status", "--state-dir", state, "--json").stdout))
    finally:
        muster("down", "--state-dir", state)
