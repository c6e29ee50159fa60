"""Optional libraries: a missing one is one clear line naming the extra that installs it."""

from __future__ import annotations

import sys

import pytest

from muster.core.extras import EXTRAS, MissingExtra, require


def test_a_missing_optional_library_names_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    with pytest.raises(MissingExtra) as caught:
        require("matplotlib", "muster sim --plot")
    assert (
        str(caught.value)
        == "muster sim --plot needs matplotlib, which is not installed: pip install 'muster-wlm[plot]'"
    )
    assert caught.value.extra == "plot"


def test_an_installed_one_is_returned() -> None:
    pytest.importorskip("matplotlib")
    assert require("matplotlib", "plots").__name__ == "matplotlib"


def test_only_modules_of_the_table_can_be_required() -> None:
    with pytest.raises(KeyError):
        require("numpy", "anything")
    assert EXTRAS["psycopg"] == "pg"


def test_the_postgresql_store_without_psycopg_names_the_pg_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from muster.ctld.store_pg import PgStore

    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(MissingExtra, match=r"needs psycopg, which is not installed: pip install 'muster-wlm\[pg\]'"):
        PgStore("postgresql://muster@db.invalid/muster")
