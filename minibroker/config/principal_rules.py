"""``ssl.principal.mapping.rules``: Kafka's SslPrincipalMapper, the rule list that turns a client
certificate's distinguished name into a principal name.

Parsed when the configuration is loaded (a bad rule list stops start-up) and applied by the TLS listeners
at each handshake (minibroker/security/tls.py). Pure text: no ssl, no certificates here.
"""

from __future__ import annotations

import re

_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE)
_BACK_REFERENCE = re.compile(r"\$(\d+)")


class NoMatchingRule(ValueError):
    """No mapping rule applies to a certificate's distinguished name (Kafka fails the connection)."""


class MappingRule:
    """One ``RULE:pattern/replacement/[LU]`` (or ``DEFAULT``: the name as it is). The pattern is a
    Python regular expression, which agrees with Java's for the patterns such rules use; the
    replacement is Java's (``$1`` a group, ``\\x`` a literal x)."""

    __slots__ = ("pattern", "replacement", "case", "text")

    def __init__(self, pattern: str | None = None, replacement: str = "", case: str = ""):
        self.text = "DEFAULT" if pattern is None else f"RULE:{pattern}/{replacement}/{case}"
        try:
            self.pattern = None if pattern is None else re.compile(pattern)
        except re.error as e:
            raise ValueError(f"Invalid rule: {self.text}: {e}") from None
        self.replacement = replacement
        self.case = case

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        groups = self.pattern.groups
        replacement = _escape_literal_back_references(self.replacement, groups)
        result = self.pattern.sub(lambda m: _java_replacement(replacement, m), name)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result

    def __repr__(self) -> str:
        return self.text


def _escape_literal_back_references(replacement: str, groups: int) -> str:
    """A ``$n`` naming a group the pattern lacks becomes a literal ``$n`` (Kafka took the rule from
    Apache NiFi: ``$123`` with 12 groups is group 12 then ``3``, with 0 groups a literal)."""
    if groups == 0:
        return replacement
    value = replacement
    for m in _BACK_REFERENCE.finditer(replacement):  # positions of the original, as Kafka's loop
        digits = m.group(1)
        if digits.startswith("0"):
            continue
        index = int(digits)
        while index > groups and index >= 10:
            index //= 10
        if index > groups:
            start = m.start(1)
            value = value[:start - 1] + "\\" + value[start - 1:]
    return value


def _java_replacement(replacement: str, match: re.Match) -> str:
    """``Matcher.appendReplacement``'s reading of ``replacement`` for one match."""
    out = []
    i, n = 0, len(replacement)
    groups = match.re.groups
    while i < n:
        c = replacement[i]
        if c == "\\":
            i += 1
            if i >= n:
                raise ValueError("character to be escaped is missing")
            out.append(replacement[i])
            i += 1
        elif c == "$":
            i += 1
            if i >= n:
                raise ValueError("Illegal group reference: group index is missing")
            if replacement[i] == "{":
                end = replacement.find("}", i)
                if end < 0:
                    raise ValueError("named capturing group is missing trailing '}'")
                out.append(match.group(replacement[i + 1:end]) or "")
                i = end + 1
                continue
            if not replacement[i].isdigit():
                raise ValueError("Illegal group reference")
            index = int(replacement[i])
            i += 1
            while i < n and replacement[i].isdigit():  # more digits while they still name a group
                longer = index * 10 + int(replacement[i])
                if longer > groups:
                    break
                index = longer
                i += 1
            if index > groups:
                raise ValueError(f"No group {index}")
            out.append(match.group(index) or "")
        else:
            out.append(c)
            i += 1
    return "".join(out)


class PrincipalMapper:
    """``ssl.principal.mapping.rules``: comma-separated rules tried in order; the first that matches
    the whole distinguished name gives the principal name. Raises ValueError for a bad rule list."""

    __slots__ = ("rules",)

    def __init__(self, rules: str | None):
        self.rules: list[MappingRule] = []
        for text in self.split(rules if rules is not None else "DEFAULT"):
            m = _RULE_PARSER.match(text)
            if m is None or m.end() != len(text):
                unmatched = text[m.end():] if m is not None else text
                raise ValueError(f"Invalid rule: `{text}`, unmatched substring: `{unmatched}`")
            if m.group(1) is not None:
                self.rules.append(MappingRule())
            elif m.group(2) is not None:
                self.rules.append(MappingRule(m.group(2), m.group(4), m.group(6)))
            # an empty rule is ignored, as Kafka does

    @staticmethod
    def split(rules: str) -> list[str]:
        return [m.group(1) for m in _RULE_SPLITTER.finditer(rules.strip())]

    def name_for(self, distinguished_name: str) -> str:
        for rule in self.rules:
            name = rule.apply(distinguished_name)
            if name is not None:
                return name
        raise NoMatchingRule(f"No rules apply to {distinguished_name}, rules {self.rules}")
