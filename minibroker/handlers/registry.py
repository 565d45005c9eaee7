"""The handler registry: registering a handler is what makes ApiVersions advertise it.

A handler is ``fn(broker, header, request) -> response | None | Awaitable[response | None]``
registered with ``@handles(api_key, (min_version, max_version))``. ``None`` means no
response (acks=0 produce). A second registration for an API key fails at import.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

from minibroker.protocol.codec import API_NAMES, REQUESTS
from minibroker.protocol.declarations import in_range


class Handler(NamedTuple):
    api_key: int
    min_version: int
    max_version: int
    fn: Callable[..., Any]
    is_async: bool
    advertised: bool = True  # False: answered when asked, but left out of ApiVersions (as Kafka does some)

    @property
    def name(self) -> str:
        return API_NAMES[self.api_key]


HANDLERS: dict[int, Handler] = {}


class CloseConnection(Exception):
    """Raised by a handler to drop the connection without an answer (acks=0 produce errors)."""


def handles(api_key: int, versions: tuple[int, int], *, advertised: bool = True):
    """Register ``fn`` as the handler of ``api_key`` for the inclusive version range ``versions``.
    ``advertised=False`` serves the API without listing it in ApiVersions (what Kafka does with the
    telemetry APIs when no metrics plugin is configured)."""
    lo, hi = versions
    message = REQUESTS[api_key]
    if not (in_range(lo, message.valid) and in_range(hi, message.valid)):
        raise ValueError(f"{message.name}: versions {versions} outside the schema's {message.valid}")

    def register(fn):
        if inspect.iscoroutinefunction(fn) and _carries_records(message.fields):
            # the connection hands requests over as views of its read buffer; a request with record
            # bytes must be handled before that buffer is reused, i.e. synchronously
            raise RuntimeError(f"{message.name} carries records: its handler must be synchronous")
        if api_key in HANDLERS:
            raise RuntimeError(f"API key {api_key} ({API_NAMES[api_key]}) registered twice")
        HANDLERS[api_key] = Handler(api_key, lo, hi, fn, inspect.iscoroutinefunction(fn), advertised)
        return fn

    return register


def _carries_records(fields) -> bool:
    return any(f.type == "records" or (f.fields is not None and _carries_records(f.fields)) for f in fields)


def served_versions() -> list[tuple[int, int, int]]:
    """(api_key, min, max) for every advertised API, sorted by key: what ApiVersions lists."""
    return [
        (h.api_key, h.min_version, h.max_version)
        for h in sorted(HANDLERS.values(), key=lambda h: h.api_key)
        if h.advertised
    ]
