"""Listeners: ``listeners`` and ``advertised.listeners`` (``NAME://host:port,...``) and the
``listener.security.protocol.map`` that gives each name its security protocol."""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable, Mapping

__all__ = ["Listener", "address_key", "parse_listeners", "parse_security_protocol_map", "resolve_advertised"]

DEFAULT_PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"


def csv_items(value: str) -> list[str]:
    """The items of a comma-separated value, stripped, empty ones dropped (Kafka's ``parseCsvList``)."""
    return [item.strip() for item in value.split(",") if item.strip()]

def address_key(host: str) -> str:
    """A peer address as the connection limits and quotas count it: an IPv4-mapped IPv6 address (what a
    dual-stack listener reports for an IPv4 client) is the IPv4 address, as Java sees it."""
    if host.startswith("::ffff:") and "." in host:
        return host[7:]
    return host


Listener = collections.namedtuple("Listener", "name host port")
Listener.__doc__ = "One listener: upper-case name, host ('' = all interfaces), port (0 = ephemeral)."

_LISTENER_RE = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*?)\]?:(-?[0-9]+)$")


def parse_security_protocol_map(value: str) -> dict[str, str]:
    """``"PLAINTEXT:PLAINTEXT,SSL:SSL"`` -> ``{"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}``."""
    result: dict[str, str] = {}
    for item in csv_items(value):
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or not name.strip() or protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ValueError(f"bad listener.security.protocol.map entry {item!r}: expected NAME:PROTOCOL")
        result[name.strip().upper()] = protocol
    return result


def parse_listeners(value: str, protocol_map: Mapping[str, str] | None = None, *,
                    _check_names: bool = True) -> list[Listener]:
    """Parse ``"PLAINTEXT://host:port,..."`` into ``Listener(name, host, port)`` tuples.

    Names are upper-cased and must be unique and present in ``protocol_map`` (Kafka's default map
    when None); IPv6 hosts are written in brackets; raises ValueError(reason).
    """
    if protocol_map is None:
        protocol_map = parse_security_protocol_map(DEFAULT_PROTOCOL_MAP)
    result: list[Listener] = []
    for item in csv_items(value):
        m = _LISTENER_RE.match(item)
        if not m:
            raise ValueError(f"listener {item!r} is not of the form NAME://host:port")
        name, host, port = m.group(1).upper(), m.group(2), int(m.group(3))
        if not name:
            raise ValueError(f"listener {item!r} has no name")
        if not 0 <= port <= 65535:
            raise ValueError(f"listener {item!r}: port must be between 0 and 65535")
        if _check_names and name not in protocol_map:
            raise ValueError(f"listener name {name} is not in listener.security.protocol.map")
        if any(lst.name == name for lst in result):
            raise ValueError(f"listener name {name} appears more than once")
        result.append(Listener(name, host, port))
    return result


def resolve_advertised(advertised: Iterable[Listener], bound_ports: Mapping[str, int],
                       default_host: str = "") -> list[Listener]:
    """Advertised listeners with port 0 replaced by the port each listener actually bound
    (``bound_ports`` by listener name) and an empty host by ``default_host`` (the server passes
    its bound address or host name)."""
    result = []
    for lst in advertised:
        port = bound_ports.get(lst.name, lst.port) if lst.port == 0 else lst.port
        result.append(Listener(lst.name, lst.host or default_host, port))
    return result

