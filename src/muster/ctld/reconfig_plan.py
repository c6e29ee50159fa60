"""What ``scontrol reconfigure`` may change: the checks a configuration must pass, the
difference between the running configuration and a fresh one, and the verdict on it.

Pure: no file, no store, no clock. ``reconfig`` reads the file, asks ``validate`` and
``plan`` here, and applies a ``Plan`` only when it has no refusal (the whole file or
nothing).

The rules, in short (docs/operations.md says them for administrators):

* **Live:** partitions (added; changed in any key; removed when no pending or running job
  and no reservation uses them), the scheduler's and priority keys (``SchedulerType``,
  ``SchedulerParameters``, ``PriorityWeight*``, ...), timeouts and limits the controller
  reads as it goes (``SlurmdTimeout``, ``MessageTimeout``, ``KillWait``, ``MinJobAge``,
  ``MaxJobCount``, ...), accounting policy (``AccountingStorageEnforce``,
  ``TRESBillingWeights``, ``PriorityDecayHalfLife``, ...), nodes' ``Features``, ``Weight``,
  ``State`` and ``Reason``; nodes added; nodes removed or resized (CPUs, memory, GRES,
  address) when nothing runs on them.
* **Node side:** keys only ``musterd`` reads (``Prolog``, ``Epilog``, ``HealthCheck*``,
  ``TaskPlugin``, ...) are accepted; each agent applies them when it next starts.
* **Refused** (the whole file, with the reason): keys fixed for the life of musterctld
  (``RESTART_KEYS``), a node removed or resized while it runs jobs, a partition removed while
  jobs or reservations use it, and a ``SlurmdTimeout`` the running agents' heartbeats could
  not meet.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial

from muster.core.config import Config, ConfigError, NodeConf, PartitionConf
from muster.core.hostlist import compress
from muster.ctld.reset_period import parse_reset_period
from muster.ctld.tres import TresError, parse_billing_weights

__all__ = ["NODE_SIDE_KEYS", "RESTART_KEYS", "InUse", "Plan", "plan", "validate"]

# Keys that hold for the life of a musterctld, with why: a change is refused until restart.
RESTART_KEYS: dict[str, str] = {
    "ClusterName": "accounting records and associations are kept under the cluster's name",
    "StateSaveLocation": "the controller's database and files are open there",
    "SlurmctldHost": "the controller listens on that address",
    "SlurmctldAddr": "the controller listens on that address",
    "ControlMachine": "the controller listens on that address",
    "ControlAddr": "the controller listens on that address",
    "BackupController": "the controllers are set when they start",
    "SlurmctldPort": "the controller listens on that port",
    "CtldSocket": "the controller listens on that socket",
    "SlurmdPort": "the agents listen on that port",
    "AuthType": "the daemons authenticate each other with it",
    "AuthAltTypes": "the daemons authenticate each other with it",
    "AuthInfo": "the daemons authenticate each other with it",
    "AuthKeyFile": "the daemons authenticate each other with the key read at start",
    "CredType": "the daemons authenticate each other with it",
    "SlurmUser": "the controller runs as that user",
    "AccountingStorageType": "the state database is open",
    "AccountingStorageHost": "the state database is open",
    "AccountingStoragePort": "the state database is open",
    "AccountingStorageUser": "the state database is open",
    "AccountingStoragePass": "the state database is open",
    "AccountingStoragePassFile": "the state database is open",
    "AccountingStorageLoc": "the state database is open",
    "AccountingStorageURL": "the state database is open",
    "PrivateData": "the request handlers read it when musterctld starts",
    "SelectType": "resources are counted that way for the jobs already placed",
    "LogFormat": "the daemons set up their logs when they start",
}

# Keys that only musterd reads, once, when it starts. The controller pushes nothing to the
# agents on reconfigure (what a launch needs, such as KillWait, travels with each launch).
# MetricsType is read by both: the controller's /metrics follows it at once, an agent's
# when the agent restarts.
NODE_SIDE_KEYS = frozenset(
    """
    Prolog Epilog TaskProlog TaskEpilog PrologEpilogTimeout PrologFlags HealthCheckProgram
    HealthCheckInterval HealthCheckNodeState TaskPlugin TaskPluginParam GpuFaultFile
    GpuHealthCheckInterval HeartbeatInterval SlurmdSpoolDir AgentSocketDir OverTimeLimit
    SlurmdLogFile SlurmdDebug SlurmdPidFile SlurmdParameters SlurmdUser ProctrackType
    JobAcctGatherType JobAcctGatherFrequency JobAcctGatherParams
    MetricsType
    """.split()
)

# muster's own integer keys the parser does not type (read with ``Config.get_int``).
_UNTYPED_INTS = ("SchedulerInterval",)

# NodeConf attributes by what a change to them means for a node with work on it.
_SIZE = (
    "cpus",
    "boards",
    "sockets",
    "cores_per_socket",
    "threads_per_core",
    "real_memory",
    "tmp_disk",
    "gpus",
    "gpu_type",
    "gpu_types",
    "gres_counts",
)
_ADDRESS = ("addr", "hostname", "port")
_NODE_LABEL = {
    "cpus": "CPUs",
    "boards": "Boards",
    "sockets": "Sockets",
    "cores_per_socket": "CoresPerSocket",
    "threads_per_core": "ThreadsPerCore",
    "real_memory": "RealMemory",
    "tmp_disk": "TmpDisk",
    "gpus": "Gres",
    "gpu_type": "Gres",
    "gpu_types": "Gres",
    "gres_counts": "Gres",
    "addr": "NodeAddr",
    "hostname": "NodeHostname",
    "port": "Port",
}


def validate(config: Config) -> list[str]:
    """Every check musterctld makes of a configuration beyond its grammar (which
    ``parse_config`` already passed): values read only when the controller loads. One
    message per problem; empty when the configuration is good. musterctld runs the same
    checks when it starts, so reconfigure accepts exactly what a restart would."""
    problems: list[str] = []
    checks: list[Callable[[], object]] = [
        lambda: parse_reset_period(config.get("PriorityUsageResetPeriod")),
        lambda: config.max_script_size,
        lambda: config.max_submit_jobs_per_user,
        lambda: config.requeue_delay,
        *[partial(config.get_int, key, 0) for key in _UNTYPED_INTS],
    ]
    for check in checks:
        try:
            check()
        except ConfigError as exc:
            text = str(exc)
            problems.append(text if text.startswith(config.path) else f"{config.path}: {text}")
    for part in config.partitions:
        try:
            parse_billing_weights(part.params.get("TRESBillingWeights"))
        except TresError as exc:
            problems.append(f"{config.path}:{part.lineno}: partition {part.name!r}: {exc}")
    return problems


@dataclass(frozen=True, slots=True)
class InUse:
    """What the controller's memory says uses nodes and partitions now."""

    # partition -> active (pending, running, suspended) job ids
    partition_jobs: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    # node -> job ids holding resources on it
    node_jobs: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    # reservation name -> (its partition or None, its nodes)
    reservations: Mapping[str, tuple[str | None, tuple[str, ...]]] = field(default_factory=dict)


@dataclass(slots=True)
class Plan:
    """The verdict on a fresh configuration: ``diff`` (one line per changed key, as logged),
    ``refusals`` (reasons; any refusal refuses the whole file), ``node_side`` (changed keys
    the agents apply when they restart) and what the controller must do to nodes."""

    fresh: Config
    diff: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    node_side: list[str] = field(default_factory=list)
    added_nodes: list[str] = field(default_factory=list)
    removed_nodes: list[str] = field(default_factory=list)
    # nodes whose configured State/Reason changed: they take the new configured state
    restated_nodes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.refusals


def plan(running: Config, fresh: Config, use: InUse) -> Plan:
    """Compare ``fresh`` with ``running`` and decide, key by key."""
    out = Plan(fresh)
    _settings(running, fresh, out)
    _nodes(running, fresh, use, out)
    _partitions(running, fresh, use, out)
    return out


def _show(value: str | None) -> str:
    return "(null)" if value is None or value == "" else value


def _settings(running: Config, fresh: Config, out: Plan) -> None:
    keys = set(running.settings) | set(fresh.settings)
    for key in sorted(keys, key=str.lower):
        old, new = running.settings.get(key), fresh.settings.get(key)
        if old == new:
            continue
        out.diff.append(f"reconfigure: {key} {_show(old)} -> {_show(new)}")
        if key in RESTART_KEYS:
            out.refusals.append(f"{key} cannot change while musterctld runs ({RESTART_KEYS[key]}); restart it")
        elif key in NODE_SIDE_KEYS:
            out.node_side.append(key)
    if running.max_script_size != fresh.max_script_size:
        out.refusals.append(
            "SchedulerParameters max_script_size cannot change while musterctld runs "
            "(its request size limit is set when it starts); restart it"
        )
    _heartbeat_guard(running, fresh, out)


def _heartbeat_guard(running: Config, fresh: Config, out: Plan) -> None:
    """The agents beat at the interval they computed when they started (HeartbeatInterval,
    else SlurmdTimeout/5). A SlurmdTimeout shorter than two of those beats would take every
    node DOWN before its agent restarts."""
    if running.slurmd_timeout == fresh.slurmd_timeout:
        return
    beat = running.heartbeat_interval
    if fresh.slurmd_timeout < 2 * beat:
        out.refusals.append(
            f"SlurmdTimeout={fresh.slurmd_timeout} is shorter than two heartbeats of the running agents "
            f"({beat:g}s each, set when they started); restart the agents with it instead"
        )


def _node_values(node: NodeConf) -> dict[str, str]:
    values = {k: v for k, v in node.params.items() if k != "NodeName"}
    values["Port"] = str(node.port)
    return values


def _nodes(running: Config, fresh: Config, use: InUse, out: Plan) -> None:
    resv_nodes = {n: name for name, (_p, nodes) in use.reservations.items() for n in nodes}
    for old in running.nodes:
        new = fresh.node(old.name)
        busy = use.node_jobs.get(old.name, ())
        if new is None:
            out.diff.append(f"reconfigure: NodeName={old.name} removed")
            if busy:
                out.refusals.append(f"node {old.name} cannot be removed: it runs job(s) {_ids(busy)}")
            elif old.name in resv_nodes:
                out.refusals.append(f"node {old.name} cannot be removed: reservation {resv_nodes[old.name]} holds it")
            else:
                out.removed_nodes.append(old.name)
            continue
        before, after = _node_values(old), _node_values(new)
        for key in sorted(set(before) | set(after)):
            if before.get(key) != after.get(key):
                out.diff.append(
                    f"reconfigure: NodeName={old.name} {key} {_show(before.get(key))} -> {_show(after.get(key))}"
                )
        if busy:
            changed = sorted({_NODE_LABEL[a] for a in (*_SIZE, *_ADDRESS) if getattr(old, a) != getattr(new, a)})
            for label in changed:
                out.refusals.append(f"node {old.name}: {label} cannot change while it runs job(s) {_ids(busy)}")
        if (old.state, old.reason) != (new.state, new.reason):
            if busy and "DOWN" in new.state.split("+") and "DOWN" not in old.state.split("+"):
                out.refusals.append(
                    f"node {old.name}: State=DOWN while it runs job(s) {_ids(busy)}; "
                    "drain it first (State=DRAIN) or use scontrol update"
                )
            out.restated_nodes.append(old.name)
    for new in fresh.nodes:
        if running.node(new.name) is None:
            out.diff.append(f"reconfigure: NodeName={new.name} added")
            out.added_nodes.append(new.name)


def _partition_values(part: PartitionConf) -> dict[str, str]:
    values = {k: v for k, v in part.params.items() if k not in ("PartitionName", "Nodes")}
    values["Nodes"] = compress(part.nodes) if part.nodes else ""
    return values


def _partitions(running: Config, fresh: Config, use: InUse, out: Plan) -> None:
    resv_parts: dict[str, list[str]] = {}
    for name, (part, _nodes) in use.reservations.items():
        if part:
            resv_parts.setdefault(part, []).append(name)
    for old in running.partitions:
        new = fresh.partition(old.name)
        if new is None:
            out.diff.append(f"reconfigure: PartitionName={old.name} removed")
            jobs = use.partition_jobs.get(old.name, ())
            if jobs:
                out.refusals.append(f"partition {old.name} cannot be removed: job(s) {_ids(jobs)} use it")
            elif old.name in resv_parts:
                out.refusals.append(
                    f"partition {old.name} cannot be removed: reservation(s) {','.join(sorted(resv_parts[old.name]))} use it"
                )
            continue
        before, after = _partition_values(old), _partition_values(new)
        for key in sorted(set(before) | set(after)):
            if before.get(key) != after.get(key):
                out.diff.append(
                    f"reconfigure: PartitionName={old.name} {key} {_show(before.get(key))} -> {_show(after.get(key))}"
                )
    for new in fresh.partitions:
        if running.partition(new.name) is None:
            out.diff.append(f"reconfigure: PartitionName={new.name} added")


def _ids(ids: tuple[int, ...]) -> str:
    shown = ",".join(str(i) for i in sorted(ids)[:10])
    return shown + (",..." if len(ids) > 10 else "")
