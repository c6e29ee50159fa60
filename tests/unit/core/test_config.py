"""The slurm.conf parser: the real anchor config, defaults, ranges, and errors by line."""

from __future__ import annotations

from pathlib import Path

import pytest

from muster.core.config import Config, ConfigError, NodeConf, PartitionConf, parse_config
from muster.sched.config import SchedConfig

ANCHOR = Path(__file__).parent / "data" / "slurm_anchor.conf"


def parse(text: str) -> Config:
    return parse_config(text, "/etc/muster/slurm.conf")


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse(text)
    return str(info.value)


# --- the real Slurm 22.05 config the reference outputs were captured with ---


@pytest.fixture(scope="module")
def anchor() -> Config:
    return parse_config(ANCHOR.read_text(), "/etc/slurm/slurm.conf")


def test_anchor_config_defines_eight_gpu_nodes(anchor: Config) -> None:
    assert [n.name for n in anchor.nodes] == [f"node{i}" for i in range(1, 9)]
    node = anchor.node("node3")
    assert node is not None
    assert (node.addr, node.hostname, node.port) == ("127.0.0.1", "vm", 17003)
    assert (node.cpus, node.sockets, node.cores_per_socket, node.threads_per_core) == (32, 2, 16, 1)
    assert node.real_memory == 128000
    assert (node.gres, node.gpus, node.gpu_type, node.gres_counts) == ("gpu:8", 8, None, {})
    assert node.state == "UNKNOWN"
    assert node.weight == 1
    assert node.lineno == 55


def test_anchor_config_defines_gpu_and_debug_partitions(anchor: Config) -> None:
    gpu, debug = anchor.partitions
    assert (gpu.name, gpu.default, gpu.max_time, gpu.state) == ("gpu", True, None, "UP")
    assert gpu.nodes == [f"node{i}" for i in range(1, 9)]
    assert gpu.nodes_expr == "node[1-8]"
    assert (debug.name, debug.default, debug.max_time) == ("debug", False, 3600)
    assert debug.nodes == ["node5", "node6", "node7", "node8"]
    # Slurm's defaults as scontrol show partition prints them.
    assert (debug.min_nodes, debug.max_nodes, debug.default_time) == (0, None, None)
    assert (debug.priority_tier, debug.priority_job_factor, debug.oversubscribe) == (1, 1, "NO")
    assert debug.allow_accounts is None and debug.allow_groups is None
    assert anchor.default_partition() is gpu
    assert anchor.partition("debug") is debug
    assert anchor.partition("nope") is None


def test_anchor_config_global_settings(anchor: Config) -> None:
    assert anchor.cluster_name == "anchor"
    assert (anchor.ctld_host, anchor.ctld_addr, anchor.ctld_port) == ("vm", "127.0.0.1", 6817)
    assert anchor.settings["SlurmdPort"] == "6818"
    assert anchor.state_save_location == "/var/lib/slurm-anchor/ctld"
    assert anchor.ctld_socket == "/var/lib/slurm-anchor/ctld/musterctld.sock"
    assert anchor.auth_key_file == "/etc/slurm/muster.key"
    assert (anchor.slurmd_timeout, anchor.kill_wait, anchor.min_job_age) == (15, 30, 300)
    assert anchor.return_to_service == 1
    assert anchor.settings["GresTypes"] == "gpu"
    assert anchor.def_mem_per_cpu == 1000
    assert anchor.max_array_size == 1001
    assert anchor.max_job_count == 20000
    sched = SchedConfig.from_settings(anchor.settings)  # the scheduler's keys are its own to read
    assert (sched.scheduler_type, sched.priority_type) == ("sched/backfill", "priority/basic")
    assert anchor.settings["SelectTypeParameters"] == "CR_Core_Memory"
    assert anchor.slurm_user == "root"
    assert anchor.settings["WaitTime"] == "0"  # written Waittime: stored under Slurm's spelling
    assert anchor.settings["JobCompLoc"] == "/var/lib/slurm-anchor/log/jobcomp.txt"


def test_anchor_config_parses_without_warnings(anchor: Config) -> None:
    assert anchor.warnings == []


# --- defaults ---


def test_an_empty_config_has_slurm_and_muster_defaults() -> None:
    config = parse_config("")
    assert config.nodes == [] and config.partitions == [] and config.warnings == []
    assert config.default_partition() is None
    assert config.cluster_name == "cluster"
    assert (config.ctld_host, config.ctld_addr, config.ctld_port) == (
        "localhost",
        "127.0.0.1",
        6817,
    )
    assert config.state_save_location == "/var/spool/muster"
    assert config.ctld_socket == "/var/spool/muster/musterctld.sock"
    assert config.auth_key_file == "muster.key"
    assert config.agent_socket_dir is None
    assert config.admin_users == []
    assert (config.slurmd_timeout, config.kill_wait, config.min_job_age) == (300, 30, 300)
    assert (config.return_to_service, config.job_requeue, config.first_job_id) == (0, True, 1)
    assert (config.max_array_size, config.def_mem_per_cpu, config.slurm_user) == (1001, 0, "root")
    assert config.scheduler_parameters == {}
    assert config.get_seconds("PriorityDecayHalfLife", 7 * 86400) == 7 * 86400


def test_typed_settings_and_muster_keys() -> None:
    config = parse(
        "clustername=Big SlurmctldHost=ctl1 SlurmctldPort=7817-7820\n"
        "SlurmctldHost=ctl2(10.0.0.2)\n"
        "SchedulerParameters=bf_interval=30,bf_continue,default_queue_depth=100\n"
        "PriorityType=priority/multifactor PriorityWeightAge=1000 PriorityWeightFairshare=10000\n"
        "PriorityWeightJobSize=5 PriorityWeightPartition=7 PriorityWeightQOS=3\n"
        "PriorityMaxAge=1-0 PriorityDecayHalfLife=14-0 PriorityFavorSmall=YES\n"
        "AdminUsers=alice,bob CtldSocket=/run/muster/ctld.sock AuthKeyFile=/etc/muster/key\n"
        "AgentSocketDir=/run/muster/agents JobRequeue=0 FirstJobId=1000 DefMemPerCPU=2048\n"
    )
    assert config.cluster_name == "big"
    assert config.settings["ClusterName"] == "Big"
    assert (config.ctld_host, config.ctld_addr, config.ctld_port) == ("ctl1", "ctl1", 7817)
    assert config.ctld_hosts == ["ctl1", "ctl2(10.0.0.2)"]
    assert config.scheduler_parameters == {
        "bf_interval": "30",
        "bf_continue": "",
        "default_queue_depth": "100",
    }
    sched = SchedConfig.from_settings(config.settings)  # the scheduler's keys are its own to read
    assert sched.priority_type == "priority/multifactor"
    assert (sched.weight_age, sched.weight_fairshare, sched.weight_job_size) == (1000, 10000, 5)
    assert (sched.weight_partition, sched.weight_qos) == (7, 3)
    assert (sched.max_age, sched.favor_small) == (86400, True)
    assert config.get_seconds("PriorityDecayHalfLife", 7 * 86400) == 14 * 86400
    assert config.admin_users == ["alice", "bob"]
    assert config.ctld_socket == "/run/muster/ctld.sock"
    assert config.auth_key_file == "/etc/muster/key"
    assert config.agent_socket_dir == "/run/muster/agents"
    assert (config.job_requeue, config.first_job_id, config.def_mem_per_cpu) == (False, 1000, 2048)
    assert config.get("schedulertype") is None
    assert config.get("clusterNAME") == "Big"
    assert config.get_int("MessageTimeout", 10) == 10


def test_legacy_control_machine_names_the_controller() -> None:
    config = parse("ControlMachine=head ControlAddr=10.1.1.1")
    assert (config.ctld_host, config.ctld_addr) == ("head", "10.1.1.1")


# --- nodes ---


def test_node_ranges_expand_with_per_node_addresses_and_ports() -> None:
    config = parse(
        "NodeName=gpu[01-04] CPUs=32 RealMemory=128000 Gres=gpu:8 Feature=a100,ib "
        "NodeAddr=127.0.0.[1-4] Port=[17001-17004] State=UNKNOWN Weight=1\n"
    )
    assert [(n.name, n.addr, n.port) for n in config.nodes] == [
        ("gpu01", "127.0.0.1", 17001),
        ("gpu02", "127.0.0.2", 17002),
        ("gpu03", "127.0.0.3", 17003),
        ("gpu04", "127.0.0.4", 17004),
    ]
    assert all(n.features == ["a100", "ib"] and n.gpus == 8 and n.cpus == 32 for n in config.nodes)
    config.nodes[0].features.append("x")
    assert config.nodes[1].features == ["a100", "ib"]  # nodes share no mutable state


def test_a_single_address_or_port_applies_to_every_node() -> None:
    config = parse("SlurmdPort=7000\nNodeName=n[1-3] NodeAddr=10.0.0.9\nNodeName=m1\n")
    assert {(n.addr, n.port) for n in config.nodes[:3]} == {("10.0.0.9", 7000)}
    m1 = config.node("m1")
    assert m1 is not None and (m1.addr, m1.port) == ("m1", 7000)


def test_slurmd_port_set_after_the_nodes_still_applies() -> None:
    config = parse("NodeName=n1\nSlurmdPort=7100\n")
    assert config.nodes[0].port == 7100


def test_node_defaults_apply_to_following_lines_only() -> None:
    config = parse(
        "NodeName=early\n"
        "NodeName=DEFAULT CPUs=64 RealMemory=512000 Gres=gpu:h100:8\n"
        "NodeName=a[1-2]\n"
        "NodeName=b1 CPUs=8\n"
        "NodeName=default RealMemory=1000\n"
        "NodeName=c1\n"
    )
    by = {n.name: n for n in config.nodes}
    assert (by["early"].cpus, by["early"].real_memory, by["early"].gpus) == (1, 1, 0)
    assert (by["a1"].cpus, by["a1"].real_memory, by["a1"].gpus, by["a1"].gpu_type) == (
        64,
        512000,
        8,
        "h100",
    )
    assert (by["b1"].cpus, by["b1"].real_memory) == (8, 512000)
    assert (by["c1"].cpus, by["c1"].real_memory) == (64, 1000)


def test_cpus_default_to_the_described_topology() -> None:
    config = parse("NodeName=n1 Boards=2 SocketsPerBoard=2 CoresPerSocket=8 ThreadsPerCore=2")
    node = config.nodes[0]
    assert (node.sockets, node.cpus) == (4, 64)


@pytest.mark.parametrize(
    ("gres", "gpus", "gpu_type", "gpu_types", "others"),
    [
        ("", 0, None, {}, {}),
        ("gpu:8", 8, None, {}, {}),
        ("gpu", 1, None, {}, {}),
        ("gpu:a100:4", 4, "a100", {"a100": 4}, {}),
        ("gpu:a100:8,gpu:h100:2", 10, "a100", {"a100": 8, "h100": 2}, {}),
        ("gpu:a100:4(S:0-1),nic:2", 4, "a100", {"a100": 4}, {"nic": 2}),
        ("bandwidth:lustre:4G", 0, None, {}, {"bandwidth": 4 * 1024**3}),
        ("gpu:tesla", 1, "tesla", {"tesla": 1}, {}),
        ("gpu:1g.5gb:7", 7, "1g.5gb", {"1g.5gb": 7}, {}),  # a MIG slice type may start with a digit
    ],
)
def test_gres_strings_are_counted(
    gres: str, gpus: int, gpu_type: str | None, gpu_types: dict[str, int], others: dict[str, int]
) -> None:
    node = parse(f"NodeName=n1 Gres={gres}" if gres else "NodeName=n1").nodes[0]
    assert (node.gres, node.gpus, node.gpu_type) == (gres, gpus, gpu_type)
    assert (node.gpu_types, node.gres_counts) == (gpu_types, others)


def test_gres_missing_from_gres_types_is_warned_once_per_line() -> None:
    config = parse("GresTypes=gpu\nNodeName=n[1-4] Gres=gpu:2,nic:1\n")
    assert config.warnings == ["/etc/muster/slurm.conf:2: gres 'nic' is not listed in GresTypes"]


# --- partitions ---


def test_partition_options_are_typed() -> None:
    config = parse(
        "NodeName=n[1-4]\n"
        "PartitionName=batch Nodes=n[3-4],n1 Default=YES MaxTime=INFINITE DefaultTime=1:00:00 "
        "MaxNodes=2 MinNodes=1 State=DRAIN PriorityTier=10 PriorityJobFactor=5 "
        "AllowAccounts=ml,vision AllowGroups=ALL DenyAccounts=guests OverSubscribe=exclusive "
        "Hidden=YES GraceTime=30 DefMemPerCPU=4000 MaxMemPerNode=UNLIMITED\n"
        "PartitionName=all Nodes=ALL MaxTime=2-00:00:00 OverSubscribe=FORCE:4 Priority=3\n"
    )
    batch, everything = config.partitions
    assert batch.nodes == ["n1", "n3", "n4"]  # configuration order, not written order
    assert (batch.default, batch.max_time, batch.default_time) == (True, None, 3600)
    assert (batch.max_nodes, batch.min_nodes, batch.state) == (2, 1, "DRAIN")
    assert (batch.priority_tier, batch.priority_job_factor) == (10, 5)
    assert (batch.allow_accounts, batch.allow_groups) == (["ml", "vision"], None)
    assert batch.deny_accounts == ["guests"]
    assert (batch.oversubscribe, batch.exclusive) == ("EXCLUSIVE", True)
    assert (batch.hidden, batch.grace_time, batch.def_mem_per_cpu) == (True, 30, 4000)
    assert batch.max_mem_per_node is None
    assert everything.nodes == ["n1", "n2", "n3", "n4"]
    assert (everything.max_time, everything.oversubscribe, everything.exclusive) == (
        2 * 86400,
        "FORCE:4",
        False,
    )
    assert (everything.priority_tier, everything.priority_job_factor) == (3, 3)


def test_partition_defaults_and_nodes_defined_later() -> None:
    config = parse(
        "PartitionName=DEFAULT MaxTime=30 State=DOWN\n"
        "PartitionName=p1 Nodes=n[1-2]\n"
        "PartitionName=p2 Nodes=n2 State=UP\n"
        "NodeName=n[1-2]\n"
    )
    p1, p2 = config.partitions
    assert (p1.max_time, p1.state, p1.nodes) == (1800, "DOWN", ["n1", "n2"])
    assert (p2.max_time, p2.state, p2.nodes) == (1800, "UP", ["n2"])
    assert config.default_partition() is p1  # none says Default=YES: the first


def test_a_partition_without_nodes_is_empty() -> None:
    assert parse("PartitionName=empty").partitions[0].nodes == []


def test_several_default_partitions_warn_and_the_first_wins() -> None:
    config = parse("PartitionName=a Default=YES\nPartitionName=b Default=YES\n")
    default = config.default_partition()
    assert default is not None and default.name == "a"
    assert config.warnings == ["/etc/muster/slurm.conf: several partitions have Default=YES; 'a' is the default"]


# --- syntax ---


def test_comments_quotes_and_case() -> None:
    config = parse(
        "# a comment line\n"
        "   \n"
        "clustername=alpha   # trailing comment\n"
        'MailProg="/usr/bin/mail -s x" SlurmUser=muster\n'
        'JobCompLoc="/var/log/#jobs" Epilog=/etc/epilog\\#1\n'
        "SlurmctldLogFile = /var/log/ctld.log\n"
    )
    assert config.settings == {
        "ClusterName": "alpha",
        "MailProg": "/usr/bin/mail -s x",
        "SlurmUser": "muster",
        "JobCompLoc": "/var/log/#jobs",
        "Epilog": "/etc/epilog#1",
        "SlurmctldLogFile": "/var/log/ctld.log",
    }
    assert config.slurm_user == "muster"


def test_continuation_lines_join_and_errors_name_the_first_line() -> None:
    config = parse(
        "ClusterName=c\nNodeName=n[1-2] \\\n    CPUs=16 \\\n    RealMemory=64000\nPartitionName=p Nodes=n[1-2]\n"
    )
    assert [(n.cpus, n.real_memory, n.lineno) for n in config.nodes] == [(16, 64000, 2)] * 2
    assert config.partitions[0].lineno == 5
    message = error_of("ClusterName=c\nNodeName=n1 \\\n  CPUs=lots\n")
    assert message == "/etc/muster/slurm.conf:2: bad CPUs 'lots': expected an integer"


def test_unknown_keys_warn_include_is_skipped_and_known_keys_are_kept() -> None:
    config = parse(
        "FrobnicateLevel=3 ProctrackType=proctrack/linuxproc\n"
        "Include /etc/slurm/nodes.conf\n"
        "NodeName=n1 Colour=blue\n"
        "PartitionName=p Nodes=n1 Flavour=mint\n"
        "DownNodes=n1 State=DOWN\n"
    )
    assert config.warnings == [
        "/etc/muster/slurm.conf:1: unknown key 'FrobnicateLevel' ignored",
        "/etc/muster/slurm.conf:2: Include is not supported; '/etc/slurm/nodes.conf' ignored",
        "/etc/muster/slurm.conf:3: unknown node key 'Colour' ignored",
        "/etc/muster/slurm.conf:4: unknown partition key 'Flavour' ignored",
        "/etc/muster/slurm.conf:5: DownNodes lines are not supported; ignored",
    ]
    assert config.settings == {"ProctrackType": "proctrack/linuxproc"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ClusterName=a\nDebugLevel\n", "2: expected Key=Value, found 'DebugLevel'"),
        ('MailProg="/bin/mail\n', "1: unterminated quote in value of MailProg"),
        ('MailProg="a"b\n', "1: unexpected text after the closing quote of MailProg"),
        ("ClusterName=\n", "1: missing value for ClusterName"),
        ("ClusterName= SlurmUser=x\n", "1: missing value for ClusterName"),
        ("NodeName=n1 CPUs=0\n", "1: bad CPUs '0': expected at least 1"),
        ("NodeName=n1 RealMemory=1G\n", "1: bad RealMemory '1G': expected an integer"),
        ("NodeName=n1 Port=70000\n", "1: bad Port '70000': expected 1..65535"),
        ("NodeName=n[1-3\n", "1: bad NodeName: Invalid hostlist 'n[1-3': unbalanced '['"),
        (
            "NodeName=n[1-3] NodeAddr=10.0.0.[1-2]\n",
            "1: NodeAddr '10.0.0.[1-2]' gives 2 values for 3 nodes",
        ),
        ("NodeName=n[1-2] Port=[1-3]\n", "1: Port '[1-3]' gives 3 values for 2 nodes"),
        ("NodeName=n1\nNodeName=n[0-1]\n", "2: duplicate node 'n1' (first defined at line 1)"),
        ("NodeName=n1 State=SLEEPY\n", "1: bad node State 'SLEEPY'"),
        ("NodeName=n1 Gres=gpu:a:b\n", "1: bad Gres count in 'gpu:a:b'"),
        ("NodeName=n1\nNodeName=n2 Gres=gpu:-2\n", "2: bad Gres count in 'gpu:-2'"),
        ("NodeName=n1 Gres=gpu:1.5\n", "1: bad Gres count in 'gpu:1.5'"),
        ("NodeName=n1 Gres=gpu:a100:-1\n", "1: bad Gres count in 'gpu:a100:-1'"),
        ("NodeName=n1 Gres=gpu:x:y:2\n", "1: bad Gres 'gpu:x:y:2': expected NAME[:TYPE][:COUNT]"),
        ("ClusterName=x NodeName=n1\n", "1: NodeName must be the first key on its line"),
        ("NodeName=n1\nPartitionName=p Nodes=n[1-2]\n", "2: partition 'p' names unknown node 'n2'"),
        ("PartitionName=p MaxTime=forever\n", "1: bad MaxTime 'forever'"),
        ("PartitionName=p DefaultTime=1:2:3:4\n", "1: bad DefaultTime '1:2:3:4'"),
        ("PartitionName=p Default=maybe\n", "1: bad Default 'maybe': expected YES or NO"),
        ("PartitionName=p State=OPEN\n", "1: bad partition State 'OPEN'"),
        ("PartitionName=p OverSubscribe=SOMETIMES\n", "1: bad OverSubscribe 'SOMETIMES'"),
        ("PartitionName=p MaxNodes=lots\n", "1: bad MaxNodes 'lots': expected an integer"),
        (
            "PartitionName=p\nPartitionName=p\n",
            "2: duplicate partition 'p' (first defined at line 1)",
        ),
        ("KillWait=soon\n", "1: bad KillWait 'soon': expected an integer"),
        ("SlurmdTimeout=-5\n", "1: bad SlurmdTimeout '-5': expected at least 0"),
        ("PriorityMaxAge=7days\n", "1: bad PriorityMaxAge '7days'"),
        ("PriorityFavorSmall=perhaps\n", "1: bad PriorityFavorSmall 'perhaps'"),
        ("SlurmctldPort=6817-6000\n", "1: bad SlurmctldPort '6817-6000'"),
        ("SlurmctldHost=a(b\n", "1: bad SlurmctldHost 'a(b'"),
    ],
)
def test_malformed_lines_fail_with_path_and_line(text: str, message: str) -> None:
    assert error_of(text).startswith(f"/etc/muster/slurm.conf:{message}")


def test_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_config("nonsense")


# --- the records are usable on their own (for tests of other modules) ---


def test_records_can_be_built_directly() -> None:
    node = NodeConf("n1", cpus=8, gpus=2)
    assert (node.addr, node.hostname, node.port, node.features) == ("n1", "n1", 6818, [])
    part = PartitionConf("p", nodes=["n1"], default=True)
    config = Config(nodes=[node], partitions=[part])
    assert config.node("n1") is node and config.default_partition() is part
    assert "NodeConf(name='n1'" in repr(node)
