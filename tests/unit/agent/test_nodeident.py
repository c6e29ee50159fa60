"""agent.nodeident: an emulated node's jobs see its host name and the cluster's names, in
namespaces of their own; the machine's host name and /etc/hosts never change."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from muster.agent import nodeident, spawn
from muster.core.config import parse_config

CONF = """ClusterName=t
SlurmctldHost=ctl(127.0.0.1)
NodeName=node1 NodeAddr=127.0.0.2 CPUs=2
NodeName=node2 NodeAddr=127.0.0.3 NodeHostname=gpu2 CPUs=2
NodeName=far NodeAddr=10.1.2.3 CPUs=2
PartitionName=p Nodes=ALL Default=YES
"""

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces need root")


def test_the_hosts_file_adds_the_emulated_nodes_to_the_machines() -> None:
    text = nodeident.hosts_text("127.0.0.1 localhost\n", parse_config(CONF))
    assert text.splitlines() == [
        "127.0.0.1 localhost",
        "# muster: the emulated nodes of this cluster",
        "127.0.0.2\tnode1",
        "127.0.0.3\tgpu2 node2",  # NodeHostname first: what the node calls itself
    ]


def test_only_a_node_at_a_loopback_address_with_another_name_is_emulated() -> None:
    nodes = {n.name: n for n in parse_config(CONF).nodes}
    assert nodeident.is_emulated(nodes["node1"], "vm.example.org")
    assert not nodeident.is_emulated(nodes["node1"], "node1.example.org")  # this machine is node1
    assert not nodeident.is_emulated(nodes["far"], "vm")  # a real machine elsewhere


def test_no_turns_it_off_and_a_bad_value_is_refused(tmp_path: Path) -> None:
    cfg = parse_config(CONF + "NodeHostnames=no\n")
    assert nodeident.configure(cfg, cfg.nodes[0], str(tmp_path)) is None
    assert nodeident.for_node("node1") is None
    cfg = parse_config(CONF + "NodeHostnames=maybe\n")
    with pytest.raises(OSError, match="NodeHostnames=maybe: expected auto, yes or no"):
        nodeident.configure(cfg, cfg.nodes[0], str(tmp_path))


@root_only
def test_a_child_takes_the_nodes_name_and_hosts_and_the_machine_keeps_its_own(tmp_path: Path) -> None:
    cfg = parse_config(CONF)
    before = (socket.gethostname(), Path("/etc/hosts").read_text())
    identity = nodeident.configure(cfg, cfg.nodes[1], str(tmp_path))
    if identity is None:
        pytest.skip("this kernel refuses UTS and mount namespaces")
    try:
        assert nodeident.for_node("node2") == identity
        out = tmp_path / "out.txt"
        spec = spawn.ChildSpec(
            exe="/bin/sh",
            argv=["/bin/sh", "-c", "hostname; getent hosts node1 gpu2"],
            env={"PATH": "/usr/bin:/bin"},
            uid=os.geteuid(),
            gid=os.getegid(),
            groups=None,
            umask=None,
            cwd=str(tmp_path),
            words=spawn.Wording(session="s", identity="i", chdir="c", stdio="d", exec="e"),
            stdin=spawn.Stream(path=os.devnull, label="stdin"),
            stdout=spawn.Stream(path=str(out), flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC, label="out"),
            stderr=spawn.Stream(same=True),
            identity=identity,
        )
        pid = os.fork()
        if pid == 0:
            spawn.become(spec, os.open(os.devnull, os.O_WRONLY))
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        lines = out.read_text().split()
        assert lines == ["gpu2", "127.0.0.2", "node1", "127.0.0.3", "gpu2", "node2"]
        assert (socket.gethostname(), Path("/etc/hosts").read_text()) == before
    finally:
        nodeident._IDENTITIES.clear()


@root_only
def test_yes_on_a_machine_that_refuses_namespaces_stops_the_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = parse_config(CONF + "NodeHostnames=yes\n")
    monkeypatch.setattr(nodeident, "_probe", lambda identity: "unshare: Operation not permitted")
    monkeypatch.setattr(nodeident, "_PROBED", None)
    with pytest.raises(OSError, match="NodeHostnames=yes: cannot give the jobs of node1 their own host name"):
        nodeident.configure(cfg, cfg.nodes[0], str(tmp_path))
    cfg = parse_config(CONF)
    assert nodeident.configure(cfg, cfg.nodes[0], str(tmp_path)) is None  # auto: the machine's name
    assert nodeident.configure(cfg, cfg.nodes[1], str(tmp_path)) is None  # probed once per process
