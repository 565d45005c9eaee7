"""Where configuration comes from: Java ``.properties`` files, ``KAFKA_*`` environment variables (as the
apache/kafka image maps them) and ``--override key=value`` items, each read as strings; minibroker/config/
broker.py types and layers them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

__all__ = [
    "ConfigError",
    "env_to_properties",
    "env_var_to_key",
    "key_to_env_var",
    "parse_overrides",
    "parse_properties",
]


class ConfigError(ValueError):
    """A broker configuration value is missing, malformed or out of range (a start-up error)."""



# ---------------------------------------------------------------------------------------------------
# Java .properties parsing.

_WS = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        i += 1
        if c != "\\":
            out.append(c)
            continue
        if i >= n:
            break  # a lone trailing backslash is dropped
        c = text[i]
        i += 1
        if c == "u":
            digits = text[i:i + 4]
            if len(digits) != 4 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise ConfigError(f"Malformed \\uxxxx escape in properties: {text!r}")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(c, c))
    return "".join(out)


def _ends_with_continuation(line: str) -> bool:
    count = len(line) - len(line.rstrip("\\"))
    return count % 2 == 1


def parse_properties(text: str, line_numbers: dict[str, int] | None = None) -> dict[str, str]:
    """Parse Java ``.properties`` text as ``java.util.Properties.load`` does; later keys win.

    Comments start with ``#`` or ``!``; ``key=value``, ``key:value`` and ``key value`` all work;
    a line ending in an odd number of backslashes continues on the next (whose leading blanks are
    dropped); ``\\t \\n \\r \\f \\uXXXX`` escapes are decoded and any other escaped character stands
    for itself (``\\=``, ``\\:``, ``\\ `` and ``\\#`` in keys).
    """
    lines = re.split(r"\r\n|\r|\n", text)
    result: dict[str, str] = {}
    i, n = 0, len(lines)
    while i < n:
        line = lines[i].lstrip(_WS)
        i += 1
        first_line = i  # 1-based, for ``line_numbers``
        if not line or line[0] in "#!":
            continue
        while _ends_with_continuation(line):
            line = line[:-1]
            if i >= n:
                break
            line += lines[i].lstrip(_WS)
            i += 1
        # the key ends at the first unescaped '=', ':' or blank
        key_end, value_start, has_sep, escaped = len(line), len(line), False, False
        for pos, c in enumerate(line):
            if not escaped and c in "=:":
                key_end, value_start, has_sep = pos, pos + 1, True
                break
            if not escaped and c in _WS:
                key_end, value_start = pos, pos + 1
                break
            escaped = (c == "\\") and not escaped
        while value_start < len(line):
            c = line[value_start]
            if c in _WS:
                value_start += 1
            elif not has_sep and c in "=:":
                has_sep = True
                value_start += 1
            else:
                break
        result[_unescape(line[:key_end])] = _unescape(line[value_start:])
        if line_numbers is not None:  # key -> the line it (last) starts on, for messages
            line_numbers[_unescape(line[:key_end])] = first_line
    return result


def read_properties_file(path: str, line_numbers: dict[str, int] | None = None) -> dict[str, str]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConfigError(f"Cannot read configuration file {path}: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")  # what Java's Properties.load(InputStream) assumes
    return parse_properties(text, line_numbers)


# ---------------------------------------------------------------------------------------------------
# Environment variables, as the apache/kafka image maps them.

# Variables the image (and Kafka's launch scripts) use for the JVM and logging, never as broker keys.
ENV_NOT_CONFIG = frozenset({
    "KAFKA_VERSION", "KAFKA_HEAP_OPTS", "KAFKA_LOG4J_OPTS", "KAFKA_OPTS", "KAFKA_JMX_OPTS",
    "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_GC_LOG_OPTS", "KAFKA_LOG4J_ROOT_LOGLEVEL", "KAFKA_LOG4J_LOGGERS",
    "KAFKA_TOOLS_LOG4J_LOGLEVEL", "KAFKA_JMX_HOSTNAME", "KAFKA_JMX_PORT", "KAFKA_DEBUG", "KAFKA_HOME",
})
ENV_NOT_CONFIG_PREFIXES = ("KAFKA_JMX_", "KAFKA_LOG4J_")


def env_var_to_key(var: str) -> str:
    """``KAFKA_LOG_DIRS`` -> ``log.dirs``: drop the prefix, lower-case, ``_`` -> ``.``, ``__`` -> ``_``,
    ``___`` -> ``-`` (the apache/kafka image's rule)."""
    return var[len("KAFKA_"):].lower().replace("_", ".").replace("...", "-").replace("..", "_")


def key_to_env_var(key: str) -> str:
    """The inverse of ``env_var_to_key``: ``log.dirs`` -> ``KAFKA_LOG_DIRS``."""
    return "KAFKA_" + key.replace("_", "__").replace("-", "___").replace(".", "_").upper()


def env_to_properties(environ: Mapping[str, str]) -> dict[str, str]:
    """Broker properties given as ``KAFKA_*`` environment variables.

    As in the apache/kafka image, when ``KAFKA_ADVERTISED_LISTENERS`` is set and ``KAFKA_LISTENERS``
    is not, the listeners are derived from the advertised ones bound to all interfaces (0.0.0.0).
    """
    props: dict[str, str] = {}
    for var in sorted(environ):
        if (not var.startswith("KAFKA_") or var in ENV_NOT_CONFIG
                or var.startswith(ENV_NOT_CONFIG_PREFIXES) or len(var) == len("KAFKA_")):
            continue
        props[env_var_to_key(var)] = environ[var]
    advertised = environ.get("KAFKA_ADVERTISED_LISTENERS")
    is_controller_only = environ.get("KAFKA_PROCESS_ROLES") == "controller"
    if advertised and not environ.get("KAFKA_LISTENERS") and not is_controller_only:
        props["listeners"] = re.sub(r"://(\[[^\]]*\]|[^:]*):", "://0.0.0.0:", advertised)
    return props


def parse_overrides(overrides: Iterable[str]) -> dict[str, str]:
    """``["key=value", ...]`` as given to ``--override``; the value may itself contain ``=``."""
    props: dict[str, str] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"Invalid --override {item!r}: expected key=value")
        props[key.strip()] = value
    return props

