"""Optional features and the pip extras that bring their libraries.

``pip install muster-wlm`` installs what the controller, the agents and the commands need;
a feature that needs more names its extra (``pip install 'muster-wlm[plot]'``). ``EXTRAS`` is
the one table of which third-party module belongs to which extra; ``require`` imports one
and, when it is missing, raises ``MissingExtra`` whose message says what needs it and the
command that installs it. A unit test (tests/unit/test_dependencies.py) checks that every
third-party import under ``src/muster`` is a base dependency or goes through this table.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from muster.core.errors import MusterError

__all__ = ["EXTRAS", "MissingExtra", "require"]

# third-party module -> the extra of pyproject.toml that installs it
EXTRAS = {
    "matplotlib": "plot",  # muster sim --plot
    "psycopg": "pg",  # the PostgreSQL store
}


class MissingExtra(MusterError):
    """An optional feature was asked for, and the library it needs is not installed."""

    code = "missing_extra"

    def __init__(self, module: str, what: str) -> None:
        extra = EXTRAS[module]
        super().__init__(f"{what} needs {module}, which is not installed: pip install 'muster-wlm[{extra}]'")
        self.module = module
        self.extra = extra


def require(module: str, what: str) -> ModuleType:
    """Import ``module`` (a key of ``EXTRAS``) for ``what`` (e.g. ``--plot``); MissingExtra
    when it is not installed."""
    if module not in EXTRAS:
        raise KeyError(f"{module} is not an optional module of muster")
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtra(module, what) from exc
