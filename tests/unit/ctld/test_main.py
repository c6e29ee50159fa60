"""musterctld's start: a bad value found while loading stops it with the file and the key."""

from __future__ import annotations

import pathlib

from muster.ctld import main as ctld_main
from muster.protocol.signing import generate_key


def test_a_bad_value_read_while_loading_is_named_not_a_traceback(tmp_path: pathlib.Path, capsys) -> None:
    key = tmp_path / "key"
    generate_key(str(key))
    conf = tmp_path / "muster.conf"
    conf.write_text(
        f"ClusterName=t\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=0\nAuthKeyFile={key}\n"
        f"StateSaveLocation={tmp_path / 'state'}\nPriorityUsageResetPeriod=FORTNIGHTLY\n"
        "NodeName=n1 CPUs=4 RealMemory=1000\nPartitionName=p Nodes=ALL Default=YES\n"
    )
    assert ctld_main.main(["--conf", str(conf)]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"musterctld: error: {conf}: PriorityUsageResetPeriod='FORTNIGHTLY' is not one of "
        "NONE, NOW, DAILY, WEEKLY, MONTHLY, QUARTERLY, YEARLY\n"
    )
