"""A signed daemon message must come over a connection whose certificate names its sender."""

from __future__ import annotations

import time

import pytest

from muster.core.clock import ManualClock
from muster.protocol.httpd import Verifier, WrongPeer
from muster.protocol.signing import sign_request
from muster.protocol.tls import describe_failure, peer_name

KEY = b"k" * 32


def signed(sender: str, receiver: str = "ctld") -> dict[str, str]:
    return sign_request(KEY, "POST", "/v1/agent/heartbeat", b"{}", time.time(), sender=sender, receiver=receiver)


def verifier(require_cert: bool) -> Verifier:
    return Verifier(KEY, ManualClock(time.time()), "ctld", require_cert=require_cert)


def test_with_tls_the_sender_must_be_the_certificate_holder() -> None:
    v = verifier(True)
    assert v.verify("POST", "/v1/agent/heartbeat", b"{}", signed("node1"), tls_peer="node1") == "node1"
    with pytest.raises(WrongPeer, match="message from node1 over a connection whose client certificate names node2"):
        v.verify("POST", "/v1/agent/heartbeat", b"{}", signed("node1"), tls_peer="node2")
    with pytest.raises(WrongPeer, match="client certificate is missing"):
        v.verify("POST", "/v1/agent/heartbeat", b"{}", signed("node1"), tls_peer="")
    with pytest.raises(WrongPeer, match="over a plain connection"):
        v.verify("POST", "/v1/agent/heartbeat", b"{}", signed("node1"), tls_peer=None)


def test_without_tls_the_signature_alone_decides() -> None:
    assert verifier(False).verify("POST", "/v1/agent/heartbeat", b"{}", signed("node1")) == "node1"


def test_peer_name_is_the_subjects_common_name() -> None:
    cert = {"subject": ((("organizationName", "muster"),), (("commonName", "node3"),))}
    assert peer_name(cert) == "node3"
    assert peer_name(None) is None and peer_name({}) is None


def test_handshake_failures_read_as_one_short_reason() -> None:
    import ssl

    plain = ssl.SSLError(1, "[SSL: HTTP_REQUEST] http request")
    plain.reason = "HTTP_REQUEST"
    assert describe_failure(plain) == "plain HTTP sent to a TLS port (TLSType=tls/muster)"
    assert describe_failure(TimeoutError()) == "TLS handshake timed out"


def test_a_host_certificate_speaks_for_the_nodes_it_names_and_no_others() -> None:
    v = verifier(True)
    assert v.verify("POST", "/v1/agent/heartbeat", b"{}", signed("node[1-4]"), tls_peer="node[1-4]") == "node[1-4]"
    assert v.verify("POST", "/v1/agent/heartbeat", b"{}", signed("node[2-3]"), tls_peer="node[1-4]") == "node[2-3]"
    assert v.verify("POST", "/v1/agent/heartbeat", b"{}", signed("node3"), tls_peer="node[1-4]") == "node3"
    for sender in ("node5", "node[4-5]", "node1,nodeX"):
        with pytest.raises(WrongPeer, match=r"client certificate names node\[1-4\]"):
            v.verify("POST", "/v1/agent/heartbeat", b"{}", signed(sender), tls_peer="node[1-4]")
    # a single node's certificate speaks for no hostlist
    with pytest.raises(WrongPeer, match="names node1"):
        v.verify("POST", "/v1/agent/heartbeat", b"{}", signed("node[1-2]"), tls_peer="node1")


def test_a_host_certificates_peer_name_is_the_hostlist_of_its_nodes() -> None:
    cert = {
        "subject": ((("organizationName", "muster"),), (("commonName", "host localhost"),)),
        "subjectAltName": (("DNS", "localhost"), ("URI", "muster:nodes:node[1-3,7]"), ("IP Address", "127.0.0.2")),
    }
    assert peer_name(cert) == "node[1-3,7]"
    other = {"subject": ((("commonName", "node3"),),), "subjectAltName": (("URI", "https://x/"),)}
    assert peer_name(other) == "node3"
