"""docs/metrics.md's scrape config under TLS (TLSType=tls/muster, as docs/deploy.md sets
it): a scraper with only the cluster CA, no client certificate and no muster credential,
reads the controller's /metrics over HTTPS naming server "ctld", and an agent's naming its
address; the build's version is there and in sdiag."""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness import Harness
from muster import __version__
from muster.cluster.local import ClusterShape

pytestmark = pytest.mark.integration


def https_get(host: str, port: int, server_name: str, ca_file: str, path: str = "/metrics") -> tuple[int, str]:
    """GET over TLS as Prometheus does it: the CA alone, the certificate checked against
    ``server_name`` (tls_config.server_name), no client certificate."""
    ctx = ssl.create_default_context(cafile=ca_file)  # CERT_REQUIRED and check_hostname
    with socket.create_connection((host, port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=server_name) as tls:
            tls.sendall(f"GET {path} HTTP/1.1\r\nHost: {server_name}\r\nConnection: close\r\n\r\n".encode())
            resp = http.client.HTTPResponse(tls)
            resp.begin()
            return resp.status, resp.read().decode()


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_prometheus_scrapes_the_controller_and_an_agent_over_tls_with_the_ca_alone() -> None:
    h = Harness(
        ClusterShape(nodes=1, gpus_per_node=1, cpus_per_node=2, mem_per_node=1000),
        settings={"MetricsType": "metrics/openmetrics"},
        tls=True,
    )
    try:
        h.up()
        cfg = h.cluster.config()
        ca = os.path.join(os.path.dirname(cfg.auth_key_file), "tls", "ca_cert.pem")
        status, text = https_get(cfg.ctld_addr, cfg.ctld_port, "ctld", ca)
        assert status == 200, text
        assert samples(text)[("muster_build_info", (("version", __version__),))] == 1
        # the controller's certificate (825 days, muster keygen) and the CA's expiry (ctld.certexpiry)
        got = samples(text)
        left = got[("muster_tls_cert_expiry_timestamp_seconds", (("cert", "ctld"),))] - time.time()
        assert 824 * 86400 < left <= 825 * 86400 + 60
        assert got[("muster_tls_cert_readable", (("cert", "ca"),))] == 1
        node = cfg.node("node1")
        assert node is not None
        status, text = https_get(node.addr, node.port, node.addr, ca)
        assert status == 200 and "muster_agent_" in text, text
        # a server name the certificate does not hold is refused, as Prometheus would be
        with pytest.raises(ssl.SSLCertVerificationError):
            https_get(cfg.ctld_addr, cfg.ctld_port, "not-the-controller", ca)
        out = h.run(["sdiag"])
        assert out.returncode == 0 and f"Server version:       muster {__version__}\n" in out.stdout, out
    finally:
        h.down()
