"""Fixtures for storage tests; the helpers they import are in storage_helpers.py."""

from __future__ import annotations

import pytest


@pytest.fixture
def topic_id() -> bytes:
    return bytes(range(16))
