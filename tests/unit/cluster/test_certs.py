"""The cluster CA and the daemons' certificates (openssl), and what Python's ssl makes of them."""

from __future__ import annotations

import os
import pathlib
import shutil
import ssl
import stat

import pytest

from muster.cli.muster import main as muster_main
from muster.cluster.certs import CertError, issue_all
from muster.cluster.local import ClusterShape, render_config
from muster.core.config import parse_config
from muster.protocol.tls import client_context, peer_name, server_context

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")

CONF = """ClusterName=t
SlurmctldHost=head(127.0.0.1)
AuthKeyFile={d}/muster.key
TLSType=tls/muster
NodeName=node[1-2] NodeAddr=127.0.0.2 CPUs=1
PartitionName=p Nodes=ALL Default=YES
"""


def config(tmp_path: pathlib.Path):  # type: ignore[no-untyped-def]
    return parse_config(CONF.format(d=tmp_path), str(tmp_path / "muster.conf"))


def test_issue_all_makes_a_ca_and_one_certificate_per_holder_once(tmp_path: pathlib.Path) -> None:
    cfg = config(tmp_path)
    made = issue_all(cfg)
    tls = cfg.tls
    assert made == [tls.ca_cert, tls.ctld().cert, tls.node("node1").cert, tls.node("node2").cert]
    assert issue_all(cfg) == []  # nothing is replaced
    for files in (tls.ctld(), tls.node("node1")):
        assert stat.S_IMODE(os.stat(files.key).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(files.cert).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(tls.ca_key).st_mode) == 0o600
    os.unlink(tls.node("node2").cert)
    assert issue_all(cfg) == [tls.node("node2").cert]  # a new (or renewed) node


def test_the_certificates_name_their_holder_and_chain_to_the_ca(tmp_path: pathlib.Path) -> None:
    cfg = config(tmp_path)
    issue_all(cfg)
    tls = cfg.tls
    ctx = client_context(tls.ca_cert, tls.node("node1"))
    server = server_context(tls.ctld())
    # An in-memory handshake: node1 (client) reaches "ctld" (server), each checks the other.
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    client = ctx.wrap_bio(c_in, c_out, server_hostname="ctld")
    srv = server.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for side in (client, srv):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    assert peer_name(srv.getpeercert()) == "node1"
    assert peer_name(client.getpeercert()) == "ctld"
    # the controller's certificate does not pass for node2's
    wrong = ctx.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_hostname="node2")
    assert wrong.server_hostname == "node2"


def test_a_ca_key_without_its_certificate_is_an_error_not_a_new_ca(tmp_path: pathlib.Path) -> None:
    cfg = config(tmp_path)
    os.makedirs(tmp_path / "tls")
    (tmp_path / "tls" / "ca_key.pem").write_text("x")
    with pytest.raises(CertError, match="exists without its certificate"):
        issue_all(cfg)


def test_muster_keygen_conf_creates_the_key_and_the_certificates(tmp_path: pathlib.Path, capsys) -> None:
    conf = tmp_path / "muster.conf"
    conf.write_text(CONF.format(d=tmp_path))
    assert muster_main(["keygen", "--conf", str(conf)]) == 0
    out = capsys.readouterr().out
    assert f"wrote cluster key {tmp_path}/muster.key" in out and "4 file(s) created" in out
    assert muster_main(["keygen", "--conf", str(conf)]) == 0
    assert "kept the existing cluster key" in capsys.readouterr().out
    assert muster_main(["keygen"]) == 2
    conf.write_text("TLSType=bogus\n")
    assert muster_main(["keygen", "--conf", str(conf)]) == 1
    assert "TLSType='bogus' is not one of" in capsys.readouterr().err


def test_muster_up_turns_tls_on_by_default(tmp_path: pathlib.Path) -> None:
    text = render_config(str(tmp_path), ClusterShape(nodes=1))
    assert "TLSType=tls/muster" in text.splitlines()
    off = render_config(str(tmp_path), ClusterShape(nodes=1), {"TLSType": "tls/none"})
    assert "TLSType=tls/none" in off.splitlines() and "TLSType=tls/muster" not in off


def test_a_daemon_without_its_certificate_does_not_start(tmp_path: pathlib.Path, capsys) -> None:
    from muster.ctld import main as ctld_main
    from muster.protocol.signing import generate_key

    generate_key(str(tmp_path / "muster.key"))
    conf = tmp_path / "muster.conf"
    conf.write_text(CONF.format(d=tmp_path) + f"StateSaveLocation={tmp_path}/state\nSlurmctldPort=0\n")
    assert ctld_main.main(["--conf", str(conf)]) == 1
    err = capsys.readouterr().err
    assert (
        err
        == f"musterctld: error: TLS certificate for ctld missing: {tmp_path}/tls/ctld_cert.pem (run `muster keygen --conf`)\n"
    )


def handshake(client: ssl.SSLObject, server: ssl.SSLObject, c_in, c_out, s_in, s_out) -> None:  # type: ignore[no-untyped-def]
    for _ in range(10):
        for side in (client, server):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())


def test_a_host_certificate_names_its_host_and_the_nodes_it_speaks_for(tmp_path: pathlib.Path) -> None:
    cfg = config(tmp_path)
    made = issue_all(cfg, hosts=["node[1-2]"])
    tls = cfg.tls
    files = tls.host("node[1-2]")
    assert made[-1] == files.cert and files.cert.endswith("slurmd_host_node[1-2]_cert.pem")
    assert stat.S_IMODE(os.stat(files.key).st_mode) == 0o600
    assert issue_all(cfg, hosts=["node[1-2]"]) == []
    bios = [ssl.MemoryBIO() for _ in range(4)]
    client = client_context(tls.ca_cert, files).wrap_bio(bios[0], bios[1], server_hostname="ctld")
    srv = server_context(tls.ctld()).wrap_bio(bios[2], bios[3], server_side=True)
    handshake(client, srv, *bios)
    peer = srv.getpeercert()
    assert peer_name(peer) == "node[1-2]"
    assert dict(x[0] for x in peer["subject"])["commonName"] == "host node1"  # NodeHostname defaults to the NodeName
    assert ("IP Address", "127.0.0.2") in peer["subjectAltName"]


def test_a_host_certificate_cannot_pass_for_a_nodes_server(tmp_path: pathlib.Path) -> None:
    cfg = config(tmp_path)
    issue_all(cfg, hosts=["node[1-2]"])
    tls = cfg.tls
    bios = [ssl.MemoryBIO() for _ in range(4)]
    client = client_context(tls.ca_cert, tls.ctld()).wrap_bio(bios[0], bios[1], server_hostname="node1")
    srv = server_context(tls.host("node[1-2]")).wrap_bio(bios[2], bios[3], server_side=True)
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(client, srv, *bios)


def test_a_host_certificate_for_unknown_nodes_is_refused(tmp_path: pathlib.Path) -> None:
    cfg = config(tmp_path)
    with pytest.raises(CertError, match="not configured: node9"):
        issue_all(cfg, hosts=["node[1,9]"])


def test_keygen_issues_host_certificates(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "muster.conf"
    conf.write_text(CONF.format(d=tmp_path))
    assert muster_main(["keygen", "--conf", str(conf), "--host-cert", "node[1-2]"]) == 0
    assert "slurmd_host_node[1-2]_cert.pem" in capsys.readouterr().out
    assert muster_main(["keygen", "--conf", str(conf), "--host-cert", "node[1-"]) == 1
    assert "muster: error:" in capsys.readouterr().err


def test_keygen_issues_the_controller_a_certificate_again_when_a_head_node_is_added(tmp_path: pathlib.Path) -> None:
    from muster.cluster.certs import missing_names

    cfg = config(tmp_path)
    issue_all(cfg)
    tls = cfg.tls
    first = pathlib.Path(tls.ctld().cert).read_bytes()
    node_cert = pathlib.Path(tls.node("node1").cert).read_bytes()
    text = CONF.format(d=tmp_path).replace(
        "SlurmctldHost=head(127.0.0.1)\n", "SlurmctldHost=head(127.0.0.1)\nSlurmctldHost=head2(10.9.8.7)\n"
    )
    two = parse_config(text, str(tmp_path / "muster.conf"))
    assert missing_names(tls.ctld().cert, ["head2", "10.9.8.7"]) == ["head2", "10.9.8.7"]
    assert issue_all(two) == [tls.ctld().cert]  # only the controller's: it missed the new head
    assert missing_names(tls.ctld().cert, ["ctld", "head", "127.0.0.1", "head2", "10.9.8.7"]) == []
    assert pathlib.Path(tls.ctld().cert + ".old").read_bytes() == first
    assert pathlib.Path(tls.node("node1").cert).read_bytes() == node_cert
    assert stat.S_IMODE(os.stat(tls.ctld().key).st_mode) == 0o600
    assert issue_all(two) == []
    server_context(tls.ctld())  # the new pair goes together
