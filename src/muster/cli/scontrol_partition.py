"""``scontrol create PartitionName=X [Key=Value ...]`` and ``scontrol delete PartitionName=X``
(scontrol(1)): partitions made and removed at run time by an administrator, kept by the
controller across its restarts (``ctld.partition_api``).

The keys are slurm.conf(5)'s partition keys (``Nodes``, ``State``, ``Default``, ``MaxTime``,
...); one scontrol does not know is refused here, before any request, in Slurm's words
(``Update of this parameter is not supported: K=V`` then ``Request aborted``). What the
controller refuses is printed as Slurm prints it: ``Error creating the partition: <why>``,
``delete_partition PartitionName=X: <why>``; both exit 1.
"""

# No ``from __future__ import annotations``: scontrol's modules do without it (cli.launchers).
from muster.cli.common import CommandError
from muster.client.controller import connect, connect_message

PROG = "scontrol"


def is_partition_word(word: str) -> bool:
    """Whether ``create``/``delete``'s first word names a partition: ``PartitionName=X``,
    ``Partition=X`` or an abbreviation of either (case-blind), as Slurm takes it."""
    key = word.partition("=")[0].lower()
    return len(key) >= 4 and "partitionname".startswith(key)


def parse_create(words: list[str]) -> tuple[str, dict[str, str]]:
    """``PartitionName=X Key=Value ...`` -> (name, {key: value}). Raises ``CommandError``."""
    from muster.core.confkeys import PARTITION

    name = ""
    params: dict[str, str] = {}
    for word in words:
        key, eq, value = word.partition("=")
        if not eq:
            raise CommandError(f"Invalid input: {word}  Request aborted")
        if is_partition_word(key + "=") and not name:
            name = value
            continue
        canon = PARTITION.get(key.lower())
        if canon is None or canon == "PartitionName":
            raise CommandError(f"Update of this parameter is not supported: {word}\n\n{PROG}: error: Request aborted")
        params[canon] = value
    if not name:
        raise CommandError("Error creating the partition: Invalid partition name specified", 1, raw=True)
    return name, params


def create(words: list[str]) -> int:
    from muster.protocol.client import ApiError, ConnectError

    if not words:
        raise CommandError("too few arguments for create keyword", 1, raw=True)
    name, params = parse_create(words)
    try:
        connect(PROG).post("/v1/partitions", {"name": name, "params": params})
    except ConnectError as e:
        raise CommandError(f"Error creating the partition: {connect_message(e)}", 1, raw=True) from None
    except ApiError as e:
        raise CommandError(f"Error creating the partition: {e.message}", 1, raw=True) from None
    return 0


def delete(words: list[str]) -> int:
    from urllib.parse import quote

    from muster.protocol.client import ApiError, ConnectError

    if not words:
        raise CommandError("too few arguments for delete keyword", 1, raw=True)
    key, eq, name = words[0].partition("=")
    if not eq:  # ``delete PartitionName X``
        if len(words) < 2:
            raise CommandError("Proper format is 'delete <ENTITY>=<ID>' or 'delete <ENTITY> <ID>'")
        name = words[1]
    if not name:
        raise CommandError(f"delete_partition {words[0]}: Invalid partition name specified", 1, raw=True)
    try:
        connect(PROG).post(f"/v1/partitions/{quote(name, safe='')}/delete", {})
    except ConnectError as e:
        raise CommandError(f"delete_partition PartitionName={name}: {connect_message(e)}", 1, raw=True) from None
    except ApiError as e:
        raise CommandError(f"delete_partition PartitionName={name}: {e.message}", 1, raw=True) from None
    return 0
