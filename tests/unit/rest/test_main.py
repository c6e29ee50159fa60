"""musterrestd's command line: slurmrestd's listen forms and plugin names."""

from __future__ import annotations

import pytest

from muster.rest.main import main, parse_listen


def test_listen_forms() -> None:
    assert parse_listen("unix:/run/rest.sock") == ("unix", "/run/rest.sock")
    assert parse_listen("127.0.0.1:6820") == ("127.0.0.1", 6820)
    assert parse_listen(":6820") == ("0.0.0.0", 6820)
    for bad in ("6820x", "host:", "host:0", "host:70000", "unix:relative"):
        with pytest.raises(ValueError):
            parse_listen(bad)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-a", "rest_auth/munge", ":6820"], "unknown authentication plugin: rest_auth/munge"),
        (["-d", "data_parser/v0.0.39", ":6820"], "data parser data_parser/v0.0.39 not available"),
        (["-d", "v0.0.44,v0.0.46", ":6820"], "data parser v0.0.46 not available"),
        (["nope"], "invalid listen address"),
    ],
)
def test_bad_command_lines_fail_clearly(argv: list[str], message: str, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(argv) == 1
    assert message in capsys.readouterr().err


def test_sighup_serves_the_next_requests_with_the_file_read_again(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from muster.client.settings import load_settings
    from muster.rest.main import Reloadable

    conf = tmp_path / "muster.conf"
    text = "ClusterName=first\nSlurmctldHost=head(127.0.0.1)\nNodeName=n1 CPUs=2\n"
    conf.write_text(text)
    monkeypatch.setenv("MUSTER_CONF", str(conf))
    app = Reloadable(load_settings("musterrestd"), local=False)
    served = app.app
    conf.write_text(text.replace("first", "second"))
    app.reload()
    assert app.app is not served and app.settings.cluster_name == "second"
    served = app.app
    conf.write_text("NodeName=\n")  # refused: the running app and settings stay
    app.reload()
    assert app.app is served and app.settings.cluster_name == "second"
    conf.unlink()
    app.reload()
    assert app.app is served
