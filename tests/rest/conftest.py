"""Fixtures of the REST suite (the world itself is ``tests/restworld.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from restworld import Rest, rest_world


@pytest.fixture(scope="package")
def rest() -> Iterator[Rest]:
    yield from rest_world()
