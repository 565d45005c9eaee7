"""Broker-wide counters: requests and latency per API, bytes in and out.

Owner: the event loop thread (plain attribute updates, no locks). Rendered in Prometheus
text format by the optional metrics endpoint.
"""

from __future__ import annotations

import collections


class Metrics:
    def __init__(self) -> None:
        self.requests: collections.Counter[int] = collections.Counter()
        self.request_seconds: collections.Counter[int] = collections.Counter()
        self.bytes_in = 0
        self.bytes_out = 0
        self.connections_opened = 0

    def observe_request(self, api_key: int, seconds: float) -> None:
        self.requests[api_key] += 1
        self.request_seconds[api_key] += seconds
