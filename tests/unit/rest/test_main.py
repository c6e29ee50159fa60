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
        (["-d", "data_parser/v0.0.42", ":6820"], "data parser data_parser/v0.0.42 not available"),
        (["nope"], "invalid listen address"),
    ],
)
def test_bad_command_lines_fail_clearly(argv: list[str], message: str, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(argv) == 1
    assert message in capsys.readouterr().err
