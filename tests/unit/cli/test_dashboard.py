"""``muster dashboard``: where the printed link points, and a bad ``--base-url`` refused."""

from __future__ import annotations

import pytest

from muster.cli import dashboard
from muster.cli.muster import main
from muster.client.settings import parse_client_settings


@pytest.mark.parametrize(
    ("conf", "given", "url"),
    [
        ("SlurmctldHost=ctl(10.0.0.1)\nSlurmctldPort=6817\n", None, "http://10.0.0.1:6817"),
        ("SlurmctldHost=ctl(0.0.0.0)\nSlurmctldPort=7000\n", None, "http://ctl:7000"),  # every address: its name
        ("SlurmctldHost=ctl(fd00::1)\n", None, "http://[fd00::1]:6817"),
        ("SlurmctldHost=ctl\n", "https://dash.example:8443/", "https://dash.example:8443"),
    ],
)
def test_the_link_points_where_a_browser_reaches_the_controller(conf: str, given: str | None, url: str) -> None:
    assert dashboard.base_url(parse_client_settings(conf, "muster.conf"), given) == url


def test_a_base_url_that_is_not_http_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dashboard", "--base-url", "ftp://x"]) == 2
    assert capsys.readouterr().err == (
        "muster dashboard: error: --base-url must start with http:// or https://, not 'ftp://x'\n"
    )


def test_without_a_config_it_says_so(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUSTER_CONF", "/nonexistent/muster.conf")
    assert main(["dashboard"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("muster dashboard: error: Could not establish a configuration source") and "\n" == err[-1]
