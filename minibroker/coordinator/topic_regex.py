"""Subscription regexes (KIP-848 ``SubscribedTopicRegex``) as Kafka reads them: RE2/J syntax, matched
against a whole topic name (Kafka's ``Pattern.compile(regex).matcher(topic).matches()`` with
``com.google.re2j``).

An RE2/J pattern is translated to Python ``re`` source with the same meaning over topic names (ASCII,
no newline): constructs RE2/J rejects (lookaround, backreferences, atomic groups, possessive
quantifiers, repetition counts above 1000, ``\\Z``) raise RegexError rather than being taken by Python's
more permissive parser; ``\\Q...\\E``, ``\\z``, ``(?<name>...)``, ``[[:class:]]``, the ungreedy flag
``U`` and the Unicode classes ``\\pL``/``\\p{Lu}``/``\\PN`` are rewritten.

Matching never backtracks for long: Python's engine does, so a pattern whose backtracking could grow
(a group holding a quantifier or an alternation, itself repeated, or more than
MAX_UNBOUNDED_REPETITIONS quantifiers in one alternative; a quantifier repeats (``*``, ``+``, ``{2}``,
``{1,5}``) or leaves a choice (``?``, ``{0,3}``)) is matched by ``PositionSetMatcher``
instead, which walks the parsed pattern carrying the set of positions reached, as an automaton would
(RE2's own guarantee: time linear in the name for a given pattern). Both answer ``fullmatch(name)``.
"""

from __future__ import annotations

import re
import unicodedata
from re import _constants as sre  # the node names of re._parser's tree
from re import _parser

__all__ = ["MAX_UNBOUNDED_REPETITIONS", "PositionSetMatcher", "RegexError", "compile_re2", "translate_re2"]


class RegexError(ValueError):
    """A subscription regex that RE2/J would not accept, or that Python cannot express the same way."""


_POSIX_CLASSES = {
    "alnum": "0-9A-Za-z", "alpha": "A-Za-z", "ascii": "\\x00-\\x7f", "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f", "digit": "0-9", "graph": "!-~", "lower": "a-z", "print": " -~",
    "punct": "!-/:-@\\[-`{-~", "space": "\\t\\n\\v\\f\\r ", "upper": "A-Z", "word": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}
_ASCII = [chr(i) for i in range(128)]
# Unicode general categories, one letter (L) or two (Lu), as RE2/J names them; over ASCII names only
_CATEGORIES = {cat for c in _ASCII for cat in (unicodedata.category(c)[0], unicodedata.category(c))}
_SCRIPTS = {"Any": _ASCII, "Latin": [c for c in _ASCII if c.isalpha()],
            "Common": [c for c in _ASCII if not c.isalpha()]}
_COUNTED = re.compile(r"\{(\d+)(?:,(\d*))?\}")
MAX_REPEAT = 1000  # RE2's limit on a repetition count
MAX_UNBOUNDED_REPETITIONS = 3  # more in one alternative: matched by PositionSetMatcher (n^k backtracking)


def _varies(pattern: str, i: int) -> bool:
    """Whether a quantifier with a choice of counts (``*``, ``+``, ``?``, ``{n,}``, ``{n,m}``) stands at
    ``i``: each is a point Python's engine may come back to."""
    if pattern.startswith(("*", "+", "?"), i):
        return True
    counted = _COUNTED.match(pattern, i)
    return counted is not None and counted.group(2) is not None and counted.group(2) != counted.group(1)


def _repeats(pattern: str, i: int) -> bool:
    """Whether a quantifier that allows more than one repetition (``*``, ``+``, ``{n,}``, ``{n,m}`` with
    m > 1, ``{n}`` with n > 1) stands at ``i``: what makes Python's engine backtrack."""
    if pattern.startswith(("*", "+"), i):
        return True
    counted = _COUNTED.match(pattern, i)
    if counted is None:
        return False
    low, high = counted.groups()
    return high == "" or int(high if high is not None else low) > 1


def _unicode_class(pattern: str, i: int) -> tuple[list[str], int]:
    """The ASCII characters ``\\pX``, ``\\p{Name}``, ``\\PX`` or ``\\p{^Name}`` at ``i`` stands for, and
    the index after it."""
    negated = pattern[i + 1] == "P"
    if i + 2 >= len(pattern):
        raise RegexError("invalid character class range: \\p")
    if pattern[i + 2] == "{":
        end = pattern.find("}", i + 3)
        if end < 0:
            raise RegexError("invalid character class range: missing }")
        name, after = pattern[i + 3:end], end + 1
    else:
        name, after = pattern[i + 2], i + 3
    if name.startswith("^"):
        negated, name = not negated, name[1:]
    if name in _SCRIPTS:
        chars = _SCRIPTS[name]
    elif name in _CATEGORIES or (len(name) <= 2 and name[:1] in "LMNPSZC" and name.isalpha()):
        chars = [c for c in _ASCII if unicodedata.category(c).startswith(name)]
    else:  # RE2/J knows every Unicode script; minibroker only those found in topic names
        raise RegexError(f"unsupported Unicode class {name!r} (minibroker knows the general categories, "
                         "Latin, Common and Any)")
    if negated:
        chars = [c for c in _ASCII if c not in chars]
    return chars, after


def _class_body(chars: list[str]) -> str:
    return "".join(re.escape(c) if c not in "-]\\^" else "\\" + c for c in chars)


def translate_re2(pattern: str) -> tuple[str, bool]:
    """An RE2/J pattern as Python ``re`` source with the same meaning on topic names (compiled with
    re.ASCII, matched with fullmatch), and whether Python's backtracking could take long on it.
    Raises RegexError for what RE2/J rejects."""
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = False
    # per open group: whether it holds an unbounded quantifier or an alternation (a repeated such group
    # backtracks exponentially in Python's engine); and the unbounded repetitions of the alternative
    # being read, per nesting level
    groups: list[bool] = []
    # per nesting level: [this alternative's quantifiers, the most of an earlier one, 1 if alternatives]
    counts: list[list[int]] = [[0, 0, 0]]
    # per nesting level: the flags set by (?flags) so far. RE2 applies them to the rest of the group,
    # alternatives included; Python takes flags only at the very start or scoped, (?flags:...), so each
    # is opened as a scope, closed before a | or the group's end and opened again after the |
    scopes: list[list[str]] = [[]]
    risky = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n:
                raise RegexError("trailing backslash")
            d = pattern[i + 1]
            if d == "Q":
                end = pattern.find("\\E", i + 2)
                literal = pattern[i + 2:] if end < 0 else pattern[i + 2:end]
                out.append(_class_body(list(literal)) if in_class else re.escape(literal))
                i = n if end < 0 else end + 2
                continue
            if d in "pP":
                chars, i = _unicode_class(pattern, i)
                body = _class_body(chars)
                out.append(body if in_class else (f"[{body}]" if body else "(?!)"))
                continue
            if d == "z":
                out.append("\\Z")
            elif d.isdigit() and d != "0" or d in "ZCkKgGRXhHN":
                raise RegexError(f"unsupported escape \\{d}")
            else:
                out.append(c + d)
            i += 2
            continue
        if in_class:
            if c == "[" and pattern.startswith("[:", i):
                end = pattern.find(":]", i + 2)
                name = pattern[i + 2:end] if end > 0 else ""
                negated = name.startswith("^")
                body = _POSIX_CLASSES.get(name.lstrip("^"))
                if body is None or negated:
                    raise RegexError(f"unsupported character class [:{name}:]")
                out.append(body)
                i = end + 2
                continue
            if c == "[":
                out.append("\\[")  # a literal [ inside a class (Python would warn about nested sets)
                i += 1
                continue
            if c == "]" and not (out and out[-1] in ("[", "[^")):
                in_class = False
            out.append(c)
            i += 1
            continue
        if c == "[":
            in_class = True
            if pattern.startswith("[^", i):
                out.append("[^")
                i += 2
            else:
                out.append("[")
                i += 1
            if i < n and pattern[i] == "]":  # a leading ] is literal
                out.append("\\]")
                i += 1
            continue
        counted = _COUNTED.match(pattern, i) if c == "{" else None
        if counted is not None and any(v and int(v) > MAX_REPEAT for v in counted.groups()):
            raise RegexError(f"bad repetition operator: {counted.group(0)}")
        if c == "{" and counted is None:  # a literal brace in RE2 ({,3} too, which Python would repeat)
            out.append("\\{")
            i += 1
            continue
        if c == "(":
            groups.append(False)
            counts.append([0, 0, 0])
            scopes.append([])
        elif c == ")" and groups:
            out.append(")" * len(scopes.pop()))
            holds = groups.pop()
            current, most, alternatives = counts.pop()
            inner = max(current, most) + alternatives  # a group of alternatives is a choice itself
            repeated = _repeats(pattern, i + 1)
            if holds and repeated:
                risky = True
            if groups and (holds or repeated):
                groups[-1] = True
            counts[-1][0] += inner
        elif c == "|":
            if groups:
                groups[-1] = True
            counts[-1] = [0, max(counts[-1][:2]), 1]
            out.append(")" * len(scopes[-1]) + "|" + "".join(f"(?{f}:" for f in scopes[-1]))
            i += 1
            continue
        elif _repeats(pattern, i) or _varies(pattern, i):
            counts[-1][0] += 1
            if groups:
                groups[-1] = True
        if counts[-1][0] > MAX_UNBOUNDED_REPETITIONS:
            risky = True
        if c == "(" and pattern.startswith("(?", i):
            rest = pattern[i + 2:]
            if rest.startswith("P<"):
                out.append("(?P<")
                i += 4
                continue
            if rest.startswith("<") and not rest.startswith(("<=", "<!")):
                out.append("(?P<")
                i += 3
                continue
            if rest[:1] in ("=", "!", "<", ">", "(", "#") or rest.startswith("P="):
                raise RegexError("lookaround, backreferences, atomic and conditional groups are not RE2")
            flags = re.match(r"([imsU]*)(?:-([imsU]*))?([:)])", rest)
            if flags is None or flags.group(2) == "":
                raise RegexError("unsupported group flags")
            # U (ungreedy) changes which match is found, not whether one is: fullmatch ignores it
            on, off = flags.group(1).replace("U", ""), (flags.group(2) or "").replace("U", "")
            end = flags.group(3)
            i += 2 + flags.end()
            text = on + ("-" + off if off else "")
            if end == ":":
                out.append(f"(?{text}:")
            else:  # a flag group, not a group: its flags hold to the end of the enclosing one
                groups.pop()
                counts.pop()
                scopes.pop()
                if text:
                    out.append(f"(?{text}:")
                    scopes[-1].append(text)
            continue
        if c in "*+?}" and i + 1 < n and pattern[i + 1] == "+":
            raise RegexError("possessive quantifiers are not RE2")
        out.append(c)
        i += 1
    if in_class:
        raise RegexError("missing ]")
    out.append(")" * len(scopes[0]))
    return "".join(out), risky


class PositionSetMatcher:
    """``fullmatch`` over a parsed pattern without backtracking: each node maps the set of positions
    it may start at to the set it may end at, so a repetition is a fixed point over at most
    len(name) + 1 positions. Whether a match exists does not depend on greediness, which it ignores."""

    def __init__(self, source: str):
        parsed = _parser.parse(source, re.ASCII)
        self.pattern = source
        self._items = list(parsed.data)
        self._flags = parsed.state.flags
        self._check(self._items)

    def _check(self, items) -> None:
        for op, av in items:
            if op is sre.BRANCH:
                for alt in av[1]:
                    self._check(alt.data)
            elif op is sre.SUBPATTERN:
                self._check(av[3].data)
            elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
                self._check(av[2].data)
            elif op not in (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN, sre.AT):
                raise RegexError(f"unsupported construct {op}")

    def fullmatch(self, text: str) -> bool:
        return len(text) in self._seq(self._items, {0}, text, self._flags)

    def _seq(self, items, positions: set[int], text: str, flags: int) -> set[int]:
        for op, av in items:
            if not positions:
                break
            positions = self._node(op, av, positions, text, flags)
        return positions

    def _node(self, op, av, positions: set[int], text: str, flags: int) -> set[int]:
        n = len(text)
        if op is sre.AT:
            return {p for p in positions if _at(av, p, text)}
        if op is sre.BRANCH:
            out: set[int] = set()
            for alt in av[1]:
                out |= self._seq(alt.data, positions, text, flags)
            return out
        if op is sre.SUBPATTERN:
            _, add, remove, sub = av
            return self._seq(sub.data, positions, text, (flags | add) & ~remove)
        if op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
            low, high, sub = av
            for _ in range(low):
                positions = self._seq(sub.data, positions, text, flags)
                if not positions:
                    return positions
            reached, frontier, count = set(positions), positions, low
            while frontier and (high is sre.MAXREPEAT or count < high):
                # a position reached again was reached with more repetitions left: nothing new from it
                frontier = self._seq(sub.data, frontier, text, flags) - reached
                reached |= frontier
                count += 1
            return reached
        ignore_case = bool(flags & re.IGNORECASE)
        return {p + 1 for p in positions if p < n and _char_matches(op, av, text[p], ignore_case)}


def _char_matches(op, av, ch: str, ignore_case: bool) -> bool:
    if op is sre.ANY:
        return ch != "\n"  # topic names hold no newline; (?s) would allow it
    if op is sre.LITERAL or op is sre.NOT_LITERAL:
        same = ch == chr(av) or (ignore_case and ch.lower() == chr(av).lower())
        return same if op is sre.LITERAL else not same
    chars = {ch, ch.lower(), ch.upper()} if ignore_case else {ch}
    negated = bool(av) and av[0][0] is sre.NEGATE
    hit = any(_in_set(item, c) for item in av for c in chars)
    return hit != negated


def _in_set(item, ch: str) -> bool:
    op, av = item
    code = ord(ch)
    if op is sre.LITERAL:
        return code == av
    if op is sre.RANGE:
        return av[0] <= code <= av[1]
    if op is sre.CATEGORY:
        digit, space, word = ch.isdigit(), ch in " \t\n\r\f\v", ch.isalnum() or ch == "_"
        return {
            sre.CATEGORY_DIGIT: digit, sre.CATEGORY_NOT_DIGIT: not digit,
            sre.CATEGORY_SPACE: space, sre.CATEGORY_NOT_SPACE: not space,
            sre.CATEGORY_WORD: word, sre.CATEGORY_NOT_WORD: not word,
        }.get(av, False)
    return False


def _is_word(text: str, p: int) -> bool:
    return 0 <= p < len(text) and (text[p].isalnum() or text[p] == "_")


def _at(code, p: int, text: str) -> bool:
    if code in (sre.AT_BEGINNING, sre.AT_BEGINNING_STRING):
        return p == 0
    if code in (sre.AT_END, sre.AT_END_STRING):
        return p == len(text)
    boundary = _is_word(text, p - 1) != _is_word(text, p)
    return boundary if code is sre.AT_BOUNDARY else not boundary


def compile_re2(pattern: str):
    """A matcher with ``fullmatch(topic)`` for an RE2/J pattern: Python's compiled ``re`` where its
    backtracking stays short, else a PositionSetMatcher. Raises RegexError for what RE2/J rejects."""
    source, risky = translate_re2(pattern)
    try:
        compiled = re.compile(source, re.ASCII)
    except re.error as e:
        raise RegexError(str(e)) from None
    return PositionSetMatcher(source) if risky else compiled
