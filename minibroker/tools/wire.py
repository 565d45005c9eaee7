"""A minimal blocking Kafka wire client over our own protocol layer, for tools and probes.

One request at a time on one socket; enough for the healthcheck and small admin calls.
Whole clients (consumers, producers with batching) come from kafka-python instead.
"""

from __future__ import annotations

import socket
import struct

from minibroker.protocol import codec


class WireClient:
    def __init__(self, host: str, port: int, timeout: float = 5.0, client_id: str = "minibroker-cli"):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.client_id = client_id
        self._correlation = 0

    def request(self, api_key: int, version: int, body) -> codec.Struct:
        self._correlation += 1
        self.sock.sendall(codec.encode_request(api_key, version, self._correlation, body, self.client_id))
        size = struct.unpack(">i", self._read(4))[0]
        frame = self._read(size)
        correlation, response = codec.decode_response(api_key, version, frame)
        if correlation != self._correlation:
            raise OSError(f"correlation id {correlation} != {self._correlation}")
        return response

    def _read(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(min(n, 1 << 20))
            if not chunk:
                raise OSError("connection closed by broker")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def api_versions_probe(host: str, port: int, timeout: float = 2.0) -> bool:
    """True when the broker answers ApiVersions v0 with no error and a non-empty list."""
    with WireClient(host, port, timeout=timeout, client_id="minibroker-healthcheck") as client:
        response = client.request(18, 0, {})
    return response.error_code == 0 and bool(response.api_keys)
