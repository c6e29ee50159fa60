"""The controller's certificate expiry on /metrics (``ctld.certexpiry``), from real files."""

from __future__ import annotations

import pathlib
import subprocess
import time

from prometheus_client import CollectorRegistry, generate_latest

from muster.core.config import parse_config
from muster.ctld.certexpiry import CertExpiry

CONF = "ClusterName=t\nNodeName=n1 CPUs=1\nPartitionName=p Nodes=ALL Default=YES\n"


def _cert(path: pathlib.Path, days: int) -> None:
    key = path.with_suffix(".key")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(path),
            "-days",
            str(days),
            "-subj",
            "/CN=ctld",
        ],
        check=True,
        capture_output=True,
    )


def _scrape(tmp_path: pathlib.Path, tls: str) -> str:
    config = parse_config(CONF + tls, str(tmp_path / "muster.conf"))
    registry = CollectorRegistry()
    registry.register(CertExpiry(lambda: config))
    return generate_latest(registry).decode()


def test_the_certificates_expiry_is_exported_and_a_missing_file_says_unreadable(tmp_path: pathlib.Path) -> None:
    _cert(tmp_path / "ctld.pem", 10)
    text = _scrape(
        tmp_path,
        f"TLSType=tls/muster\nTLSParameters=ctld_cert_file={tmp_path}/ctld.pem,ca_cert_file={tmp_path}/no.pem\n",
    )
    line = next(x for x in text.splitlines() if x.startswith('muster_tls_cert_expiry_timestamp_seconds{cert="ctld"}'))
    assert abs(float(line.split()[-1]) - (time.time() + 10 * 86400)) < 3600
    assert 'muster_tls_cert_readable{cert="ctld"} 1.0' in text
    assert 'muster_tls_cert_readable{cert="ca"} 0.0' in text
    assert 'expiry_timestamp_seconds{cert="ca"}' not in text


def test_nothing_is_exported_without_tls(tmp_path: pathlib.Path) -> None:
    assert "muster_tls" not in _scrape(tmp_path, "TLSType=tls/none\n")
