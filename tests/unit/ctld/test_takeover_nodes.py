"""After a restart or a takeover, nodes that were in service are shown as they were (not
UNKNOWN) until their agents register or SlurmdTimeout passes; they take no work meanwhile."""

from __future__ import annotations

import pathlib

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.states import NodeState
from muster.ctld.controller import Controller
from muster.ctld.state import NODES_UP
from muster.ctld.store import Store

CONF = """
ClusterName=t
SlurmdTimeout=60
NodeName=node[1-3] CPUs=4 RealMemory=1000
PartitionName=p Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def controller(tmp_path: pathlib.Path, clock: ManualClock) -> Controller:
    ctl = Controller(parse_config(CONF, "t.conf"), Store(str(tmp_path / "m.db")), clock)
    ctl.load()
    return ctl


def register(ctl: Controller, node: str) -> None:
    ctl.agents.register({"node": node, "running": [], "version": "0.2.0", "cpus": 4, "real_memory": 1000})


def test_nodes_in_service_before_a_takeover_are_shown_so_until_their_agents_register(tmp_path: pathlib.Path) -> None:
    clock = ManualClock(1000.0)
    first = controller(tmp_path, clock)
    register(first, "node1")
    register(first, "node2")
    first.liveness.check_nodes()
    assert first.store.get_meta(NODES_UP) == "node[1-2]"
    first.store.close()

    clock.advance(5)
    second = controller(tmp_path, clock)  # the backup takes over (or the controller restarted)
    states = {n.name: n.base_state() for n in second.nodes.values()}
    assert states == {"node1": NodeState.IDLE, "node2": NodeState.IDLE, "node3": NodeState.UNKNOWN}
    assert not any(n.available for n in second.nodes.values())  # no work before they register
    register(second, "node1")
    assert second.nodes["node1"].available

    clock.advance(61)  # SlurmdTimeout without a word from node2: no longer presumed
    second.agents.heartbeat({"node": "node1", "running": []})
    second.liveness.check_nodes()
    assert second.nodes["node2"].base_state() is NodeState.UNKNOWN
    assert second.store.get_meta(NODES_UP) == "node1"
    second.store.close()


def test_a_garbled_record_is_ignored(tmp_path: pathlib.Path) -> None:
    store = Store(str(tmp_path / "m.db"))
    store.set_meta(NODES_UP, "node[1-")
    store.close()
    ctl = controller(tmp_path, ManualClock(1000.0))
    assert all(n.base_state() is NodeState.UNKNOWN for n in ctl.nodes.values())


def test_a_node_with_running_work_gets_its_whole_slurmd_timeout_from_when_the_controller_serves(
    tmp_path: pathlib.Path,
) -> None:
    clock = ManualClock(1000.0)
    ctl = controller(tmp_path, clock)
    node = ctl.nodes["node1"]
    node.last_seen, node.responding = 1000.0, True  # as load leaves a node with running jobs
    clock.advance(50)  # loading a large state took this long
    ctl.serving(clock.now())
    clock.advance(50)
    ctl.liveness.check_nodes()
    assert node.responding  # 100 s since the load began, 50 since it serves: not DOWN
