"""A minimal blocking Kafka wire client over our own protocol layer, for tools and probes.

One request at a time on one socket; enough for the healthcheck and small admin calls.
Whole clients (consumers, producers with batching) come from kafka-python instead.

With a ``ClientSecurity`` (minibroker/tools/client_config.py, from ``--command-config``) the socket is
wrapped in TLS (SSL, SASL_SSL; the broker's host name checked unless the endpoint identification algorithm
is empty, as Kafka's clients do) and authenticated with SASL (SASL_PLAINTEXT, SASL_SSL) the way Kafka's
clients do it: ApiVersions, SaslHandshake v1 naming the mechanism, then SaslAuthenticate (v0-v2, the
highest the broker serves) carrying the mechanism's tokens (minibroker/tools/sasl_client.py). Every wait is
bounded by the socket timeout. A refused authentication raises ``AuthenticationFailed``, a failed TLS
handshake ``TlsHandshakeFailed``; both are ``ConnectionError``s whose message is one line naming the
broker (and the mechanism and user), for a tool to print as it is.
"""

from __future__ import annotations

import socket
import ssl
import struct

from minibroker.protocol import codec
from minibroker.tools.client_config import ClientConfigError, read_client_config

SASL_HANDSHAKE, API_VERSIONS, SASL_AUTHENTICATE = 17, 18, 36
UNSUPPORTED_SASL_MECHANISM = 33


class AuthenticationFailed(ConnectionError):
    """The broker refused the SASL authentication (or it could not be completed)."""


class TlsHandshakeFailed(ConnectionError):
    """The TLS handshake with the broker failed (untrusted certificate, wrong host name, no client
    certificate where one is required, not a TLS listener...)."""


def failure_text(bootstrap: str, error: OSError) -> str:
    """What a tool prints after a connection failure: our own errors say it all; others get the address."""
    if isinstance(error, (AuthenticationFailed, TlsHandshakeFailed)):
        return str(error)
    return f"cannot reach {bootstrap}: {error}"


class WireClient:
    def __init__(self, host: str, port: int, timeout: float = 5.0, client_id: str = "minibroker-cli",
                 security=None):
        self.client_id = client_id
        self.address = f"{host}:{port}"
        self._correlation = 0
        self._plaintext = security is None or security.protocol == "PLAINTEXT"
        self._tls = security is not None and security.tls
        self._answered = False  # a TLS listener refusing a client certificate closes before any answer
        self.sock = socket.create_connection((host, port), timeout=timeout)
        try:
            if security is not None and security.tls:
                self._start_tls(host, security)
            if security is not None and security.sasl:
                self._authenticate(security)
        except BaseException:
            self.sock.close()
            raise

    def _start_tls(self, host: str, security) -> None:
        context = security.ssl_context()
        try:
            self.sock = context.wrap_socket(self.sock, server_hostname=host.strip("[]"))
        except ssl.SSLCertVerificationError as e:
            raise TlsHandshakeFailed(f"TLS handshake with {self.address} failed: the broker's certificate is "
                                     f"not trusted: {e.verify_message} (ssl.truststore.location, "
                                     "ssl.endpoint.identification.algorithm)") from None
        except ssl.SSLError as e:
            raise TlsHandshakeFailed(f"TLS handshake with {self.address} failed: {e.reason or e} (is it a "
                                     f"TLS listener? does it require a client certificate?)") from None
        except (ConnectionError, TimeoutError) as e:
            raise TlsHandshakeFailed(f"TLS handshake with {self.address} failed: {e or type(e).__name__} "
                                     "(is it a TLS listener?)") from None

    def _authenticate(self, security) -> None:
        from minibroker.tools.sasl_client import OAuthBearerClient, SaslClientError, client_mechanism

        def failed(reason: str) -> AuthenticationFailed:
            return AuthenticationFailed(f"SASL authentication failed ({security.who}) at {self.address}: "
                                        f"{reason}")

        try:
            versions = self.request(API_VERSIONS, 0, {})
            served = {k.api_key: k.max_version for k in versions.api_keys}
            if SASL_HANDSHAKE not in served or SASL_AUTHENTICATE not in served:
                raise failed("the broker does not serve SaslHandshake v1 and SaslAuthenticate (not a SASL "
                             "listener?)")
            handshake = self.request(SASL_HANDSHAKE, 1, {"mechanism": security.mechanism})
            if handshake.error_code == UNSUPPORTED_SASL_MECHANISM:
                raise failed(f"the listener offers {', '.join(handshake.mechanisms) or 'no mechanism'}, "
                             f"not {security.mechanism}")
            if handshake.error_code:
                raise failed(_error_name(handshake.error_code))
            version = min(served[SASL_AUTHENTICATE], codec.REQUESTS[SASL_AUTHENTICATE].valid[1])
            mechanism = client_mechanism(security)
            token = mechanism.initial()
            while token is not None:
                answer = self.request(SASL_AUTHENTICATE, version, {"auth_bytes": token})
                if answer.error_code:
                    raise failed(answer.error_message or _error_name(answer.error_code))
                token = mechanism.evaluate(bytes(answer.auth_bytes))
            if isinstance(mechanism, OAuthBearerClient) and mechanism.rejection:
                raise failed(mechanism.rejection)
        except (SaslClientError, ValueError) as e:
            raise failed(str(e)) from None
        except AuthenticationFailed:
            raise
        except OSError as e:  # closed or timed out mid-exchange: still an authentication failure to report
            raise failed(str(e) or type(e).__name__) from None

    def request(self, api_key: int, version: int, body) -> codec.Struct:
        self._correlation += 1
        try:
            self.sock.sendall(codec.encode_request(api_key, version, self._correlation, body, self.client_id))
            size = struct.unpack(">i", self._read(4))[0]
            frame = self._read(size)
        except ssl.SSLError as e:  # TLS 1.3: a refused client certificate shows after the handshake
            raise TlsHandshakeFailed(f"TLS connection to {self.address} failed: {e.reason or e} (does "
                                     "the listener require a client certificate? ssl.keystore.location)"
                                     ) from None
        except OSError as e:
            if self._tls and not self._answered and "closed" in str(e):
                raise TlsHandshakeFailed(f"TLS connection to {self.address} failed: {e} right after the "
                                         "handshake (does the listener require a client certificate? "
                                         "ssl.keystore.location)") from None
            if self._plaintext and "closed" in str(e):
                raise OSError(f"{e} (a TLS or SASL listener? give its client properties with "
                              "--command-config)") from None
            raise
        correlation, response = codec.decode_response(api_key, version, frame)
        if correlation != self._correlation:
            raise OSError(f"correlation id {correlation} != {self._correlation}")
        self._answered = True
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


def _error_name(code: int) -> str:
    from minibroker.errors import ErrorCode

    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


class ToolError(Exception):
    """A failure to report on stderr with exit code 1."""


class BrokerConnection:
    """One broker: a ``WireClient`` and the API versions the broker serves (ApiVersions v0, asked at
    connect); each request goes at the highest version both sides speak. Not thread-safe."""

    def __init__(self, host: str, port: int, timeout: float, security=None, client_id: str = "minibroker"):
        self.address = (host, port)
        self.client = WireClient(host, port, timeout=timeout, client_id=client_id, security=security)
        try:
            answer = self.client.request(API_VERSIONS, 0, {})
        except BaseException:
            self.client.close()
            raise
        self.broker_max = {k.api_key: k.max_version for k in answer.api_keys}

    def version(self, api_key: int, at_least: int = 0) -> int:
        name = codec.API_NAMES.get(api_key, api_key)
        if api_key not in self.broker_max:
            raise ToolError(f"the broker at {self.address[0]}:{self.address[1]} does not serve {name}")
        version = min(codec.REQUESTS[api_key].valid[1], self.broker_max[api_key])
        if version < at_least:
            raise ToolError(f"the broker serves {name} up to v{version}; this needs v{at_least}")
        return version

    def request(self, api_key: int, body, at_least: int = 0) -> codec.Struct:
        return self.client.request(api_key, self.version(api_key, at_least), body)

    def close(self) -> None:
        self.client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def api_versions_probe(host: str, port: int, timeout: float = 2.0, security=None) -> bool:
    """True when the broker answers ApiVersions v0 with no error and a non-empty list (after TLS and
    SASL authentication when ``security`` asks for them)."""
    with WireClient(host, port, timeout=timeout, client_id="minibroker-healthcheck",
                    security=security) as client:
        response = client.request(API_VERSIONS, 0, {})
    return response.error_code == 0 and bool(response.api_keys)


def check_connection(bootstrap: str, security, timeout: float) -> None:
    """Connect to the first bootstrap address with ``security`` (TLS handshake, SASL authentication) and
    close again; raises what ``WireClient`` raises."""
    host, port = split_host_port(bootstrap)
    WireClient(host, port, timeout=timeout, client_id="minibroker-check", security=security).close()


def split_host_port(bootstrap: str) -> tuple[str, int]:
    """``host:port`` (the first of a comma-separated list) -> (host, port); port 9092 if missing."""
    first = bootstrap.split(",")[0].strip()
    host, sep, port = first.rpartition(":")
    if not sep:
        return first or "127.0.0.1", 9092
    return host.strip("[]") or "127.0.0.1", int(port)


def kafka_python_tool_settings(args, tool: str) -> tuple[dict, int]:
    """For the tools built on kafka-python: (settings, 0) from ``args.command_config``, or ({}, exit code)
    after printing why not. On TLS and SASL listeners the broker is first asked once through
    ``WireClient``: kafka-python reports a refused password or an untrusted certificate only as
    "Unable to bootstrap" after its whole timeout, this says at once what failed and where."""
    import sys

    try:
        security = read_client_config(args.command_config)
        if security.protocol == "PLAINTEXT":
            return ({"security_protocol": "PLAINTEXT"} if args.command_config else {}), 0
        settings = security.kafka_python_settings()
        check_connection(args.bootstrap_server, security, args.timeout)
    except ClientConfigError as e:
        print(f"minibroker {tool}: {e}", file=sys.stderr)
        return {}, 2
    except OSError as e:
        print(f"minibroker {tool}: {failure_text(args.bootstrap_server, e)}", file=sys.stderr)
        return {}, 1
    return settings, 0
