"""sinfo's views, checked against Slurm 22.05's captures."""

from __future__ import annotations

import pytest

from muster.cli import sinfo
from muster.cli.common import CommandError

NOW = 1796227645.0


def _lines(parts: list[dict], nodes: list[dict], argv: list[str]) -> list[str]:
    req = sinfo.parse_args(argv, {})
    assert isinstance(req, sinfo.Request)
    return sinfo.report_lines(parts, nodes, req, NOW)


def test_default_view_matches_slurm(partitions, nodes, reference) -> None:
    stdout, _ = reference("fmt_sinfo_default.txt")
    assert _lines(partitions, nodes, []) == stdout.splitlines()


def test_summary_matches_slurm(partitions, nodes, reference) -> None:
    stdout, _ = reference("fmt_sinfo_s.txt")
    assert _lines(partitions, nodes, ["-s"]) == stdout.splitlines()


def test_gres_and_cpu_counts_match_slurm(partitions, nodes, reference) -> None:
    stdout, _ = reference("fmt_sinfo_o_gres.txt")
    assert _lines(partitions, nodes, ["-o", "%P %a %l %D %t %N %G %C"]) == stdout.splitlines()


def test_node_long_view_matches_slurm(partitions, nodes, reference) -> None:
    stdout, _ = reference("fmt_sinfo_N_l.txt")
    got = _lines(partitions, nodes, ["-N", "-l"])
    want = stdout.splitlines()
    assert got[0] == "Wed Dec 02 16:07:25 2026" == want[0]
    assert got[1:] == want[1:]


def test_node_view_lists_a_node_once_per_partition(partitions, nodes) -> None:
    got = _lines(partitions, nodes, ["-N"])
    assert got[0] == "NODELIST   NODES PARTITION STATE "
    assert got[1] == "node1          1      gpu* mix   "
    assert [line.split()[0] for line in got[1:]].count("node5") == 2


def test_states_and_not_responding_marks(partitions, nodes) -> None:
    nodes[2].update(drain=True, reason="maintenance")  # node3 idle+drain
    nodes[0].update(drain=True)  # node1 mixed+drain
    nodes[3].update(state="DOWN", responding=False, reason="Not responding")
    nodes[4].update(state="ALLOCATED", cpus_alloc=32)
    got = _lines(partitions, nodes, ["-p", "gpu", "-h"])
    # Slurm orders by state number plus flag bits, highest first.
    assert got == [
        "gpu*         up   infinite      1  down* node4",
        "gpu*         up   infinite      1   drng node1",
        "gpu*         up   infinite      1  drain node3",
        "gpu*         up   infinite      1    mix node2",
        "gpu*         up   infinite      1  alloc node5",
        "gpu*         up   infinite      3   idle node[6-8]",
    ]


def test_cpu_counts_put_unavailable_nodes_under_other(partitions, nodes) -> None:
    nodes[3].update(state="DOWN", responding=False)
    got = _lines(partitions, nodes, ["-h", "-p", "gpu", "-o", "%C %F"])
    # No per-node column in the format, so the partition is one row.
    assert got == ["2/222/32/256 2/5/1/8"]


def test_state_filter(partitions, nodes) -> None:
    assert _lines(partitions, nodes, ["-h", "-t", "mix", "-o", "%P %N"]) == ["gpu* node[1-2]"]
    with pytest.raises(CommandError, match="Invalid node state specified"):
        sinfo.parse_args(["-t", "sleepy"], {})


def test_state_lists_any_or_all_and_state_complete(partitions, nodes) -> None:
    for i in (4, 5):
        nodes[i].update(state="DOWN", drain=False, reason="test")
    nodes[5].update(drain=True)  # node6: down+drain
    nodes[6].update(state="IDLE", drain=True)  # node7: idle+drain
    argv = ["-Nh", "-n", "node[5-8]", "-p", "gpu", "-O", "NodeList:8,StateComplete:20"]
    assert _lines(partitions, nodes, argv + ["-t", "idle"]) == [
        "node7    idle+drain          ",
        "node8    idle                ",
    ]
    assert [ln.split()[0] for ln in _lines(partitions, nodes, argv + ["-t", "down,drain"])] == [
        "node5",
        "node6",
        "node7",
    ]
    assert _lines(partitions, nodes, argv + ["-t", "down&drain"]) == ["node6    down+drain          "]
    with pytest.raises(CommandError, match="Invalid node state specified"):
        sinfo.parse_args(["-t", "down&drain,idle"], {})


def test_node_filter_drops_partitions_without_those_nodes(partitions, nodes) -> None:
    assert _lines(partitions, nodes, ["-h", "-n", "node[1-2]", "-o", "%R %D"]) == ["gpu 2"]


def test_reasons_list(partitions, nodes) -> None:
    nodes[3].update(
        state="DOWN",
        responding=False,
        reason="Not responding",
        reason_user="root",
        reason_time=NOW - 60,
    )
    nodes[6].update(drain=True, reason="bad gpu", reason_user="alice", reason_time=NOW)
    assert _lines(partitions, nodes, ["-R"]) == [
        "REASON               USER      TIMESTAMP           NODELIST",
        "Not responding       root      2026-12-02T16:06:25 node4",
        "bad gpu              alice     2026-12-02T16:07:25 node7",
    ]


def test_long_partition_names_widen_the_column(nodes) -> None:
    parts = [
        {
            "name": "a-very-long-partition",
            "nodes": ["node1"],
            "default": True,
            "state": "UP",
            "max_time": 60,
        },
    ]
    got = _lines(parts, nodes, [])
    assert got[0].startswith("PARTITION              AVAIL")
    assert got[1].startswith("a-very-long-partition*    up       1:00 ")


def test_format_long_names(partitions, nodes) -> None:
    got = _lines(partitions, nodes, ["-h", "-p", "debug", "-O", "partition:8,nodes:.5,statelong:10"])
    assert got == ["debug        4 idle      "]


def test_version_is_each_nodes_agent_version(partitions, nodes) -> None:
    first, second = nodes[0]["name"], nodes[1]["name"]
    for n in nodes:
        n["version"] = "0.1.0" if n["name"] == first else "0.2.0.dev7+gabc"
    got = _lines(partitions, nodes, ["-h", "-N", "-o", "%N %v"])
    assert f"{first} 0.1.0" in got and f"{second} 0.2.0.dev7+gabc" in got
    long = _lines(partitions, nodes, ["-h", "-N", "-n", first, "-O", "nodelist:10,version:20"])
    assert long[0].split() == [first, "0.1.0"]
    del nodes[0]["version"]  # not registered yet
    assert f"{first} N/A" in _lines(partitions, nodes, ["-h", "-N", "-o", "%N %v"])


def test_unknown_option(capsys, reference) -> None:
    _, stderr = reference("fmt_err_sinfo_unknown_option.txt")
    assert sinfo.main(["--bogus"]) == 1
    assert capsys.readouterr().err == stderr


def test_sort_reads_letters_as_slurm_does_and_passes_over_the_rest(partitions, nodes) -> None:
    nodes[2].update(drain=True, reason="maintenance")  # node3 drained
    default = _lines(partitions, nodes, ["-p", "gpu", "-h"])
    # Slurm's default is "#P,-t"; "t" ascending reverses the state order.
    assert _lines(partitions, nodes, ["-p", "gpu", "-h", "-S", "#P,-t"]) == default
    assert _lines(partitions, nodes, ["-p", "gpu", "-h", "-S", "t"]) == default[::-1]
    # Each character is a letter or passed over: Slurm refuses nothing here.
    assert sorted(_lines(partitions, nodes, ["-p", "gpu", "-h", "-S", "junk!"])) == sorted(default)
    by_name = _lines(partitions, nodes, ["-N", "-h", "-S", "-N", "-o", "%N"])
    assert by_name == sorted(by_name, key=lambda n: int(n.strip()[4:]), reverse=True)
    by_count = _lines(partitions, nodes, ["-h", "-S", "-D", "-o", "%D %P"])
    assert [int(line.split()[0]) for line in by_count] == sorted(
        (int(line.split()[0]) for line in by_count), reverse=True
    )


# ``sinfo -o %all``'s header from Slurm 22.05 (slurm-anchor), less the fields muster has no
# value for (%B MAX_CPUS_PER_NODE, %I PRIO_JOB_FACTOR, %M PREEMPT_MODE, %V CLUSTER).
SLURM_ALL_HEADER = (
    "AVAIL|ACTIVE_FEATURES|CPUS|TMP_DISK|FREE_MEM|AVAIL_FEATURES|GROUPS|OVERSUBSCRIBE|TIMELIMIT|MEMORY|HOSTNAMES|"
    "NODE_ADDR|PRIO_TIER|ROOT|JOB_SIZE|STATE|USER|VERSION|WEIGHT|S:C:T|NODES(A/I) |MAX_CPUS_PER_NODE |"
    "CPUS(A/I/O/T) |NODES |REASON |NODES(A/I/O/T) |GRES |TIMESTAMP |PRIO_JOB_FACTOR |DEFAULTTIME |PREEMPT_MODE |"
    "NODELIST |CPU_LOAD |PARTITION |PARTITION |ALLOCNODES |STATE |USER |CLUSTER |SOCKETS |CORES |THREADS "
)


def test_format_all_prints_every_field_as_slurm_separates_them(partitions, nodes) -> None:
    lines = _lines(partitions, nodes, ["-o", "%all"])
    expected = SLURM_ALL_HEADER
    for missing in ("MAX_CPUS_PER_NODE |", "PRIO_JOB_FACTOR |", "PREEMPT_MODE |", "CLUSTER |"):
        expected = expected.replace(missing, "", 1)
    assert lines[0] == expected
    assert len(lines) > 1 and all(line.count("|") == expected.count("|") and line.endswith(" ") for line in lines)


@pytest.mark.parametrize(
    "state",
    # sinfo(1), NODE STATE CODES and the flags --states takes, in any case
    "ALLOC ALLOCATED BLOCKED BOOT CLOUD COMP COMPLETING DOWN DRAIN DRAINED DRAINING FAIL FAILING "
    "FUTURE FUTR IDLE INVAL MAINT MIX MIXED NO_RESPOND NOT_RESPONDING NPC PERFCTRS PLANNED POWER_DOWN "
    "POWERED_DOWN POWERING_DOWN POWERING_UP REBOOT_ISSUED REBOOT_REQUESTED RESV RESERVED UNK UNKNOWN".split(),
)
def test_every_state_slurm_lists_is_accepted(partitions, nodes, state) -> None:
    req = sinfo.parse_args(["-t", state.lower() if len(state) % 2 else state], {})
    assert isinstance(req, sinfo.Request)
    sinfo.report_lines(partitions, nodes, req, NOW)


def test_states_no_node_enters_select_none(partitions, nodes) -> None:
    assert _lines(partitions, nodes, ["-h", "-N", "-t", "boot,powered_down,cloud"]) == []


def test_drained_and_draining_are_told_apart(partitions, nodes) -> None:
    nodes[0].update(drain=True)  # node1 mixed+drain: DRAINING
    nodes[2].update(drain=True)  # node3 idle+drain: DRAINED
    base = ["-h", "-p", "gpu", "-o", "%N"]
    assert _lines(partitions, nodes, base + ["-t", "draining"]) == ["node1"]
    assert _lines(partitions, nodes, base + ["-t", "drained"]) == ["node3"]
    assert _lines(partitions, nodes, base + ["-t", "drain"]) == ["node[1,3]"]


def test_plus_joins_states_that_must_all_hold(partitions, nodes) -> None:
    nodes[5].update(state="DOWN", drain=True)
    assert _lines(partitions, nodes, ["-h", "-p", "gpu", "-o", "%N", "-t", "down+drain"]) == ["node6"]
