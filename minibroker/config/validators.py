"""Validators of configuration values: callables that raise ValueError(reason) and can describe what
they allow (the "Valid values" column of docs/configuration.md)."""

from __future__ import annotations

from typing import Any

from minibroker.config.listeners import csv_items, parse_listeners


class AtLeast:
    __slots__ = ("low",)

    def __init__(self, low: int | float):
        self.low = low

    def __call__(self, value: Any) -> None:
        if value is not None and value < self.low:
            raise ValueError(f"must be at least {self.low}")

    def describe(self) -> str:
        return f"[{self.low},...]"


class Between:
    __slots__ = ("low", "high", "also")

    def __init__(self, low: int | float, high: int | float, also: tuple = ()):
        self.low, self.high, self.also = low, high, also

    def __call__(self, value: Any) -> None:
        if value is not None and value not in self.also and not (self.low <= value <= self.high):
            extra = "".join(f" or {a}" for a in self.also)
            raise ValueError(f"must be between {self.low} and {self.high}{extra}")

    def describe(self) -> str:
        return f"[{self.low},...,{self.high}]" + "".join(f" or {a}" for a in self.also)


class OneOf:
    __slots__ = ("values",)

    def __init__(self, *values: Any):
        self.values = values

    def __call__(self, value: Any) -> None:
        if value is not None and value not in self.values:
            raise ValueError(f"must be one of {', '.join(map(str, self.values))}")

    def describe(self) -> str:
        return "[" + ", ".join(map(str, self.values)) + "]"


class AuthorizerClassName:
    """``authorizer.class.name``: empty (no authorizer) or one of Kafka's ACL authorizers, which
    minibroker serves alike (minibroker/security/authorizer.py); any other class cannot be loaded."""

    NAMES = ("org.apache.kafka.metadata.authorizer.StandardAuthorizer",
             "kafka.security.authorizer.AclAuthorizer")

    def __call__(self, value: Any) -> None:
        if value and value not in self.NAMES:
            raise ValueError(f"minibroker cannot load authorizer class {value}; it serves Kafka's ACL "
                             f"authorizer, named {self.NAMES[0]} (or {self.NAMES[1]}), or none (empty)")

    def describe(self) -> str:
        return "[\"\", " + ", ".join(self.NAMES) + "]"


class PrincipalList:
    """``super.users``: principals ``Type:name`` separated by semicolons."""

    def __call__(self, value: Any) -> None:
        for item in (value or "").split(";"):
            type_, sep, _name = item.strip().partition(":")
            if item.strip() and not (sep and type_):
                raise ValueError(f"{item.strip()!r} is not a principal of the form Type:name (User:alice)")

    def describe(self) -> str:
        return "Type:name;Type:name..."


class ListOf:
    """Every item of a list must be one of ``values``; the list may be empty only when
    ``allow_empty`` (Kafka's ``ValidList.in`` accepts an empty list: ``cleanup.policy=`` is legal)."""

    __slots__ = ("values", "allow_empty")

    def __init__(self, *values: str, allow_empty: bool = False):
        self.values = values
        self.allow_empty = allow_empty

    def __call__(self, value: Any) -> None:
        if value is None:
            return
        if not value and not self.allow_empty:
            raise ValueError("must not be empty")
        bad = [v for v in value if v not in self.values]
        if bad:
            raise ValueError(f"items must be among {', '.join(self.values)} (got {', '.join(bad)})")

    def describe(self) -> str:
        return "[" + ", ".join(self.values) + "]"


class _Parsed:
    """A value its parser accepts (``parse`` raises ValueError otherwise); ``text`` describes it."""

    __slots__ = ()
    text = ""

    def parse(self, value: Any) -> None:
        raise NotImplementedError

    def __call__(self, value: Any) -> None:
        if value is not None:
            self.parse(value)

    def describe(self) -> str:
        return self.text


class HostCounts(_Parsed):
    """``host:count`` pairs separated by commas (``max.connections.per.ip.overrides``)."""

    __slots__ = ()
    text = "host:count,..."

    def parse(self, value: Any) -> None:
        parse_host_counts(value)


def parse_host_counts(value: str) -> dict[str, int]:
    """``"host:count,host:count"`` as {host: count}; split at each item's last colon, as Kafka's
    ``parseCsvMap`` does, so IPv6 addresses need no brackets. Raises ValueError."""
    out: dict[str, int] = {}
    for item in csv_items(value):
        host, sep, count = item.rpartition(":")
        host = host.strip().removeprefix("[").removesuffix("]")
        if not sep or not host:
            raise ValueError(f"{item!r} is not host:count")
        try:
            out[host] = int(count.strip())
        except ValueError:
            raise ValueError(f"{item!r}: the count is not an integer") from None
        if out[host] < 0:
            raise ValueError(f"{item!r}: the count must be at least 0")
    return out


class PrincipalMappingRules(_Parsed):
    """``ssl.principal.mapping.rules``: Kafka's SslPrincipalMapper rule list (principal_rules.py)."""

    __slots__ = ()
    text = "RULE:pattern/replacement/[LU],...,DEFAULT"

    def parse(self, value: Any) -> None:
        from minibroker.config.principal_rules import PrincipalMapper  # only when the key is set

        PrincipalMapper(value)


class ListenerList(_Parsed):
    """A comma-separated listener list: ``NAME://host:port,...``."""

    __slots__ = ()
    text = "NAME://host:port,..."

    def parse(self, value: Any) -> None:
        parse_listeners(value, _check_names=False)  # names are checked against the map later

