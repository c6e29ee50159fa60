"""Partitions made at run time (``scontrol create PartitionName=...``): their lines, kept in
the controller's store across restarts and reconfigurations, and the configuration with them.

A created partition is one ``PartitionName=...`` line in the configuration file's syntax,
kept in the store's ``meta`` table (``created_partitions``, a JSON list of lines) and added
to the file's partitions (``core.config.add_partitions``) wherever the controller builds its
configuration: when it starts or takes over (``with_created``, from ``ctld.app``) and at
every ``scontrol reconfigure`` (``ctld.reconfig``). A line whose partition the file now
defines too is left out, with a warning: the file's wins.

The requests that make and remove them are ``ctld.partition_api``'s.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from muster.core.config import Config, ConfigError, add_partitions
from muster.core.confkeys import PARTITION
from muster.core.errors import InvalidRequest

if TYPE_CHECKING:
    from muster.ctld.store import Store

__all__ = ["META_KEY", "WHERE", "created_lines", "line_of", "name_of", "with_created"]

log = logging.getLogger("musterctld")

META_KEY = "created_partitions"
WHERE = "scontrol create partition"


def created_lines(store: Store) -> list[str]:
    """The lines of the partitions made at run time, in the order they were made."""
    raw = store.get_meta(META_KEY)
    if not raw:
        return []
    try:
        lines = json.loads(raw)
    except ValueError:
        log.error("store: %s is not JSON; the partitions made at run time are left out", META_KEY)
        return []
    return [str(line) for line in lines] if isinstance(lines, list) else []


def name_of(line: str) -> str:
    """The partition a kept line makes."""
    return line.split(None, 1)[0].partition("=")[2]


def with_created(config: Config, store: Store) -> Config:
    """``config`` (the file's) with the partitions made at run time. One the file now
    defines too, or that no longer fits it (a node it names is gone), is left out with a
    warning in the log (and kept in the store: it comes back when it fits again)."""
    for line in created_lines(store):
        name = name_of(line)
        if config.partition(name) is not None:
            log.warning("partition %s made by scontrol is now defined in %s: the file's is used", name, config.path)
            continue
        try:
            config = add_partitions(config, [line], WHERE)
        except ConfigError as e:
            log.warning("partition %s made by scontrol is left out: %s", name, e)
    return config


def line_of(name: str, params: dict[str, str]) -> str:
    """Partition ``name`` with ``params`` as a configuration line; ``InvalidRequest`` in
    Slurm's words for a bad name, an unknown key or a value the file's syntax cannot hold."""
    """The partition as a configuration line; ``InvalidRequest`` with Slurm's words."""
    if not name or name.upper() == "DEFAULT" or any(c.isspace() or c in "\"'#=" for c in name):
        raise InvalidRequest("Invalid partition name specified")
    words = [f"PartitionName={name}"]
    for key, value in params.items():
        canon = PARTITION.get(key.lower())
        if canon is None:
            raise InvalidRequest(f"Update of this parameter is not supported: {key}={value}")
        if not value or any(c.isspace() or c in "\"'#" for c in value):
            raise InvalidRequest(f"Invalid input: {key}={value}")
        words.append(f"{canon}={value}")
    return " ".join(words)
