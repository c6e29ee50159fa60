"""topology.conf: the network topology, parsed purely from text (Slurm's grammar).

``parse_topology(text, path, nodes)`` returns a ``TopologyConf`` or raises ``ConfigError``
(``<path>:<line>: <what is wrong>``). ``nodes`` are the node names slurm.conf defines, in
its order: every name the file gives must be one of them. It reads no file; the caller
reads ``topology.conf`` from the directory of slurm.conf.

Two kinds of file, as Slurm's two plugins read them (one kind per file):

* ``topology/tree``: ``SwitchName=NAME Nodes=HOSTLIST`` defines a leaf switch and the
  nodes under it; ``SwitchName=NAME Switches=LIST`` a switch above other switches (any
  depth); ``LinkSpeed=N`` is optional and only shown. A node hangs from at most one leaf,
  a switch from at most one parent, and no switch is its own ancestor.
* ``topology/block``: ``BlockName=NAME Nodes=HOSTLIST`` defines a base block (a node in
  at most one); ``BlockSizes=N[,N...]`` the planning base block size and the sizes of the
  aggregated levels above it, each a power-of-two multiple of the one before. Without it
  the base size is the smallest block's node count and every power-of-two aggregation of
  consecutive blocks is a level.

Keys are case-insensitive; ``#`` starts a comment; a trailing backslash joins lines.
Nodes that the file leaves out are listed in ``warnings`` (Slurm wants every node in the
network; muster lets them run jobs of their own).
"""

from __future__ import annotations

import os

from muster.core.config import _logical_lines, _tokenize
from muster.core.conftypes import BlockConf, Config, ConfigError, SwitchConf, TopologyConf
from muster.core.hostlist import HostlistError, compress, expand

__all__ = [
    "BlockConf",
    "SwitchConf",
    "TopologyConf",
    "attach_topology",
    "parse_topology",
    "show_topology",
    "topology_addr",
    "topology_path",
    "wants_topology",
]

_SWITCH_KEYS = {"switchname": "SwitchName", "switches": "Switches", "nodes": "Nodes", "linkspeed": "LinkSpeed"}
_BLOCK_KEYS = {"blockname": "BlockName", "nodes": "Nodes"}


def parse_topology(text: str, path: str = "topology.conf", nodes: list[str] | None = None) -> TopologyConf:
    """Parse topology.conf ``text``; ``nodes`` (slurm.conf's node names) checks every
    name the file gives. Raises ``ConfigError`` on the first error."""
    known = None if nodes is None else set(nodes)
    switches: list[SwitchConf] = []
    blocks: list[BlockConf] = []
    sizes: tuple[int, ...] = ()
    sizes_line = 0
    for lineno, line in _logical_lines(text):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        pairs = _tokenize(line, where)
        first = pairs[0][0].lower()
        if first == "switchname":
            switches.append(_switch(pairs, where, lineno, known))
        elif first == "blockname":
            blocks.append(_block(pairs, where, lineno, known))
        elif first == "blocksizes":
            if len(pairs) > 1:
                raise ConfigError(f"{where}: BlockSizes must be alone on its line")
            sizes, sizes_line = _sizes(pairs[0][1], where), lineno
        else:
            raise ConfigError(f"{where}: unknown key {pairs[0][0]!r}: expected SwitchName, BlockName or BlockSizes")
    if switches and (blocks or sizes):
        at = blocks[0].lineno if blocks else sizes_line
        raise ConfigError(f"{path}:{at}: a topology has switches (topology/tree) or blocks (topology/block), not both")
    if sizes and not blocks:
        raise ConfigError(f"{path}:{sizes_line}: BlockSizes given but no BlockName line")
    if not switches and not blocks:
        raise ConfigError(f"{path}: no SwitchName or BlockName line: the topology is empty")
    warnings: list[str] = []
    if switches:
        _check_tree(switches, path)
        placed = [n for s in switches for n in s.nodes]
    else:
        placed = _check_blocks(blocks, sizes, path, warnings)
    if nodes is not None:
        seen = set(placed)
        left = [n for n in nodes if n not in seen]
        if left:
            warnings.append(f"{path}: nodes {compress(left)} are in no {'block' if blocks else 'switch'}")
    return TopologyConf(path, tuple(switches), tuple(blocks), sizes, tuple(warnings))


def _params(pairs: list[tuple[str, str]], table: dict[str, str], where: str, kind: str) -> dict[str, str]:
    params: dict[str, str] = {}
    for key, value in pairs:
        canon = table.get(key.lower())
        if canon is None:
            raise ConfigError(f"{where}: unknown {kind} key {key!r}")
        if canon in params:
            raise ConfigError(f"{where}: {canon} given twice")
        params[canon] = value
    return params


def _names(expr: str, key: str, where: str) -> tuple[str, ...]:
    try:
        names = expand(expr)
    except HostlistError as exc:
        raise ConfigError(f"{where}: bad {key}: {exc}") from None
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: {key} {expr!r} names a host twice")
    return tuple(names)


def _known(names: tuple[str, ...], known: set[str] | None, what: str, where: str) -> None:
    if known is None:
        return
    for name in names:
        if name not in known:
            raise ConfigError(f"{where}: {what} names unknown node {name!r}")


def _switch(pairs: list[tuple[str, str]], where: str, lineno: int, known: set[str] | None) -> SwitchConf:
    p = _params(pairs, _SWITCH_KEYS, where, "switch")
    name = p["SwitchName"]
    if "Nodes" in p and "Switches" in p:
        raise ConfigError(f"{where}: switch {name!r} has both Nodes and Switches: a switch connects one or the other")
    if "Nodes" not in p and "Switches" not in p:
        raise ConfigError(f"{where}: switch {name!r} connects nothing: give Nodes= or Switches=")
    speed = 1
    if "LinkSpeed" in p:
        try:
            speed = int(p["LinkSpeed"])
        except ValueError:
            speed = -1
        if speed < 1:
            raise ConfigError(f"{where}: bad LinkSpeed {p['LinkSpeed']!r}: expected a positive integer")
    nodes = _names(p["Nodes"], "Nodes", where) if "Nodes" in p else ()
    _known(nodes, known, f"switch {name!r}", where)
    children = _names(p["Switches"], "Switches", where) if "Switches" in p else ()
    return SwitchConf(name, nodes, children, speed, lineno)


def _block(pairs: list[tuple[str, str]], where: str, lineno: int, known: set[str] | None) -> BlockConf:
    p = _params(pairs, _BLOCK_KEYS, where, "block")
    name = p["BlockName"]
    if "Nodes" not in p:
        raise ConfigError(f"{where}: block {name!r} has no Nodes=")
    nodes = _names(p["Nodes"], "Nodes", where)
    _known(nodes, known, f"block {name!r}", where)
    return BlockConf(name, nodes, lineno)


def _sizes(value: str, where: str) -> tuple[int, ...]:
    out: list[int] = []
    for item in value.split(","):
        try:
            size = int(item)
        except ValueError:
            size = 0
        if size < 1:
            raise ConfigError(f"{where}: bad BlockSizes {value!r}: expected positive integers")
        if out:
            ratio, rest = divmod(size, out[-1])
            if rest or ratio < 2 or ratio & (ratio - 1):
                raise ConfigError(
                    f"{where}: bad BlockSizes {value!r}: each size must be the one before it times a power of two"
                )
        out.append(size)
    return tuple(out)


def _check_tree(switches: list[SwitchConf], path: str) -> None:
    by_name: dict[str, SwitchConf] = {}
    for s in switches:
        if s.name in by_name:
            first = by_name[s.name].lineno
            raise ConfigError(f"{path}:{s.lineno}: duplicate switch {s.name!r} (first defined at line {first})")
        by_name[s.name] = s
    leaf_of: dict[str, str] = {}
    parent: dict[str, str] = {}
    for s in switches:
        for n in s.nodes:
            if n in leaf_of:
                raise ConfigError(
                    f"{path}:{s.lineno}: node {n!r} is under two leaf switches: {leaf_of[n]!r} and {s.name!r}"
                )
            leaf_of[n] = s.name
        for child in s.switches:
            if child not in by_name:
                raise ConfigError(f"{path}:{s.lineno}: switch {s.name!r} names unknown switch {child!r}")
            if child in parent:
                raise ConfigError(
                    f"{path}:{s.lineno}: switch {child!r} has two parents: {parent[child]!r} and {s.name!r}"
                )
            parent[child] = s.name
    for s in switches:  # follow the parents up: a loop comes back to where it started
        chain = [s.name]
        up = parent.get(s.name)
        while up is not None:
            chain.append(up)
            if up == s.name:
                raise ConfigError(f"{path}:{s.lineno}: switch loop: {' -> '.join(chain)}")
            up = parent.get(up)
            if len(chain) > len(switches) + 1:
                break  # a loop above, not through, this switch: reported from one of its members


def _check_blocks(blocks: list[BlockConf], sizes: tuple[int, ...], path: str, warnings: list[str]) -> list[str]:
    seen: dict[str, str] = {}
    names: dict[str, int] = {}
    placed: list[str] = []
    for b in blocks:
        if b.name in names:
            raise ConfigError(f"{path}:{b.lineno}: duplicate block {b.name!r} (first defined at line {names[b.name]})")
        names[b.name] = b.lineno
        for n in b.nodes:
            if n in seen:
                raise ConfigError(f"{path}:{b.lineno}: node {n!r} is in two blocks: {seen[n]!r} and {b.name!r}")
            seen[n] = b.name
            placed.append(n)
    if sizes:
        small = [b.name for b in blocks if len(b.nodes) < sizes[0]]
        if small:
            warnings.append(
                f"{path}: blocks {', '.join(small)} have fewer nodes than the base block size {sizes[0]}: unused"
            )
    return placed


# --- beside slurm.conf ----------------------------------------------------------------------

PLUGINS = ("topology/tree", "topology/block")


def topology_path(conf_path: str) -> str:
    """Where topology.conf lives: the directory of slurm.conf, as in Slurm."""
    return os.path.join(os.path.dirname(os.path.abspath(conf_path)), "topology.conf")


def wants_topology(config: Config) -> bool:
    """Whether TopologyPlugin names a plugin that reads topology.conf (refusing an
    unknown one: Slurm would not start)."""
    plugin = (config.get("TopologyPlugin") or "topology/none").strip().lower()
    if plugin in ("topology/none", "topology/default", "topology/flat", "(null)", ""):
        return False
    if plugin not in PLUGINS:
        raise ConfigError(
            f"{config.path}: bad TopologyPlugin {plugin!r}: expected topology/tree, topology/block or topology/flat"
        )
    return True


def attach_topology(config: Config, text: str | None, path: str) -> None:
    """Parse topology.conf ``text`` (None: the file is missing) for ``config`` when its
    TopologyPlugin wants one, and set ``config.topology``; its warnings join the
    config's. Raises ``ConfigError`` when the file is missing, malformed or of the other
    plugin's kind."""
    if not wants_topology(config):
        return
    plugin = (config.get("TopologyPlugin") or "").strip().lower()
    if text is None:
        raise ConfigError(f"{path}: cannot read topology.conf, which TopologyPlugin={plugin} needs")
    topo = parse_topology(text, path, [n.name for n in config.nodes])
    if topo.plugin != plugin:
        kind = "blocks" if topo.blocks else "switches"
        raise ConfigError(f"{path}: TopologyPlugin={plugin} but this file defines {kind}")
    config.topology = topo
    config.warnings.extend(topo.warnings)


def show_topology(topo: TopologyConf, target: str | None = None) -> list[str]:
    """``scontrol show topology [NAME]``: one line per switch (its level, link speed,
    every node under it, and its child switches) or per block and aggregated block;
    NAME keeps the lines of that switch or block, or of those holding that node."""
    lines: list[tuple[str, str, set[str]]] = []  # (name, line, nodes)
    if topo.switches:
        by_name = {s.name: s for s in topo.switches}
        level: dict[str, int] = {}
        under: dict[str, list[str]] = {}

        def walk(name: str) -> tuple[int, list[str]]:
            if name not in level:
                s = by_name[name]
                kids = [walk(c) for c in s.switches]
                level[name] = 1 + max(k[0] for k in kids) if kids else 0
                under[name] = list(s.nodes) + [n for k in kids for n in k[1]]
            return level[name], under[name]

        for s in topo.switches:
            lvl, nodes = walk(s.name)
            line = f"SwitchName={s.name} Level={lvl} LinkSpeed={s.link_speed} Nodes={compress(nodes)}"
            if s.switches:
                line += f" Switches={compress(s.switches)}"
            lines.append((s.name, line, set(nodes)))
    else:
        base = topo.block_sizes[0] if topo.block_sizes else min(len(b.nodes) for b in topo.blocks)
        usable = [b for b in topo.blocks if len(b.nodes) >= base]
        for i, b in enumerate(usable):
            line = f"BlockName={b.name} BlockIndex={i} Nodes={compress(b.nodes)} BlockSize={base}"
            lines.append((b.name, line, set(b.nodes)))
        sizes = topo.block_sizes[1:] if topo.block_sizes else _default_sizes(base, len(usable))
        for size in sizes:
            step = size // base
            for k, i in enumerate(range(0, len(usable) - step + 1, step)):
                group = usable[i : i + step]
                nodes = [n for b in group for n in b.nodes]
                names = compress(b.name for b in group)
                line = f"AggregatedBlock={names} BlockIndex={k} Nodes={compress(nodes)} BlockSize={size}"
                lines.append((names, line, set(nodes)))
    if target:
        return [line for name, line, nodes in lines if name == target or target in nodes]
    return [line for _, line, _ in lines]


def topology_addr(topo: TopologyConf | None, node: str) -> tuple[str, str]:
    """``SLURM_TOPOLOGY_ADDR`` and ``_PATTERN`` of ``node``: under topology/tree the
    switches from the top down to its leaf, then the node (``top.s0.node1``,
    ``switch.switch.node``); otherwise, or for a node in no switch, the node alone."""
    if topo is None or not topo.switches:
        return node, "node"
    parent = {c: s.name for s in topo.switches for c in s.switches}
    leaf = next((s.name for s in topo.switches if node in s.nodes), None)
    if leaf is None:
        return node, "node"
    path = [leaf]
    while path[-1] in parent and len(path) <= len(topo.switches):
        path.append(parent[path[-1]])
    return ".".join([*reversed(path), node]), ".".join(["switch"] * len(path) + ["node"])


def _default_sizes(base: int, blocks: int) -> list[int]:
    out = []
    factor = 2
    while factor <= blocks:
        out.append(base * factor)
        factor *= 2
    return out
