"""Request handlers, one module per API (see each module's docstring for versions and gaps)."""

from __future__ import annotations

import importlib

HANDLER_MODULES = (
    "api_versions",
    "metadata",
)


def load_handlers() -> None:
    """Import every handler module once; importing is what registers them."""
    for name in HANDLER_MODULES:
        importlib.import_module(f"minibroker.handlers.{name}")
