"""JAAS configuration text, as Kafka's ``sasl.jaas.config`` values carry it.

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_alice="alice-secret";

One or more entries, each ``<login module class> <control flag> (<key>=<value>)* ;``. The syntax is
Java's ``StreamTokenizer`` as Kafka's ``JaasConfig`` sets it up: ``//`` and ``/* */`` comments; words
of letters, digits, ``. - _ $``; values quoted with ``"`` or ``'`` (a quoted value ends at its quote or
at the end of the line) with backslash escapes (``\\n \\t \\r \\b \\f \\a \\v``, octal ``\\ooo``, any other
character as itself). Unlike Java, an unquoted value may start with a digit (``iterations=4096``).
"""

from __future__ import annotations

from typing import NamedTuple

CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")
_WORD_EXTRA = set(".-_$")
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


class JaasEntry(NamedTuple):
    login_module: str
    control_flag: str  # lower case: required, requisite, sufficient or optional
    options: dict[str, str]


def _is_word_char(c: str) -> bool:
    return c.isalnum() or c in _WORD_EXTRA or ord(c) >= 128


def _tokens(text: str):
    """(kind, value) pairs: kind "word", "quoted" or the character itself ("=", ";", ...)."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                return
            i = end + 2
        elif c in "\"'":
            value, i = _quoted(text, i + 1, c)
            yield "quoted", value
        elif _is_word_char(c):
            start = i
            while i < n and _is_word_char(text[i]):
                i += 1
            yield "word", text[start:i]
        else:
            yield c, c
            i += 1


def _quoted(text: str, i: int, quote: str) -> tuple[str, int]:
    out = []
    n = len(text)
    while i < n:
        c = text[i]
        if c == quote:
            return "".join(out), i + 1
        if c in "\r\n":  # StreamTokenizer ends an unterminated quoted string at the line's end
            return "".join(out), i
        if c == "\\" and i + 1 < n:
            nxt = text[i + 1]
            if nxt in "01234567":
                j = i + 1
                limit = i + (4 if nxt <= "3" else 3)
                while j < min(limit, n) and text[j] in "01234567":
                    j += 1
                out.append(chr(int(text[i + 1:j], 8)))
                i = j
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out), i


def parse_jaas_config(text: str) -> list[JaasEntry]:
    """The entries of a JAAS configuration; raises ValueError with Kafka's reasons."""
    tokens = list(_tokens(text))
    entries: list[JaasEntry] = []
    i = 0
    while i < len(tokens):
        kind, module = tokens[i]
        if kind not in ("word", "quoted"):
            raise ValueError(f"unexpected {module!r} where a login module class was expected in JAAS config")
        i += 1
        if i >= len(tokens):
            raise ValueError("Login module control flag not specified in JAAS config")
        flag = tokens[i][1]
        if tokens[i][0] != "word" or flag.lower() not in CONTROL_FLAGS:
            raise ValueError(f"Invalid login module control flag '{flag}' in JAAS config")
        i += 1
        options: dict[str, str] = {}
        while i < len(tokens) and tokens[i][0] != ";":
            kind, key = tokens[i]
            if kind not in ("word", "quoted"):
                raise ValueError(f"unexpected {key!r} in JAAS config")
            if (i + 2 >= len(tokens) or tokens[i + 1][0] != "="
                    or tokens[i + 2][0] not in ("word", "quoted")):
                raise ValueError(f"Value not specified for key '{key}' in JAAS config")
            options[key] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise ValueError("JAAS config entry not terminated by semi-colon")
        i += 1  # the ";"
        entries.append(JaasEntry(module, flag.lower(), options))
    if not entries:
        raise ValueError("Login module not specified in JAAS config")
    return entries


def module_options(entries: list[JaasEntry], login_module: str) -> dict[str, str] | None:
    """The options of the first entry for ``login_module``, None when there is none."""
    for entry in entries:
        if entry.login_module == login_module:
            return entry.options
    return None
