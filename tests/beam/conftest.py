"""Beam tests run on the official emulator (the fixtures of tests/conftest.py)."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every Beam test needs the emulator."""
    for item in items:
        item.add_marker(pytest.mark.emulator)
