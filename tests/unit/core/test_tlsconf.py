"""TLSType and TLSParameters: checked while parsing, with Slurm 25.05's file names."""

from __future__ import annotations

import pytest

from muster.core.config import ConfigError, parse_config

BASE = "ClusterName=t\nAuthKeyFile=/etc/muster/muster.key\nNodeName=n1 CPUs=1\nPartitionName=p Nodes=ALL\n"


def test_tls_is_off_unless_asked_for() -> None:
    assert parse_config(BASE, "/etc/muster/muster.conf").tls.enabled is False


def test_tls_muster_turns_it_on_with_files_beside_the_key() -> None:
    tls = parse_config("TLSType=tls/muster\n" + BASE, "/etc/muster/muster.conf").tls
    assert tls.enabled
    assert tls.ca_cert == "/etc/muster/tls/ca_cert.pem"
    ctld = tls.ctld()
    assert (ctld.name, ctld.cert, ctld.key) == (
        "ctld",
        "/etc/muster/tls/ctld_cert.pem",
        "/etc/muster/tls/ctld_cert_key.pem",
    )
    node = tls.node("n1")
    assert (node.cert, node.key) == ("/etc/muster/tls/slurmd_n1_cert.pem", "/etc/muster/tls/slurmd_n1_cert_key.pem")


def test_tls_parameters_name_other_files_and_percent_n_is_the_node() -> None:
    text = "TLSType=TLS/MUSTER\nTLSParameters=ca_cert_file=/pki/ca.pem,slurmd_cert_file=/pki/%n.pem\n" + BASE
    tls = parse_config(text, "/x/muster.conf").tls
    assert tls.ca_cert == "/pki/ca.pem" and tls.node("n7").cert == "/pki/n7.pem"
    assert tls.node("n7").key == "/etc/muster/tls/slurmd_n7_cert_key.pem"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("TLSType=tls/s2n", "TLSType='tls/s2n' is not one of tls/none, tls/muster"),
        ("TLSParameters=ca_file=/x", "TLSParameters names unknown item 'ca_file'"),
        ("TLSParameters=ca_cert_file", "TLSParameters item 'ca_cert_file' is not name=path"),
    ],
)
def test_bad_tls_settings_are_config_errors_naming_the_line(line: str, message: str) -> None:
    with pytest.raises(ConfigError, match=r"^/x/muster.conf:1: ") as err:
        parse_config(line + "\n" + BASE, "/x/muster.conf")
    assert message in str(err.value)


def test_a_node_may_not_be_named_ctld_with_tls() -> None:
    text = "TLSType=tls/muster\nNodeName=ctld CPUs=1\nPartitionName=p Nodes=ALL\n"
    with pytest.raises(ConfigError, match="NodeName=ctld is reserved for the controller"):
        parse_config(text, "/x/muster.conf")
    parse_config(text.replace("tls/muster", "tls/none"), "/x/muster.conf")
