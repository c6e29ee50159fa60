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


def _ha_conf(tmp_path: pathlib.Path, extra: str = "") -> pathlib.Path:
    key = tmp_path / "key"
    generate_key(str(key))
    conf = tmp_path / "muster.conf"
    conf.write_text(
        "ClusterName=t\nSlurmctldHost=head1(127.0.0.1)\nSlurmctldHost=head2(127.1.0.1)\nSlurmctldPort=0\n"
        f"AuthKeyFile={key}\nStateSaveLocation={tmp_path / 'state'}\n{extra}"
        "NodeName=n1 CPUs=4 RealMemory=1000\nPartitionName=p Nodes=ALL Default=YES\n"
    )
    return conf


def test_backup_controllers_without_postgresql_are_refused_clearly(tmp_path: pathlib.Path, capsys) -> None:
    conf = _ha_conf(tmp_path)
    assert ctld_main.main(["--conf", str(conf), "--index", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("musterctld: error: ")
    assert "several SlurmctldHost lines (a primary and backups) need the PostgreSQL store" in err


def test_an_index_beyond_the_slurmctldhost_lines_is_refused(tmp_path: pathlib.Path, capsys) -> None:
    conf = _ha_conf(tmp_path, "AccountingStorageURL=postgresql://u@127.0.0.1:1/db\n")
    assert ctld_main.main(["--conf", str(conf), "--index", "2"]) == 1
    assert "--index 2: the configuration lists 2 SlurmctldHost line(s)" in capsys.readouterr().err
