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
