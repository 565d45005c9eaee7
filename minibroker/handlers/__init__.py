"""Request handlers, one module per API (see each module's docstring for versions and gaps).

Each module is imported on its API's first request; registry.py's ``SERVED`` lists them all."""

from __future__ import annotations

from minibroker.handlers.registry import load_handlers

__all__ = ["load_handlers"]
