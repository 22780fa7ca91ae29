"""Fixtures the worker tests share beyond the suite's own (`tests/conftest.py`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.sessions import Model


@pytest.fixture
def model() -> Iterator[Model]:
    """A scripted Phase 2 model server, closed after the test."""
    m = Model()
    yield m
    m.stub.close()
