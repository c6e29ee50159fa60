"""scontrol create/delete PartitionName's command line, as scontrol(1) and Slurm 22.05 take
it: the keys checked before any request, Slurm's words for what is refused."""

from __future__ import annotations

import pytest

from muster.cli.common import CommandError
from muster.cli.scontrol import main
from muster.cli.scontrol_partition import is_partition_word, parse_create


def test_the_partition_word_and_its_abbreviations() -> None:
    for word in ("PartitionName=x", "partitionname=x", "Partition=x", "part=x", "PARTITION"):
        assert is_partition_word(word)
    for word in ("par=x", "ReservationName=x", "res=x", "Nodes=x"):
        assert not is_partition_word(word)


def test_keys_are_the_files_partition_keys_canonically_spelt() -> None:
    name, params = parse_create(["PartitionName=short", "nodes=node[1-2]", "maxtime=30", "state=UP", "Default=NO"])
    assert name == "short"
    assert params == {"Nodes": "node[1-2]", "MaxTime": "30", "State": "UP", "Default": "NO"}


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (
            ["PartitionName=x", "Bogus=1"],
            "Update of this parameter is not supported: Bogus=1\n\nscontrol: error: Request aborted",
        ),
        (["PartitionName=x", "Nodes"], "Invalid input: Nodes  Request aborted"),
    ],
)
def test_what_scontrol_refuses_before_asking(words: list[str], message: str) -> None:
    with pytest.raises(CommandError) as err:
        parse_create(words)
    assert err.value.message == message


def test_no_specification(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["create"]) == 1
    assert capsys.readouterr().err.strip() == "too few arguments for create keyword"
    assert main(["delete"]) == 1
    assert capsys.readouterr().err.strip() == "too few arguments for delete keyword"
    assert main(["delete", "PartitionName="]) == 1
    assert capsys.readouterr().err.strip() == "delete_partition PartitionName=: Invalid partition name specified"
    assert main(["delete", "Partition"]) == 1
    assert "Proper format is 'delete <ENTITY>=<ID>'" in capsys.readouterr().err
