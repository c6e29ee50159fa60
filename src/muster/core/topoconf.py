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

from dataclasses import dataclass

from muster.core.config import _logical_lines, _tokenize
from muster.core.conftypes import ConfigError
from muster.core.hostlist import HostlistError, compress, expand

__all__ = ["BlockConf", "SwitchConf", "TopologyConf", "parse_topology"]

_SWITCH_KEYS = {"switchname": "SwitchName", "switches": "Switches", "nodes": "Nodes", "linkspeed": "LinkSpeed"}
_BLOCK_KEYS = {"blockname": "BlockName", "nodes": "Nodes"}


@dataclass(frozen=True, slots=True)
class SwitchConf:
    """One ``SwitchName`` line: a leaf (``nodes``) or a switch above others (``switches``)."""

    name: str
    nodes: tuple[str, ...] = ()
    switches: tuple[str, ...] = ()
    link_speed: int = 1
    lineno: int = 0


@dataclass(frozen=True, slots=True)
class BlockConf:
    """One ``BlockName`` line: a base block and its nodes."""

    name: str
    nodes: tuple[str, ...]
    lineno: int = 0


@dataclass(frozen=True, slots=True)
class TopologyConf:
    """A parsed topology.conf: switches (tree) or blocks, never both."""

    path: str
    switches: tuple[SwitchConf, ...] = ()
    blocks: tuple[BlockConf, ...] = ()
    block_sizes: tuple[int, ...] = ()  # as given (BlockSizes=), () when not given
    warnings: tuple[str, ...] = ()

    @property
    def plugin(self) -> str:
        """The TopologyPlugin this file is written for."""
        return "topology/block" if self.blocks else "topology/tree"


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
            raise ConfigError(f"{where}: {what} names unknown node {name!r} (not in slurm.conf)")


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
