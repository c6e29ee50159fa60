"""``scontrol reconfigure``: the controller re-reads its configuration file and applies it
live, whole or not at all.

The steps, in order (``Reconfigure.run``):

1. read the file and parse it (``core.config``); a file that does not parse is refused;
2. ``reconfig_plan.validate``: the checks musterctld makes when it starts;
3. ``reconfig_plan.plan``: the difference with the running configuration, key by key, and
   what may not change live (keys fixed for the life of musterctld, nodes or partitions
   still in use); any refusal refuses the whole file;
4. stage: the new nodes, their partitions, accounting's policy and the scheduler's
   settings are built aside, from the running memory, without touching it;
5. commit: nodes whose configured State changed have their admin state written to the
   store, in one transaction (a failure refuses the file; memory is untouched);
6. swap: memory takes the staged values in one synchronous step on the event loop (no
   ``await`` between 1 and 6, so no request or pass ever sees half a configuration), each
   changed key is logged (``reconfigure: PriorityWeightAge 1000 -> 2000``) and a
   scheduling pass is asked for, which sees the new partitions and weights.

The agents are not told: what they read (Prolog, Epilog, health checks, TaskPlugin, ...)
applies when each musterd restarts; what a launch needs (KillWait, the cluster's name)
travels with each launch and so follows the new file at once. docs/operations.md.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse
from starlette.routing import Route

from muster.core.config import Config, ConfigError, parse_config
from muster.core.errors import InvalidRequest, PermissionDenied, StorageError
from muster.core.topoconf import attach_topology, topology_path, wants_topology
from muster.ctld.accounting import Enforce
from muster.ctld.assoc import preserves_user_case
from muster.ctld.context import Context
from muster.ctld.identity import Identity
from muster.ctld.nodes import NodeRuntime, configured_fields
from muster.ctld.partitions import with_created
from muster.ctld.reconfig_plan import InUse, Plan, plan, validate
from muster.ctld.reset_period import parse_reset_period
from muster.ctld.state import ClusterState
from muster.ctld.tres import parse_billing_weights
from muster.sched.config import SchedConfig
from muster.sched.topology import Topology

if TYPE_CHECKING:
    from collections.abc import Callable

    from starlette.requests import Request

__all__ = ["apply_file", "apply_plan", "build_reconfig_routes", "in_use", "read_config", "reconfigure"]

log = logging.getLogger("musterctld")

REFUSED = "the configuration is refused and the running one kept"


def read_config(path: str) -> Config:
    """The file at ``path``, parsed and validated; ``InvalidRequest`` with every complaint
    when it cannot be read, does not parse or fails a check."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise InvalidRequest(f"Unable to read {path}: {e.strerror}") from None
    try:
        fresh = parse_config(text, path)
    except ConfigError as e:
        raise InvalidRequest(f"{REFUSED}: {e}") from None
    problems = validate(fresh)
    if problems:
        raise InvalidRequest(f"{REFUSED}: {'; '.join(problems)}")
    try:
        read_topology(fresh, path)
    except ConfigError as e:
        raise InvalidRequest(f"{REFUSED}: {e}") from None
    return fresh


def read_topology(config: Config, path: str) -> None:
    """topology.conf beside the configuration file, when TopologyPlugin wants one
    (``core.topoconf.attach_topology``); ``ConfigError`` when it is missing or bad."""
    if not wants_topology(config):
        return
    where = topology_path(path)
    try:
        with open(where, encoding="utf-8") as f:
            text: str | None = f.read()
    except FileNotFoundError:
        text = None
    attach_topology(config, text, where)


def in_use(ctl: ClusterState) -> InUse:
    """Which jobs use each partition and node, and what reservations hold, from memory."""
    parts: dict[str, list[int]] = {}
    for job in ctl.jobs.values():
        if job.state.is_terminal:
            continue
        for name in {job.partition, *job.spec.partitions} - {""}:
            parts.setdefault(name, []).append(job.job_id)
    nodes = {name: tuple(ctl.job_ids_on(name)) for name, node in ctl.nodes.items() if node.allocs}
    resv = {r.name: (r.partition, tuple(r.nodes)) for r in ctl.reservations.values()}
    return InUse({k: tuple(sorted(v)) for k, v in parts.items()}, nodes, resv)


@dataclass(slots=True)
class _Staged:
    """Everything memory takes at the swap, built before it."""

    nodes: dict[str, NodeRuntime]
    node_values: dict[str, dict[str, Any]] = field(default_factory=dict)
    admin: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> persistent()
    accounting: dict[str, Any] = field(default_factory=dict)


_ADMIN_KEYS = ("admin_down", "drain", "reason", "reason_time", "reason_user")


def _stage(ctl: ClusterState, p: Plan, now: float) -> _Staged:
    fresh = p.fresh
    part_of: dict[str, list[str]] = {}
    for part in fresh.partitions:
        for n in part.nodes:
            part_of.setdefault(n, []).append(part.name)
    next_index = max((n.index for n in ctl.nodes.values()), default=-1) + 1
    saved = ctl.store.load_nodes() if p.added_nodes else {}
    staged = _Staged(nodes={})
    for nc in fresh.nodes:
        values = configured_fields(nc, part_of.get(nc.name, []))
        node = ctl.nodes.get(nc.name)
        if node is None:  # added: unknown until its agent registers
            node = NodeRuntime(name=nc.name, index=next_index, **values)
            next_index += 1
            for k, v in saved.get(nc.name, {}).items():
                setattr(node, k, v)
        else:
            staged.node_values[nc.name] = values
        staged.nodes[nc.name] = node
        if nc.name in p.restated_nodes or (nc.name in p.added_nodes and nc.name not in saved):
            before = ctl.config.node(nc.name)
            was = before.state if before is not None else "UNKNOWN"
            admin = _configured_admin(node, was, nc.state, nc.reason, ctl.config.slurm_user or "root", now)
            if admin is not None:
                staged.admin[nc.name] = admin
    staged.accounting = {
        "enforce": Enforce.parse(fresh.get("AccountingStorageEnforce")),
        "half_life": fresh.get_seconds("PriorityDecayHalfLife", 7 * 86400),
        "reset_period": parse_reset_period(fresh.get("PriorityUsageResetPeriod")),
        "max_tres": "MAX_TRES" in (fresh.get("PriorityFlags") or "").upper(),
        "weights": {
            part.name: parse_billing_weights(part.params.get("TRESBillingWeights")) for part in fresh.partitions
        },
        "sched_config": SchedConfig.from_settings(dict(fresh.settings)),
    }
    return staged


def _configured_admin(
    node: NodeRuntime, was: str, state: str, reason: str | None, user: str, now: float
) -> dict[str, Any] | None:
    """The admin state a node takes when its configured State goes from ``was`` to
    ``state``: DOWN or DRAIN set it; another state lifts a DOWN or DRAIN the file itself
    set before (an administrator's own drain, given with scontrol while the file said
    nothing of it, is lifted only by scontrol). None when nothing changes."""
    words, before = set(state.upper().split("+")), set(was.upper().split("+"))
    if words & {"DOWN", "DRAIN"}:
        wanted = {
            "admin_down": "DOWN" in words,
            "drain": "DRAIN" in words,
            "reason": reason or "reconfigure",
            "reason_time": now,
            "reason_user": user,
        }
    elif before & {"DOWN", "DRAIN"} and (node.admin_down or node.drain):
        wanted = {"admin_down": False, "drain": False, "reason": "", "reason_time": None, "reason_user": ""}
    else:
        return None
    current = node.persistent()
    same = all(current[k] == wanted[k] for k in ("admin_down", "drain", "reason"))
    return None if same else wanted


def _swap(ctl: ClusterState, p: Plan, staged: _Staged) -> None:
    """Memory takes the staged configuration. Nothing here can fail half-way: plain
    assignments of values built and checked before."""
    for name, values in staged.node_values.items():
        node = ctl.nodes[name]
        for k, v in values.items():
            setattr(node, k, v)
    for name, admin in staged.admin.items():
        for k in _ADMIN_KEYS:
            setattr(staged.nodes[name], k, admin[k])
    ctl.nodes = staged.nodes
    ctl.config = p.fresh
    fresh_topology = p.fresh.topology
    ctl.topology = Topology(fresh_topology, [n.name for n in p.fresh.nodes]) if fresh_topology is not None else None
    acct = ctl.accounting
    if acct is not None:
        values = staged.accounting
        acct.config = p.fresh
        acct.db.preserve_case_user = preserves_user_case(p.fresh.get("DbdParameters"))
        acct.enforce = values["enforce"]
        acct.usage.decay_to(ctl.clock.now())  # what decayed so far, at the old half-life
        half_life = values["half_life"]
        acct.usage.half_life = half_life if half_life and half_life > 0 else None
        acct.reset_period = values["reset_period"]
        acct.max_tres = values["max_tres"]
        acct.weights = values["weights"]
        acct.sched_config = values["sched_config"]


def reconfigure(ctl: ClusterState) -> Plan:
    """Read ``ctl``'s configuration file again and apply it live, whole or not at all,
    with the partitions ``scontrol create partition`` added (``ctld.partitions``).
    Returns the applied ``Plan``; raises ``InvalidRequest`` (memory untouched) when the
    file is refused, ``StorageError`` when the nodes' new states could not be committed."""
    fresh = with_created(read_config(ctl.config.path), ctl.store)
    problems = validate(fresh)
    if problems:
        raise InvalidRequest(f"{REFUSED}: {'; '.join(problems)}")
    p = plan(ctl.config, fresh, in_use(ctl))
    if not p.ok:
        for line in p.refusals:
            log.warning("reconfigure refused: %s", line)
        raise InvalidRequest(f"{REFUSED}: {'; '.join(p.refusals)}")
    return apply_plan(ctl, p)


def apply_plan(ctl: ClusterState, p: Plan) -> Plan:
    """Apply a ``Plan`` without refusals to ``ctl``'s memory (stage, commit the nodes'
    admin states, swap) and log what changed; ``StorageError`` leaves memory untouched."""
    now = ctl.clock.now()
    staged = _stage(ctl, p, now)
    if staged.admin:
        try:
            ctl.store.put_nodes(staged.admin)
        except StorageError as exc:
            log.error("reconfigure refused: node states not committed: %s", exc)
            raise
    _swap(ctl, p, staged)
    for warning in p.fresh.warnings:
        log.warning("%s", warning)
    for line in p.diff:
        log.info("%s", line)
    if p.node_side:
        log.info(
            "reconfigure: %s: read by each musterd when it starts; restart the agents to apply",
            ", ".join(p.node_side),
        )
    if not p.diff:
        log.info("reconfigure: %s unchanged", ctl.config.path)
    return p


def apply_file(ctx: Context) -> Plan:
    """``reconfigure`` the controller of ``ctx`` and hand the applied file to its loops:
    what ``scontrol reconfigure`` and SIGHUP both do (the same refusals, the same log)."""
    applied = reconfigure(ctx.controller)
    ctx.use_config(applied.fresh)
    ctx.kick()
    return applied


def build_reconfig_routes(
    ctx: Context,
    caller: Callable[[Request], Identity],
    handler: Callable[[Any], Any],
) -> list[Route]:
    @handler
    async def reconfig(request: Request) -> JSONResponse:
        who = caller(request)
        if not who.admin:
            raise PermissionDenied("Access/permission denied")
        # Synchronous from here to the swap: no other request or pass runs in between.
        applied = apply_file(ctx)
        return JSONResponse({"changed": applied.diff, "node_side": applied.node_side})

    return [Route("/v1/reconfigure", reconfig, methods=["POST"])]
