"""A minimal blocking Kafka wire client over our own protocol layer, for tools and probes.

One request at a time on one socket: the healthcheck, the console tools and the test fixture's helpers
(minibroker/tools/cluster.py finds the broker each request goes to; records_client.py produces and fetches
through it).

With a ``ClientSecurity`` (minibroker/tools/client_config.py, from ``--command-config``) the socket is
wrapped in TLS (SSL, SASL_SSL; the broker's host name checked unless the endpoint identification algorithm
is empty, as Kafka's clients do) and authenticated with SASL (SASL_PLAINTEXT, SASL_SSL) the way Kafka's
clients do it: ApiVersions, SaslHandshake v1 naming the mechanism, then SaslAuthenticate (v0-v2, the
highest the broker serves) carrying the mechanism's tokens (minibroker/tools/sasl_client.py). Every wait is
bounded by the socket timeout and, with a ``Deadline``, by the time the whole command has left: past it a
``CommandTimeout`` says which broker did not answer in time. A refused authentication raises
``AuthenticationFailed``, a failed TLS handshake ``TlsHandshakeFailed``; both are ``ConnectionError``s whose
message is one line naming the broker (and the mechanism and user), for a tool to print as it is.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time

from minibroker.protocol import codec

SASL_HANDSHAKE, API_VERSIONS, SASL_AUTHENTICATE = 17, 18, 36
UNSUPPORTED_SASL_MECHANISM = 33


class AuthenticationFailed(ConnectionError):
    """The broker refused the SASL authentication (or it could not be completed)."""


class TlsHandshakeFailed(ConnectionError):
    """The TLS handshake with the broker failed (untrusted certificate, wrong host name, no client
    certificate where one is required, not a TLS listener...)."""


class CommandTimeout(TimeoutError):
    """The command's ``--timeout`` ran out while waiting on a broker (``address``, when known)."""

    def __init__(self, message: str, address: str | None = None):
        super().__init__(message)
        self.address = address


class Deadline:
    """When a command must be done (``time.monotonic()``), shared by every connection it opens; ``at`` None:
    no bound but each wait's own socket timeout (a consumer following new records)."""

    def __init__(self, seconds: float | None):
        self.restart(seconds)

    def restart(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.at = None if seconds is None else time.monotonic() + seconds

    def left(self, wait: float | None) -> float | None:
        """How long the next wait may take: ``wait``, cut to what is left. Raises CommandTimeout when
        nothing is."""
        if self.at is None:
            return wait
        left = self.at - time.monotonic()
        if left <= 0:
            raise CommandTimeout(f"no answer within --timeout {self.seconds:g} s")
        return left if wait is None else min(wait, left)


def failure_text(bootstrap: str, error: OSError) -> str:
    """What a tool prints after a connection failure: our own errors say it all; others get the address."""
    if isinstance(error, (AuthenticationFailed, TlsHandshakeFailed)):
        return str(error)
    if isinstance(error, CommandTimeout):  # the broker that did not answer, named once
        return f"{error.address or bootstrap}: {error}"
    if isinstance(error, TimeoutError):
        return f"cannot reach {bootstrap}: no answer within the timeout"
    return f"cannot reach {bootstrap}: {error.strerror or error}"


class WireClient:
    def __init__(self, host: str, port: int, timeout: float = 5.0, client_id: str = "minibroker-cli",
                 security=None, deadline: Deadline | None = None):
        self.client_id = client_id
        self.address = f"{host}:{port}"
        self.timeout = timeout
        self.deadline = deadline
        self._correlation = 0
        self._plaintext = security is None or security.protocol == "PLAINTEXT"
        self._tls = security is not None and security.tls
        self._answered = False  # a TLS listener refusing a client certificate closes before any answer
        try:
            self.sock = socket.create_connection((host, port), timeout=self._wait())
        except TimeoutError:
            self._timed_out()
            raise
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

    def _wait(self) -> float | None:
        return self.timeout if self.deadline is None else self.deadline.left(self.timeout)

    def _timed_out(self) -> None:
        """Raise CommandTimeout when a timeout was the command's deadline."""
        deadline = self.deadline
        if deadline is not None and deadline.at is not None and time.monotonic() >= deadline.at - 0.01:
            raise CommandTimeout(f"no answer within --timeout {deadline.seconds:g} s", self.address)

    def send(self, api_key: int, version: int, body) -> None:
        """A request that gets no answer (Produce with acks=0)."""
        self._correlation += 1
        self.sock.settimeout(self._wait())
        self.sock.sendall(codec.encode_request(api_key, version, self._correlation, body, self.client_id))

    def request(self, api_key: int, version: int, body, wait: float | None = None) -> codec.Struct:
        """The answer to one request; ``wait`` (seconds) is how long the broker may hold it beyond the
        timeout (a Fetch's max wait)."""
        self._correlation += 1
        try:
            self.sock.settimeout(self._wait())
            self.sock.sendall(codec.encode_request(api_key, version, self._correlation, body, self.client_id))
            if wait:
                self.sock.settimeout(None if self._wait() is None else self._wait() + wait)
            size = struct.unpack(">i", self._read(4))[0]
            frame = self._read(size)
        except ssl.SSLError as e:  # TLS 1.3: a refused client certificate shows after the handshake
            raise TlsHandshakeFailed(f"TLS connection to {self.address} failed: {e.reason or e} (does "
                                     "the listener require a client certificate? ssl.keystore.location)"
                                     ) from None
        except TimeoutError:
            self._timed_out()
            raise TimeoutError(f"no answer from {self.address} within {self.timeout:g} s") from None
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

    def __init__(self, host: str, port: int, timeout: float, security=None, client_id: str = "minibroker",
                 deadline: Deadline | None = None):
        self.address = (host, port)
        self.client = WireClient(host, port, timeout=timeout, client_id=client_id, security=security,
                                 deadline=deadline)
        try:
            answer = self.client.request(API_VERSIONS, 0, {})
        except BaseException:
            self.client.close()
            raise
        self.broker_max = {k.api_key: k.max_version for k in answer.api_keys}

    def version(self, api_key: int, at_least: int = 0, at_most: int | None = None) -> int:
        """The version to send: the highest both sides speak (at most ``at_most``, for a tool that reads
        topics by name where newer versions carry ids)."""
        name = codec.API_NAMES.get(api_key, api_key)
        if api_key not in self.broker_max:
            raise ToolError(f"the broker at {self.address[0]}:{self.address[1]} does not serve {name}")
        version = min(codec.REQUESTS[api_key].valid[1], self.broker_max[api_key])
        if at_most is not None:
            version = min(version, at_most)
        if version < at_least:
            raise ToolError(f"the broker serves {name} up to v{version}; this needs v{at_least}")
        return version

    def request(self, api_key: int, body, at_least: int = 0, at_most: int | None = None,
                wait: float | None = None) -> codec.Struct:
        return self.client.request(api_key, self.version(api_key, at_least, at_most), body, wait=wait)

    def send(self, api_key: int, body, at_least: int = 0, at_most: int | None = None) -> None:
        self.client.send(api_key, self.version(api_key, at_least, at_most), body)

    def close(self) -> None:
        self.client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def api_versions_probe(host: str, port: int, timeout: float = 2.0, security=None) -> bool:
    """True when the broker answers ApiVersions v0 with no error and a non-empty list (after TLS and
    SASL authentication when ``security`` asks for them), all within ``timeout`` seconds."""
    with WireClient(host, port, timeout=timeout, client_id="minibroker-healthcheck",
                    security=security, deadline=Deadline(timeout)) as client:
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
