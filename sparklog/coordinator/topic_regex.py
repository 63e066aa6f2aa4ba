"""KIP-848 regular-expression subscriptions (``SubscribedTopicRegex``): Google RE2/J syntax,
as Kafka 4 compiles it, translated to a Python ``re`` pattern that matches the same topic
names.

``compile_topic_regex(pattern)`` returns a compiled pattern anchored at both ends (Kafka
matches a whole topic name: ``match``, ``search`` and ``fullmatch`` all mean that here), or
raises ``ValueError`` with RE2/J's reason, which the group answers as
INVALID_REGULAR_EXPRESSION.

Invariants:
- The syntax is RE2/J's (a port of Go's ``regexp/syntax``, with ``Pattern.compile``'s
  default flags): what RE2/J refuses is refused: backreferences (``\\1``, ``\\k<n>``),
  lookaround (``(?=``, ``(?!``, ``(?<=``, ``(?<!``), atomic groups (``(?>``), possessive or
  stacked quantifiers (``a*+``, ``a**``), ``\\Z``, ``\\G``, ``\\C``, ``(?x)``, comments,
  unknown escapes and Unicode classes, counts over 1000, duplicate group names.
- What Python spells otherwise is translated: ``\\Q...\\E`` (literal text), ``(?P<n>`` and
  ``(?<n>`` (named groups; every group becomes non-capturing, only the match matters), POSIX
  classes (``[[:alpha:]]``), ``\\pL`` / ``\\p{Greek}`` / ``\\P{^Lu}``, ``\\z`` (end of text),
  ``$`` (end of text only, as RE2 outside ``(?m)``, not before a final newline), ``\\x{...}``,
  octal escapes, a ``{`` that is no repetition (a literal brace), flags ``i m s U`` scoped as
  RE2 scopes them (to the end of the enclosing group). Greediness (``*?``, ``(?U)``) cannot
  change whether a whole name matches and is dropped.
- The meaning is exact over topic names, which are at most 249 characters of
  ``[a-zA-Z0-9._-]``: character classes, case folding and word boundaries are exact over
  ASCII (Unicode categories and scripts are resolved over ASCII, all a topic name holds).
- Bounded cost: RE2 matches in linear time, Python's backtracking does not. A pattern is
  refused (as too costly, although RE2 accepts it) when a repetition's body can match the
  empty string (``(a*)*``), when its automaton is exponentially ambiguous (two ways around
  one loop on the same text, e.g. ``(a+)+``, ``(a|a)*``, ``(\\w+\\.?)*``), or when its
  polynomial degree of ambiguity exceeds ``MAX_AMBIGUITY_DEGREE`` (``.*a.*b.*c.*d``: four
  loops that can share one text), so matching a 249-character name takes at most about
  249^3 steps. Patterns over ``MAX_PATTERN_LENGTH`` characters, nested deeper than
  ``MAX_NESTING`` groups, or whose analysis needs over ``ANALYSIS_BUDGET`` steps are refused
  (the check itself then takes at most about half a second; everyday patterns a millisecond):
  compile a regex once, when a member brings it, as Kafka validates it then.
"""

from __future__ import annotations

import functools
import re
import string
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

MAX_PATTERN_LENGTH = 2048
MAX_NESTING = 100
MAX_REPEAT = 1000
"""RE2's largest repetition count."""
MAX_AMBIGUITY_DEGREE = 2
"""Most loops of the pattern's automaton that one text may go around at once, less one: the
worst match of an n-character name then takes about n^(degree + 1) backtracking steps."""
ANALYSIS_BUDGET = 200_000
MAX_RUNE = 0x10FFFF

TOPIC_CHARS = string.ascii_letters + string.digits + "._-"
"""Every character a topic name may hold (Kafka's legal topic characters)."""

Ranges = tuple[tuple[int, int], ...]
T = TypeVar("T")

_ANY: Ranges = ((0, MAX_RUNE),)
_NOT_NL: Ranges = ((0, 9), (11, MAX_RUNE))
_PERL = {"d": "0-9", "s": "\t\n\f\r ", "w": "0-9A-Za-z_"}
_POSIX = {"alnum": "0-9A-Za-z", "alpha": "A-Za-z", "ascii": "\x00-\x7f", "blank": "\t ",
          "cntrl": "\x00-\x1f\x7f", "digit": "0-9", "graph": "!-~", "lower": "a-z",
          "print": " -~", "punct": "!-/:-@[-`{-~", "space": "\t\n\v\f\r ", "upper": "A-Z",
          "word": "0-9A-Za-z_", "xdigit": "0-9A-Fa-f"}
_CATEGORIES = frozenset(
    "C Cc Cf Co Cs L Ll Lm Lo Lt Lu M Mc Me Mn N Nd Nl No P Pc Pd Pe Pf Pi Po Ps S Sc Sk Sm "
    "So Z Zl Zp Zs".split())
_SCRIPTS = frozenset(
    "Arabic Armenian Avestan Balinese Bamum Batak Bengali Bopomofo Brahmi Braille Buginese "
    "Buhid Canadian_Aboriginal Carian Cham Cherokee Common Coptic Cuneiform Cypriot Cyrillic "
    "Deseret Devanagari Egyptian_Hieroglyphs Ethiopic Georgian Glagolitic Gothic Greek "
    "Gujarati Gurmukhi Han Hangul Hanunoo Hebrew Hiragana Imperial_Aramaic Inherited "
    "Inscriptional_Pahlavi Inscriptional_Parthian Javanese Kaithi Kannada Katakana Kayah_Li "
    "Kharoshthi Khmer Lao Latin Lepcha Limbu Linear_B Lisu Lycian Lydian Malayalam Mandaic "
    "Meetei_Mayek Mongolian Myanmar New_Tai_Lue Nko Ogham Ol_Chiki Old_Italic Old_Persian "
    "Old_South_Arabian Old_Turkic Oriya Osmanya Phags_Pa Phoenician Rejang Runic Samaritan "
    "Saurashtra Shavian Sinhala Sundanese Syloti_Nagri Syriac Tagalog Tagbanwa Tai_Le "
    "Tai_Tham Tai_Viet Tamil Telugu Thaana Thai Tibetan Tifinagh Ugaritic Unknown Vai Yi"
    .split())
"""The Unicode scripts RE2/J knows (its UnicodeTables): other names are refused."""
_REPEAT = re.compile(r"\{([0-9]+)(,([0-9]*))?\}")
_OCTAL = re.compile("[0-7]{0,2}")
_HEX = re.compile(r"\{([0-9A-Fa-f]+)\}|[0-9A-Fa-f]{2}")
_FOLDS = {0x17F: ord("s"), 0x212A: ord("k")}
"""Non-ASCII letters whose simple case folding reaches ASCII (long s, Kelvin sign)."""


@dataclass(frozen=True)
class Chars:
    """One character from ``ranges`` (already case-folded and negated as RE2 does)."""

    ranges: Ranges


@dataclass(frozen=True)
class Assert:
    """An empty-width assertion: Python's spelling of it."""

    python: str


@dataclass(frozen=True)
class Concat:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Alternate:
    branches: tuple[Node, ...]


@dataclass(frozen=True)
class Repeat:
    sub: Node
    min: int
    max: int | None


Node = Chars | Assert | Concat | Alternate | Repeat


def compile_topic_regex(pattern: str) -> re.Pattern[str]:
    """The RE2/J ``pattern`` as a Python pattern matching whole topic names; ``ValueError``
    if RE2/J refuses it or its matching cost is not bounded (see the module docstring)."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise ValueError(f"regular expression longer than {MAX_PATTERN_LENGTH} characters")
    tree = _Parser(pattern).parse()
    _check_cost(tree)
    try:
        return re.compile(r"\A(?:" + _emit(tree) + r")\Z")
    except (re.error, RecursionError, OverflowError) as error:  # a translation we cannot run
        raise ValueError(f"regular expression {_shown(pattern)} does not compile: {error}") \
            from None


def _shown(pattern: str) -> str:
    return repr(pattern if len(pattern) <= 80 else pattern[:77] + "...")


# ---------------------------------------------------------------------------------------
# Character sets


def _ranges_of(spec: str) -> list[tuple[int, int]]:
    """Ranges from a class body like ``0-9A-Za-z_`` (no escapes)."""
    out, i = [], 0
    while i < len(spec):
        if i + 2 < len(spec) and spec[i + 1] == "-":
            out.append((ord(spec[i]), ord(spec[i + 2])))
            i += 3
        else:
            out.append((ord(spec[i]), ord(spec[i])))
            i += 1
    return out


def _clean(ranges: Iterable[tuple[int, int]]) -> Ranges:
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return tuple(merged)


def _negate(ranges: Iterable[tuple[int, int]]) -> Ranges:
    out, start = [], 0
    for lo, hi in _clean(ranges):
        if lo > start:
            out.append((start, lo - 1))
        start = hi + 1
    if start <= MAX_RUNE:
        out.append((start, MAX_RUNE))
    return tuple(out)


def _fold(ranges: Iterable[tuple[int, int]]) -> Ranges:
    """``ranges`` with the case variants of their ASCII letters (and of the two non-ASCII
    letters folding to ASCII), as RE2 folds a class under ``(?i)``."""
    ranges = _clean(ranges)
    extra: list[tuple[int, int]] = []
    for lo, hi in ranges:
        for a, b, shift in ((65, 90, 32), (97, 122, -32)):  # A-Z, a-z
            if lo <= b and hi >= a:
                extra.append((max(lo, a) + shift, min(hi, b) + shift))
    for code, folded in _FOLDS.items():
        variants = (folded, folded - 32)
        if any(lo <= code <= hi for lo, hi in ranges):
            extra.extend((v, v) for v in variants)
        if any(lo <= v <= hi for lo, hi in ranges for v in variants):
            extra.append((code, code))
    return _clean((*ranges, *extra))


@functools.lru_cache(maxsize=1024)
def _topic_mask(ranges: Ranges) -> int:
    """The topic characters in ``ranges``, as bits (bit i: ``TOPIC_CHARS[i]``)."""
    return sum(1 << i for i, ch in enumerate(TOPIC_CHARS)
               if any(lo <= ord(ch) <= hi for lo, hi in ranges))


def _unicode_table(name: str) -> list[tuple[int, int]] | None:
    """The ASCII members of RE2/J's Unicode class ``name`` (None for an unknown name)."""
    if name == "Any":
        return [(0, MAX_RUNE)]
    if name in _CATEGORIES:
        return [(c, c) for c in range(128) if unicodedata.category(chr(c)).startswith(name)]
    if name not in _SCRIPTS:
        return None
    latin = _ranges_of("A-Za-z")
    if name == "Latin":
        return latin
    # Every other ASCII character is of the Common script (none is Inherited).
    return list(_negate([*latin, (128, MAX_RUNE)])) if name == "Common" else []


# ---------------------------------------------------------------------------------------
# The parser: RE2/J's grammar and refusals


class _Parser:
    def __init__(self, pattern: str) -> None:
        self.p = pattern
        self.pos = 0
        self.fold = False
        self.multiline = False
        self.dot_nl = False
        self.names: set[str] = set()
        self.depth = 0

    def fail(self, reason: str, start: int | None = None) -> ValueError:
        where = "" if start is None else f": `{(self.p[start:self.pos] or self.p[start:])[:40]}`"
        return ValueError(f"invalid regular expression {_shown(self.p)}: {reason}{where}")

    def more(self) -> bool:
        return self.pos < len(self.p)

    def looking_at(self, text: str) -> bool:
        return self.p.startswith(text, self.pos)

    def parse(self) -> Node:
        tree = self.alternation()
        if self.more():  # only a ')' stops an alternation early
            raise self.fail("unexpected )", self.pos)
        return tree

    def alternation(self) -> Node:
        branches = [self.concat()]
        while self.looking_at("|"):
            self.pos += 1
            branches.append(self.concat())
        return branches[0] if len(branches) == 1 else Alternate(tuple(branches))

    def concat(self) -> Node:
        items: list[Node] = []
        repeated = False  # the last token was a repetition operator
        while self.more() and self.p[self.pos] not in "|)":
            start = self.pos
            c = self.p[self.pos]
            bounds = self.repetition() if c in "*+?{" else None
            if bounds is not None:
                if repeated:
                    raise self.fail("invalid nested repetition operator", start)
                if not items:
                    raise self.fail("missing argument to repetition operator", start)
                items[-1] = Repeat(items[-1], *bounds)
                repeated = True
                continue
            repeated = False
            if c == "(":
                group = self.group()
                if group is not None:
                    items.append(group)
            elif c == "[":
                items.append(self.char_class())
            elif c == "\\":
                items.extend(self.escape())
            else:
                self.pos += 1
                if c == ".":
                    items.append(Chars(_ANY if self.dot_nl else _NOT_NL))
                elif c == "^":
                    items.append(Assert("(?m:^)" if self.multiline else r"\A"))
                elif c == "$":
                    items.append(Assert("(?m:$)" if self.multiline else r"\Z"))
                else:
                    items.append(self.literal(ord(c)))
        return items[0] if len(items) == 1 else Concat(tuple(items))

    def literal(self, code: int) -> Chars:
        ranges = ((code, code),)
        return Chars(_fold(ranges) if self.fold else ranges)

    def repetition(self) -> tuple[int, int | None] | None:
        """A repetition operator at ``pos`` (consumed with a non-greedy ``?``), or None for a
        ``{`` that starts no repetition (a literal brace, as in RE2)."""
        start = self.pos
        c = self.p[self.pos]
        if c == "{":
            match = _REPEAT.match(self.p, self.pos)
            if match is None or any(n and (len(n) > 1 and n[0] == "0") for n in match.group(1, 3)):
                return None
            low = int(match[1]) if len(match[1]) <= 8 else MAX_REPEAT + 1
            high: int | None = low if match[2] is None else (
                None if match[3] == "" else int(match[3]) if len(match[3]) <= 8 else -1)
            self.pos = match.end()
            if low > MAX_REPEAT or high == -1 or (high is not None and
                                                  (high > MAX_REPEAT or low > high)):
                raise self.fail("invalid repeat count", start)
            bounds = (low, high)
        else:
            self.pos += 1
            bounds = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        if self.looking_at("?"):
            self.pos += 1
        return bounds

    def group(self) -> Node | None:
        """A group at ``(``: its contents, or None for flags alone (``(?i)``), which hold to
        the end of the enclosing group."""
        start = self.pos
        saved = (self.fold, self.multiline, self.dot_nl)
        if self.looking_at("(?P<") or self.looking_at("(?<"):
            begin = self.pos + (4 if self.looking_at("(?P<") else 3)
            end = self.p.find(">", begin)
            if end < 0:
                raise self.fail("invalid named capture", start)
            name = self.p[begin:end]
            if not name or not all(ch == "_" or (ch.isascii() and ch.isalnum()) for ch in name):
                self.pos = end + 1
                raise self.fail("invalid named capture", start)
            if name in self.names:
                raise self.fail("duplicate capture group name", start)
            self.names.add(name)
            self.pos = end + 1
        elif self.looking_at("(?"):
            self.pos += 2
            if self.flags(start):
                return None
        else:
            self.pos += 1
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.fail(f"groups nested deeper than {MAX_NESTING}")
        inner = self.alternation()
        if not self.looking_at(")"):
            raise self.fail("missing closing )")
        self.pos += 1
        self.depth -= 1
        self.fold, self.multiline, self.dot_nl = saved
        return inner

    def flags(self, start: int) -> bool:
        """Flags after ``(?``: True for ``(?flags)``, False for ``(?flags:`` (a group)."""
        flags = {"i": self.fold, "m": self.multiline, "s": self.dot_nl, "U": False}
        negated = seen = False
        while self.more():
            c = self.p[self.pos]
            self.pos += 1
            if c in flags:
                flags[c] = not negated
                seen = True
            elif c == "-" and not negated:
                negated, seen = True, False
            elif c in ":)" and (seen or not negated):
                self.fold, self.multiline, self.dot_nl = flags["i"], flags["m"], flags["s"]
                return c == ")"
            else:
                break
        raise self.fail("invalid or unsupported Perl syntax", start)

    def escape(self) -> list[Node]:
        """What a backslash outside a class stands for (several literals for ``\\Q..\\E``)."""
        start = self.pos
        kind = self.p[self.pos + 1: self.pos + 2]
        simple = {"A": Assert(r"\A"), "z": Assert(r"\Z"), "b": Assert(r"\b"), "B": Assert(r"\B")}
        if kind in simple:
            self.pos += 2
            return [simple[kind]]
        if kind == "C":
            raise self.fail("invalid escape sequence", start)
        if kind == "Q":
            end = self.p.find("\\E", self.pos + 2)
            text = self.p[self.pos + 2: end if end >= 0 else len(self.p)]
            self.pos = end + 2 if end >= 0 else len(self.p)
            return [self.literal(ord(ch)) for ch in text]
        ranges = self.class_escape()
        if ranges is not None:
            return [Chars(_clean(ranges))]
        return [self.literal(self.single_escape())]

    def class_escape(self) -> Ranges | None:
        """``\\p``, ``\\P`` or a Perl class (``\\d \\s \\w`` and negations) at ``pos``, or
        None (nothing consumed)."""
        start = self.pos
        kind = self.p[self.pos + 1: self.pos + 2]
        if kind in ("p", "P"):
            self.pos += 2
            negated = kind == "P"
            if not self.more():
                raise self.fail("invalid character class range", start)
            if self.p[self.pos] == "{":
                end = self.p.find("}", self.pos)
                if end < 0:
                    raise self.fail("invalid character class range", start)
                name, self.pos = self.p[self.pos + 1:end], end + 1
            else:
                name, self.pos = self.p[self.pos], self.pos + 1
            if name.startswith("^"):
                negated, name = not negated, name[1:]
            table = _unicode_table(name)
            if table is None:
                raise self.fail("invalid character class range", start)
            return self.signed(table, negated)
        if kind.lower() in _PERL:
            self.pos += 2
            return self.signed(_ranges_of(_PERL[kind.lower()]), kind.isupper())
        return None

    def signed(self, ranges: Iterable[tuple[int, int]], negated: bool) -> Ranges:
        ranges = _fold(ranges) if self.fold else _clean(ranges)
        return _negate(ranges) if negated else ranges

    def single_escape(self) -> int:
        """The character a backslash escape at ``pos`` stands for (RE2's ``parseEscape``)."""
        start = self.pos
        self.pos += 1
        if not self.more():
            raise self.fail("trailing backslash at end of expression")
        c = self.p[self.pos]
        self.pos += 1
        if not (c.isascii() and c.isalnum()):
            return ord(c)
        octal = _OCTAL.match(self.p, self.pos)
        if c in "1234567" and not (octal and octal[0]):
            raise self.fail("invalid escape sequence (backreferences are not supported)", start)
        if c in "01234567":
            self.pos = octal.end() if octal else self.pos
            return int(c + (octal[0] if octal else ""), 8)
        if c == "x":
            hexa = _HEX.match(self.p, self.pos)
            if hexa and int(hexa[1] or hexa[0], 16) <= MAX_RUNE:
                self.pos = hexa.end()
                return int(hexa[1] or hexa[0], 16)
        named = {"a": 7, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11}
        if c in named:
            return named[c]
        raise self.fail("invalid escape sequence", start)

    def char_class(self) -> Chars:
        start = self.pos
        self.pos += 1
        negated = self.looking_at("^")
        self.pos += negated
        ranges: list[tuple[int, int]] = []
        first = True
        while first or not self.looking_at("]"):
            if not self.more():
                raise self.fail("missing closing ]", start)
            first = False
            if self.looking_at("[:"):
                end = self.p.find(":]", self.pos)
                if end >= 0:
                    name = self.p[self.pos + 2:end]
                    spec = _POSIX.get(name.removeprefix("^"))
                    if spec is None:
                        raise self.fail("invalid character class range", self.pos)
                    self.pos = end + 2
                    ranges.extend(self.signed(_ranges_of(spec), name.startswith("^")))
                    continue
            if self.looking_at("\\"):
                escaped = self.class_escape()
                if escaped is not None:
                    ranges.extend(escaped)
                    continue
            low = self.class_char(start)
            high = low
            if self.looking_at("-") and not self.p.startswith("-]", self.pos):
                self.pos += 1
                high = self.class_char(start)
                if high < low:
                    raise self.fail("invalid character class range", start)
            ranges.extend(_fold([(low, high)]) if self.fold else [(low, high)])
        self.pos += 1
        return Chars(_negate(ranges) if negated else _clean(ranges))

    def class_char(self, start: int) -> int:
        if not self.more():
            raise self.fail("missing closing ]", start)
        if self.looking_at("\\"):
            return self.single_escape()
        self.pos += 1
        return ord(self.p[self.pos - 1])


# ---------------------------------------------------------------------------------------
# Python's spelling


def _class_char(code: int) -> str:
    ch = chr(code)
    if ch.isascii() and ch.isalnum():
        return ch
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 \
        else f"\\U{code:08x}"


def _emit(node: Node) -> str:
    if isinstance(node, Chars):
        ranges = node.ranges
        if not ranges:
            return "(?!)"
        if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
            return _class_char(ranges[0][0])
        negated = ranges[-1][1] == MAX_RUNE  # spelled as the complement: sre compiles it fast
        if negated:
            ranges = _negate(ranges)
            if not ranges:
                return "(?s:.)"
        body = "".join(_class_char(lo) if lo == hi else f"{_class_char(lo)}-{_class_char(hi)}"
                       for lo, hi in ranges)
        return f"[^{body}]" if negated else f"[{body}]"
    if isinstance(node, Assert):
        return node.python
    if isinstance(node, Concat):
        return "".join(map(_emit, node.items))
    if isinstance(node, Alternate):
        return "(?:" + "|".join(map(_emit, node.branches)) + ")"
    low, high = node.min, node.max
    quantifier = {(0, None): "*", (1, None): "+", (0, 1): "?"}.get((low, high)) or (
        f"{{{low},}}" if high is None else f"{{{low}}}" if low == high else f"{{{low},{high}}}")
    return f"(?:{_emit(node.sub)}){quantifier}"


# ---------------------------------------------------------------------------------------
# The cost check: the ambiguity of the pattern's automaton over topic characters


def _empty_only(node: Node) -> bool:
    """Whether ``node`` matches nothing but the empty string (assertions)."""
    if isinstance(node, Chars):
        return False
    if isinstance(node, Assert):
        return True
    if isinstance(node, Concat | Alternate):
        return all(map(_empty_only, node.items if isinstance(node, Concat) else node.branches))
    return node.max == 0 or _empty_only(node.sub)


def _nullable(node: Node) -> bool:
    if isinstance(node, Chars):
        return False
    if isinstance(node, Assert):
        return True
    if isinstance(node, Concat):
        return all(map(_nullable, node.items))
    if isinstance(node, Alternate):
        return any(map(_nullable, node.branches))
    return node.min == 0 or _nullable(node.sub)


class _Automaton:
    """The pattern's backtracking paths as an automaton: one state per character position,
    an edge per distinct way (path through alternatives and loops) from one to the next.
    Assertions count as always passing (more paths: a safe over-estimate). ``X{n,m}`` with
    ``m > 1`` is ``X X*`` (or ``X*``): Python's counted repetition backtracks like a loop."""

    def __init__(self, tree: Node) -> None:
        self.masks: list[int] = []  # per state: the topic characters it reads (0 = epsilon)
        self.out: list[list[int]] = []
        self.budget = ANALYSIS_BUDGET
        self.start = self.state(0)  # reads nothing: its successors are the first reads
        self.out[self.start] = [self.build(tree, self.state(0))]  # the second: accepting
        self.ways: dict[int, dict[int, int]] = {}
        self.closures: dict[int, dict[int, int]] = {}

    def spend(self, steps: int = 1) -> None:
        self.budget -= steps
        if self.budget < 0:
            raise ValueError("regular expression too complex to bound its matching time")

    def state(self, mask: int, out: list[int] | None = None) -> int:
        self.spend()
        self.masks.append(mask)
        self.out.append(out or [])
        return len(self.masks) - 1

    def build(self, node: Node, follow: int) -> int:
        """The state entering ``node``, which goes on to ``follow``."""
        if isinstance(node, Chars):
            mask = _topic_mask(node.ranges)
            return self.state(mask, [follow]) if mask else self.state(0)  # dead end
        if isinstance(node, Assert):
            return follow
        if isinstance(node, Concat):
            for item in reversed(node.items):
                follow = self.build(item, follow)
            return follow
        if isinstance(node, Alternate):
            return self.state(0, [self.build(branch, follow) for branch in node.branches])
        if node.max == 0 or _empty_only(node.sub):  # Python stops looping on an empty match
            return follow
        if node.max == 1:
            inner = self.build(node.sub, follow)
            return inner if node.min == 1 else self.state(0, [inner, follow])
        if _nullable(node.sub):
            raise ValueError("regular expression repeats a part that can match the empty "
                             "string (like (a*)*): its matching time may grow exponentially")
        loop = self.state(0)
        self.out[loop] = [self.build(node.sub, loop), follow]
        return loop if node.min == 0 else self.build(node.sub, loop)

    def reads(self, state: int) -> bool:
        return self.masks[state] != 0

    def next_reads(self, state: int) -> dict[int, int]:
        """The reading states right after ``state`` (after its character, or from the start
        state), each with how many epsilon paths lead there (capped at 2)."""
        found = self.ways.get(state)
        if found is None:
            found = {}
            for nxt in self.out[state] if self.reads(state) or state == self.start else []:
                for target, count in self.closure(nxt).items():
                    found[target] = min(2, found.get(target, 0) + count)
            self.ways[state] = found
        return found

    def closure(self, state: int) -> dict[int, int]:
        """The reading states ``state`` leads to through epsilon states, with how many paths
        (capped at 2). Epsilon states form no cycle (no loop body is nullable)."""
        todo = [state]
        while todo:
            current = todo[-1]
            if current in self.closures:
                todo.pop()
                continue
            if self.reads(current):
                self.closures[current] = {current: 1}
                continue
            pending = [nxt for nxt in self.out[current] if nxt not in self.closures]
            if pending:
                todo.extend(pending)
                continue
            self.spend(len(self.out[current]))
            total: dict[int, int] = {}
            for nxt in self.out[current]:
                for target, count in self.closures[nxt].items():
                    total[target] = min(2, total.get(target, 0) + count)
            self.closures[current] = total
            todo.pop()
        return self.closures[state]


def _check_cost(tree: Node) -> None:
    automaton = _Automaton(tree)
    edges = _edges(automaton)
    components = _components(list(edges), lambda s: edges[s])
    loops = [s for s in edges if s in edges[s] or len(components.members[components.of[s]]) > 1]
    _check_exponential(automaton, edges, components, loops)
    _check_degree(automaton, edges, components, loops)


def _edges(automaton: _Automaton) -> dict[int, dict[int, int]]:
    """The start state and the reading states reachable from it, with their successors."""
    edges: dict[int, dict[int, int]] = {}
    todo = [automaton.start]
    while todo:
        state = todo.pop()
        if state not in edges:
            edges[state] = automaton.next_reads(state)
            todo.extend(edges[state])
    return edges


@dataclass
class _Components:
    of: dict[Any, int]
    members: list[list[Any]]


def _components(nodes: Iterable[T], successors: Callable[[T], Iterable[T]]) -> _Components:
    """Strongly connected components (Tarjan's, iteratively)."""
    index: dict[T, int] = {}
    low: dict[T, int] = {}
    on_stack: set[T] = set()
    stack: list[T] = []
    result = _Components({}, [])
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(successors(root)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(successors(nxt))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    result.of[member] = len(result.members)
                    members.append(member)
                    if member == node:
                        break
                result.members.append(members)
    return result


def _check_exponential(automaton: _Automaton, edges: dict[int, dict[int, int]],
                       components: _Components, loops: list[int]) -> None:
    """Refuse two different paths around one loop reading the same text: in the product of
    the automaton with itself, a component holding a state pair (q, q) and a pair of two
    different states, or two parallel paths between pairs (q, q)."""
    masks = automaton.masks

    def pairs(pair: tuple[int, int]) -> list[tuple[int, int]]:
        a, b = pair
        automaton.spend(1 + len(edges[a]) * len(edges[b]))
        same = components.of[a]
        return [(x, y) for x in edges[a] if components.of[x] == same
                for y in edges[b] if components.of[y] == same and masks[x] & masks[y]]

    product = _components([(s, s) for s in loops], pairs)
    for members in product.members:
        states = set(members)
        if not any(a == b for a, b in states):
            continue
        if any(a != b for a, b in states) or any(
                edges[a].get(x, 0) > 1 for a, _ in states for x, _ in pairs((a, a))
                if (x, x) in states):
            raise ValueError("regular expression can match the same text in exponentially "
                             "many ways (like (a+)+ or (a|a)*): its matching time may grow "
                             "exponentially")


def _check_degree(automaton: _Automaton, edges: dict[int, dict[int, int]],
                  components: _Components, loops: list[int]) -> None:
    """Refuse chains of more than ``MAX_AMBIGUITY_DEGREE + 1`` loops p1 < p2 < ... where
    p < q when one text goes around p, from p to q, and around q (Weber and Seidl's
    polynomial ambiguity)."""
    masks = automaton.masks
    of = components.of

    def around_and_on(p: int, q: int) -> bool:
        """Whether one text leads p to p, p to q and q to q (three runs side by side)."""
        seen = {(p, p, q)}
        todo = [(p, p, q)]
        while todo:
            a, b, c = todo.pop()
            automaton.spend(1 + len(edges[a]) * len(edges[c]))
            for x in edges[a]:
                if of[x] != of[p]:
                    continue
                for z in edges[c]:
                    if of[z] != of[q] or not masks[x] & masks[z]:
                        continue
                    automaton.spend(len(edges[b]))
                    for y in edges[b]:
                        triple = (x, y, z)
                        if masks[x] & masks[y] & masks[z] and triple not in seen:
                            if triple == (p, q, q):
                                return True
                            seen.add(triple)
                            todo.append(triple)
        return False

    reach: dict[int, set[int]] = {}

    def reachable(state: int) -> set[int]:
        if state not in reach:
            seen, todo = {state}, [state]
            while todo:
                current = todo.pop()
                automaton.spend(1 + len(edges[current]))
                for nxt in edges[current]:
                    if nxt not in seen:
                        seen.add(nxt)
                        todo.append(nxt)
            reach[state] = seen
        return reach[state]

    automaton.spend(len(loops) ** 2)
    later = {p: [q for q in loops if of[q] != of[p] and q in reachable(p) and around_and_on(p, q)]
             for p in loops}
    depth: dict[int, int] = {}

    def chain(p: int) -> int:  # ``later`` has no cycle: its pairs lie in different components
        if p not in depth:
            depth[p] = 1 + max((chain(q) for q in later[p]), default=0)
        return depth[p]

    if max((chain(p) for p in loops), default=0) > MAX_AMBIGUITY_DEGREE + 1:
        raise ValueError("regular expression has too many loops one text can go around at "
                         f"once (more than {MAX_AMBIGUITY_DEGREE + 1}, like .*a.*b.*c.*d): "
                         "its matching time grows too fast with the topic name's length")
