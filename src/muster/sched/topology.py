"""Topology-aware placement: which fitting nodes a job gets when the cluster has a
network topology (topology.conf: ``topology/tree`` switches or ``topology/block``
blocks). Pure: built once from a ``core.topoconf.TopologyConf``, then asked per job.

Words. A *unit* is a leaf switch (tree) or a base block (block): the nodes that talk
best to one another. A *group* is a set of units one level up or more: a switch above
leaves (its level is one more than its highest child's), or an aggregated block (``2^k``
consecutive base blocks, aligned, for each size in BlockSizes). The units themselves are
the groups of level 0.

Placement (``Topology.pick``), given the nodes that fit the job now (or at a planned
start) and how many it needs:

1. the group that can hold the job whole, at the lowest level (best fit: the lowest
   switch, the smallest block level); among equals the one left with the fewest fitting
   nodes, then the first in topology order. No group can hold it: the whole cluster.
2. inside it, top down: a child that can hold what is left whole (the one left with the
   fewest), else the child with the most fitting nodes entirely, and again, so the job
   spans as few units as it can there;
3. inside a unit, the nodes best fit first (``select.fit_key``: weight, then what is left
   free), then topology order.

Node Weight comes before all of it: when the lightest nodes that fit can hold the job,
the topology chooses among them alone; when they cannot, the job takes them all and the
topology places the rest among the next weight.

The job's nodes come back in topology order (``rank``): units in the order the file
walks them (depth first from each top switch, children in their listed order; blocks in
file order), nodes in their listed order. That is the order of SLURM_NODEID.

Per-job asks (``TopoAsk``): ``--switches=N`` while the job may still wait for it (a unit
count the allocation must not exceed; when step 1-2 spans more, the N units with the
most fitting nodes are tried); ``--segment=S`` (block): each unit counts only whole
segments of S of its fitting nodes, and gives whole segments; ``--exclusive=topo``: a
unit counts only when every node of it is free, and the pass keeps the rest of the
units it uses idle while the job runs or is planned (``fence``). Nodes the file leaves out
form one unit of their own, outside every group.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from muster.core.job import Job
from muster.core.topoconf import TopologyConf

__all__ = ["Group", "TopoAsk", "Topology", "topo_ask"]

FitKey = tuple[int, int, int, int]


class _Node(Protocol):
    # what placement reads of a node (``profile.NodeProfile`` has it; this module does
    # not import it, so that the snapshot can name a Topology without a cycle)
    name: str
    index: int


N = TypeVar("N", bound=_Node)


@dataclass(frozen=True, slots=True)
class TopoAsk:
    """What one job asks of the topology: at most ``max_units`` leaf switches (0: any),
    nodes in segments of ``segment`` inside one block (0: none), only units whose every
    node is free (``whole_units``: --exclusive=topo; the rest of them stays idle)."""

    max_units: int = 0
    segment: int = 0
    whole_units: bool = False


def topo_ask(job: Job, now: float, topology: Topology | None, switch_wait: int) -> TopoAsk | None:
    """What ``job`` asks of the topology at ``now``: its --switches count until it has
    waited --switches' time (else ``switch_wait``, max_switch_wait) since it became
    eligible; its --segment size under topology/block; --exclusive=topo. None when it
    asks nothing, and always without a topology (Slurm ignores them then)."""
    if topology is None:
        return None
    spec = job.spec
    max_units = 0
    if spec.switches:
        wait = spec.switch_wait if spec.switch_wait is not None else switch_wait
        since = job.eligible_time if job.eligible_time is not None else job.submit_time
        if now < since + wait:
            max_units = spec.switches
    segment = (spec.segment or 0) if topology.kind == "block" else 0
    if not max_units and segment <= 1 and not spec.exclusive_topo:
        return None
    return TopoAsk(max_units, segment, spec.exclusive_topo)


@dataclass(slots=True)
class Group:
    name: str
    level: int
    units: tuple[int, ...]  # unit indices, in topology order
    children: list[Group]


class Topology:
    """The tree or the blocks, as placement reads them."""

    __slots__ = ("kind", "unit_names", "unit_nodes", "unit_of", "rank", "groups", "roots", "units", "conf", "levels")

    def __init__(self, conf: TopologyConf, node_order: list[str] | None = None) -> None:
        self.conf = conf
        self.kind = "block" if conf.blocks else "tree"
        self.unit_names: list[str] = []
        self.unit_nodes: list[tuple[str, ...]] = []
        self.unit_of: dict[str, int] = {}
        self.rank: dict[str, int] = {}
        self.units: list[Group] = []
        self.groups: list[Group] = []  # every group above level 0
        self.roots: list[Group] = []
        self.levels: dict[str, int] = {}  # switch or block name -> level
        if self.kind == "tree":
            self._tree(conf)
        else:
            self._blocks(conf)
        if node_order is not None:
            for name in node_order:  # nodes the file leaves out: after the others
                if name not in self.rank:
                    self.rank[name] = len(self.rank)

    # -- building -------------------------------------------------------------------
    def _unit(self, name: str, nodes: tuple[str, ...]) -> Group:
        u = len(self.unit_names)
        self.unit_names.append(name)
        self.unit_nodes.append(nodes)
        for n in nodes:
            self.unit_of[n] = u
            self.rank[n] = len(self.rank)
        g = Group(name, 0, (u,), [])
        self.units.append(g)
        self.levels[name] = 0
        return g

    def _tree(self, conf: TopologyConf) -> None:
        by_name = {s.name: s for s in conf.switches}
        children = {c for s in conf.switches for c in s.switches}
        made: dict[str, Group] = {}

        def build(name: str) -> Group:
            if name in made:
                return made[name]
            s = by_name[name]
            if s.nodes or not s.switches:
                g = self._unit(name, s.nodes)
            else:
                kids = [build(c) for c in s.switches]
                level = 1 + max(k.level for k in kids)
                g = Group(name, level, tuple(u for k in kids for u in k.units), kids)
                self.groups.append(g)
                self.levels[name] = level
            made[name] = g
            return g

        self.roots = [build(s.name) for s in conf.switches if s.name not in children]

    def _blocks(self, conf: TopologyConf) -> None:
        base = conf.block_sizes[0] if conf.block_sizes else min(len(b.nodes) for b in conf.blocks)
        units = [self._unit(b.name, b.nodes) for b in conf.blocks if len(b.nodes) >= base]
        for b in conf.blocks:
            if len(b.nodes) < base:  # too small for the base size: unused, as in Slurm
                self.levels[b.name] = -1
        if conf.block_sizes:
            factors = [size // base for size in conf.block_sizes[1:]]
        else:
            factors = []
            f = 2
            while f <= len(units):
                factors.append(f)
                f *= 2
        below = units
        left_over: list[Group] = []  # blocks past the last whole aggregate of a level
        prev = 1
        for level, factor in enumerate(factors, start=1):
            step = factor // prev
            above: list[Group] = []
            whole = len(below) - len(below) % step
            for i in range(0, whole, step):
                kids = below[i : i + step]
                g = Group(f"{kids[0].name}-{kids[-1].name}", level, tuple(u for k in kids for u in k.units), list(kids))
                above.append(g)
                self.groups.append(g)
            if not above:
                break
            left_over = below[whole:] + left_over  # an incomplete aggregate is no block of this size
            below, prev = above, factor
        self.roots = below + left_over

    def unit_name(self, node: str) -> str | None:
        u = self.unit_of.get(node)
        return None if u is None else self.unit_names[u]

    def fence(self, nodes: list[str]) -> list[str]:
        """The other nodes of the units ``nodes`` touch: what --exclusive=topo keeps idle."""
        mine = set(nodes)
        units = sorted({self.unit_of[n] for n in nodes if n in self.unit_of})
        return [n for u in units for n in self.unit_nodes[u] if n not in mine]

    def units_of(self, nodes: list[str]) -> int:
        """How many units (leaf switches or base blocks) ``nodes`` span; nodes outside
        the topology count as one unit together."""
        return len({self.unit_of.get(n, -1) for n in nodes})

    # -- placement ------------------------------------------------------------------
    def pick(
        self,
        fitting: list[tuple[FitKey, N]],
        count: int,
        required: frozenset[str],
        ask: TopoAsk | None = None,
    ) -> list[N] | None:
        """``count`` nodes among ``fitting``, in topology order; None when ``ask``
        cannot be met with them (the caller has checked there are enough otherwise)."""
        rank = self.rank
        chosen: list[N] = []
        if required:
            chosen = [n for _, n in fitting if n.name in required]
            fitting = [(k, n) for k, n in fitting if n.name not in required]
        left = count - len(chosen)
        if left > 0:
            weights = sorted({k[0] for k, _ in fitting})
            # Lower Weight first, as the admin asked: lighter tiers are taken whole while
            # they cannot hold the rest; the topology places the rest within the next one.
            spilled = False
            for w in weights:
                tier = fitting if len(weights) == 1 else [(k, n) for k, n in fitting if k[0] == w]
                need = count - len(chosen)
                if len(tier) < need:
                    chosen.extend(n for _, n in tier)
                    spilled = True
                    continue
                rest = self._place(tier, need, None if spilled else ask)
                if rest is None:
                    return None
                chosen.extend(rest)
                break
            else:
                return None
            if spilled and ask is not None and not self._meets(chosen, ask):
                return None
        return sorted(chosen, key=lambda n: rank.get(n.name, n.index))

    def _meets(self, nodes: list[N], ask: TopoAsk) -> bool:
        """Whether ``nodes`` span at most ``ask.max_units`` units and hold whole segments."""
        per: dict[int, int] = {}
        for n in nodes:
            u = self.unit_of.get(n.name, -1)
            per[u] = per.get(u, 0) + 1
        if ask.max_units and len(per) > ask.max_units:
            return False
        if ask.whole_units and any(u < 0 or k < len(self.unit_nodes[u]) for u, k in per.items()):
            return False
        return ask.segment <= 1 or all(k % ask.segment == 0 for k in per.values())

    def _place(self, fitting: list[tuple[FitKey, N]], left: int, ask: TopoAsk | None) -> list[N] | None:
        rank = self.rank
        segment = ask.segment if ask is not None else 0
        max_units = ask.max_units if ask is not None else 0
        per_unit: dict[int, list[N]] = {}
        outside = len(self.unit_names)  # nodes in no unit: one of their own
        for _, node in sorted(fitting, key=lambda kn: (kn[0], rank.get(kn[1].name, 0))):
            per_unit.setdefault(self.unit_of.get(node.name, outside), []).append(node)
        if ask is not None and ask.whole_units:  # a unit counts only when all of it is free
            for u, nodes in per_unit.items():
                if u == outside or len(nodes) < len(self.unit_nodes[u]):
                    nodes.clear()
        if segment > 1:
            for nodes in per_unit.values():
                del nodes[len(nodes) - len(nodes) % segment :]
        counts = {u: len(nodes) for u, nodes in per_unit.items() if nodes}
        if sum(counts.values()) < left:
            return None
        units = self._choose(counts, left, outside)
        if max_units and len(units) > max_units:
            fewest = _fewest_units(counts, left, max_units)
            if fewest is None:
                return None
            units = fewest
        return [node for u, k in units for node in per_unit[u][:k]]

    def _choose(self, counts: dict[int, int], left: int, outside: int) -> list[tuple[int, int]]:
        """(unit, how many of its nodes) for ``left`` nodes: steps 1 and 2."""

        # Each group's fitting nodes, bottom up: ``groups`` lists children before parents.
        sums: dict[int, int] = {id(g): counts.get(g.units[0], 0) for g in self.units}
        for g in self.groups:
            sums[id(g)] = sum(sums[id(k)] for k in g.children)

        def total(g: Group) -> int:
            t = sums.get(id(g))
            return t if t is not None else sum(counts.get(u, 0) for u in g.units)

        best: tuple[int, int, int] | None = None
        home: Group | None = None
        for g in (*self.units, *self.groups):
            t = sums[id(g)]
            if t >= left:
                key = (g.level, t - left, g.units[0])
                if best is None or key < best:
                    best, home = key, g
        if home is None:  # span the roots, and the nodes outside the topology last
            extra = [Group("", 0, (outside,), [])] if counts.get(outside) else []
            home = Group("", 99, tuple(counts), [*self.roots, *extra])
        out: list[tuple[int, int]] = []
        self._fill(home, left, total, out)
        return out

    def _fill(self, g: Group, left: int, size: Callable[[Group], int], out: list[tuple[int, int]]) -> None:
        if not g.children:
            out.append((g.units[0], left))
            return
        kids = [k for k in g.children if size(k) > 0]
        while left > 0:
            whole = [k for k in kids if size(k) >= left]
            if whole:
                k = min(whole, key=lambda k: (size(k) - left, k.units[0]))
                self._fill(k, left, size, out)
                return
            k = max(kids, key=lambda k: (size(k), -k.units[0]))
            kids.remove(k)
            n = size(k)
            self._fill(k, n, size, out)
            left -= n


def _fewest_units(counts: dict[int, int], left: int, max_units: int) -> list[tuple[int, int]] | None:
    """At most ``max_units`` units holding ``left`` nodes, the fullest first and the
    last one best fit; None when even the fullest ``max_units`` cannot."""
    order = sorted(counts, key=lambda u: (-counts[u], u))
    if sum(counts[u] for u in order[:max_units]) < left:
        return None
    out: list[tuple[int, int]] = []
    pool = list(order)
    while left > 0:
        whole = [u for u in pool if counts[u] >= left]
        if whole:
            u = min(whole, key=lambda u: (counts[u], u))
            out.append((u, left))
            return out
        u = pool.pop(0)
        out.append((u, counts[u]))
        left -= counts[u]
    return out
