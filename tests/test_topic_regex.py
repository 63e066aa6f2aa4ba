"""KIP-848 regex subscriptions: RE2/J patterns translated to Python, matched on whole topic
names, refused where RE2/J refuses them or where Python's backtracking could take too long.

- Over the syntax both spell alike (literals, ``.``, classes, ``\\d \\w``, groups,
  ``* + ? {n,m}``, alternation), random patterns match random topic names exactly as
  Python's own ``re.fullmatch`` of the same text, unless refused for their cost;
- an accepted pattern matches any 249-character name quickly (the bound the cost check
  promises), while the classic catastrophic shapes are refused;
- the Java/RE2 spellings Python lacks or reads otherwise mean what RE2/J means:
  ``\\Q...\\E``, ``(?P<n>`` and ``(?<n>``, POSIX and Unicode classes, ``\\z``, ``$``, a brace
  that is no repetition, scoped flags, octal and ``\\x{...}`` escapes;
- what RE2/J refuses (backreferences, lookaround, atomic groups, possessive quantifiers,
  ``\\Z``, bad counts and classes, ...) raises ``ValueError``.
"""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sparklog.coordinator.topic_regex import MAX_PATTERN_LENGTH, TOPIC_CHARS, compile_topic_regex

ATOMS = st.sampled_from(["a", "b", "-", r"\.", ".", "[ab]", "[a-c]", "[^a]", r"\d", r"\w",
                         "[.-]", "x"])
QUANTIFIERS = st.sampled_from(["", "", "*", "+", "?", "{1,3}", "{2}", "{0,2}", "*?"])


def _patterns() -> st.SearchStrategy[str]:
    """Patterns of the syntax RE2 and Python share, a quantifier only after an atom or a
    group (both refuse ``a**``)."""
    def grow(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        group = st.builds(lambda body, kind, q: f"({kind}{body}){q}", inner,
                          st.sampled_from(["", "?:"]), QUANTIFIERS)
        item = group | st.builds(lambda atom, q: atom + q, ATOMS, QUANTIFIERS)
        concat = st.lists(item, min_size=1, max_size=4).map("".join)
        return concat | st.lists(concat, min_size=2, max_size=3).map("|".join)
    return st.recursive(st.builds(lambda a, q: a + q, ATOMS, QUANTIFIERS), grow, max_leaves=6)


NAMES = st.text(alphabet=st.sampled_from("ab-.x1" + TOPIC_CHARS[:3]), max_size=12)


@settings(max_examples=400, deadline=None)
@given(_patterns(), st.lists(NAMES, min_size=1, max_size=8))
def test_common_syntax_matches_as_python_does(pattern, names) -> None:
    try:
        compiled = compile_topic_regex(pattern)
    except ValueError as refused:
        assert "matching time" in str(refused), refused  # only refused for its cost
        assume(False)
    for name in names:
        assert bool(compiled.fullmatch(name)) == bool(re.fullmatch(pattern, name)), name
        assert bool(compiled.match(name)) == bool(compiled.fullmatch(name))  # anchored


@settings(max_examples=150, deadline=None)
@given(_patterns())
def test_accepted_patterns_match_the_longest_names_quickly(pattern) -> None:
    try:
        compiled = compile_topic_regex(pattern)
    except ValueError:
        assume(False)
    slowest = 0.0
    for fill in ("a", "ab", "a-", "1", "a."):
        for tail in ("", "!", "x"):
            name = (fill * 249)[: 249 - len(tail)] + tail
            started = time.perf_counter()
            compiled.fullmatch(name)
            slowest = max(slowest, time.perf_counter() - started)
    assert slowest < 2.0, (pattern, slowest)  # unguarded, the worst take minutes


@pytest.mark.parametrize("pattern", [
    "(a+)+", "(a|a)*", "(a*)*", r"(\w+\.?)*", "(a?){20}a{20}", "(a|aa)*b",
    ".*a.*a.*a.*b", "[a-z]*[a-z]*[a-z]*[a-z]*!", "(x+x+)+y", "([a-z]+-?)+$",
])
def test_catastrophic_backtracking_is_refused(pattern) -> None:
    with pytest.raises(ValueError, match="matching time"):
        compile_topic_regex(pattern)


@pytest.mark.parametrize("pattern", [
    ".*", "orders-.*", r"(orders|payments)\..*", "[a-z]+-[0-9]+", ".*-(dev|prod)",
    r"[a-z]+\.[a-z]+\.[a-z]+\.[a-z]+", ".*foo.*bar.*", r"(\d{1,3}\.){3}\d{1,3}",
    "(foo|foo-bar).*", "topic-[0-9]{1,4}", r"(?i)logs\..*", "^*a", "(a|b)*c",
    r"([a-z]+-)*[a-z]+",
])
def test_everyday_patterns_are_accepted(pattern) -> None:
    compile_topic_regex(pattern)


@pytest.mark.parametrize(("pattern", "matching", "not_matching"), [
    (r"\Qa.b\E-.*", ["a.b-x"], ["axb-x"]),  # literal text
    (r"\Qa.b", ["a.b"], ["axb"]),  # \Q to the end
    (r"(?P<env>dev|prod)-(?<app>\w+)", ["dev-orders"], ["qa-orders"]),  # named groups
    (r"[[:alpha:]]+[[:digit:]]", ["abc1"], ["abc", "1"]),
    (r"[[:^alpha:]]+", ["1-2"], ["a"]),
    (r"\p{L}+\pN", ["abc1"], ["abc-"]),  # Unicode classes
    (r"\P{L}+", ["1.-"], ["a"]),
    (r"\p{^Lu}+", ["abc"], ["Abc"]),
    (r"\p{Latin}+\p{Greek}?", ["Orders"], ["orders1"]),
    (r"orders\z", ["orders"], ["orders1"]),
    ("orders$", ["orders"], ["orders\n"]),  # RE2's $ is the end of the text
    ("a{,3}", ["a{,3}"], ["aaa"]),  # not a repetition: literal braces
    ("a{01}", ["a{01}"], ["a"]),
    ("a{2,}", ["aa", "aaaa"], ["a"]),
    ("(?i)orders", ["ORDERS", "Orders"], ["orders1"]),
    ("a(?i)b|c", ["aB", "C"], ["AB"]),  # (?i) holds to the end of the enclosing group
    ("(?i:a)b", ["Ab"], ["AB"]),
    ("(x(?i)a)a", ["xAa"], ["xAA"]),  # ... and not past it
    ("(?i)[^a]", ["b"], ["a", "A"]),  # folded, then negated
    (r"\x{41}\x42\103\0", ["ABC\x00"], ["ABC"]),  # hex and octal escapes
    (r"[\d\-]+", ["1-2"], ["1.2"]),
    ("[]a]+", ["]a"], ["b"]),
    ("[^]a]", ["b"], ["]", "a"]),
    ("a.c", ["abc"], ["a\nc"]),
    ("(?s)a.c", ["a\nc"], []),
    (r"\bfoo\b.*", ["foo.bar"], ["foobar"]),
    ("a*?b+?", ["aab"], ["aa"]),  # greediness changes nothing on a whole name
    ("(?U)a*b", ["aab"], []),
])
def test_re2_spellings_mean_what_re2j_means(pattern, matching, not_matching) -> None:
    compiled = compile_topic_regex(pattern)
    for name in matching:
        assert compiled.fullmatch(name), name
    for name in not_matching:
        assert not compiled.fullmatch(name), name


@pytest.mark.parametrize(("pattern", "reason"), [
    (r"(a)\1", "backreference"),
    (r"\k<n>", "invalid escape"),
    ("(?=a)a", "unsupported Perl syntax"),
    ("(?!a)b", "unsupported Perl syntax"),
    ("(?<=a)b", "invalid named capture"),
    ("(?<!a)b", "invalid named capture"),
    ("(?>a)", "unsupported Perl syntax"),
    ("a*+", "nested repetition"),
    ("a++", "nested repetition"),
    ("a{2}{3}", "nested repetition"),
    ("*a", "missing argument"),
    ("a|?", "missing argument"),
    (r"a\Z", "invalid escape"),
    (r"\G", "invalid escape"),
    (r"\C", "invalid escape"),
    (r"\8", "invalid escape"),
    ("(?x)a", "unsupported Perl syntax"),
    ("(?#note)", "unsupported Perl syntax"),
    ("(?P=a)", "unsupported Perl syntax"),
    ("(?i-)a", "unsupported Perl syntax"),
    ("(?P<a>x)(?P<a>y)", "duplicate capture group name"),
    ("(?P<a-b>x)", "invalid named capture"),
    ("a{1001}", "invalid repeat count"),
    ("a{3,2}", "invalid repeat count"),
    ("[z-a]", "invalid character class range"),
    (r"[a-\d]", "invalid escape"),
    (r"\p{IsAlphabetic}", "invalid character class range"),
    (r"\p{InGreek}", "invalid character class range"),
    ("[[:word:][:foo:]]", "invalid character class range"),
    ("(a", "missing closing \\)"),
    ("a)", "unexpected \\)"),
    ("[a", "missing closing \\]"),
    ("a\\", "trailing backslash"),
    (r"\x{110000}", "invalid escape"),
    ("(" * 101 + ")" * 101, "nested deeper"),
    ("a" * (MAX_PATTERN_LENGTH + 1), "longer than"),
])
def test_what_re2j_refuses_is_refused(pattern, reason) -> None:
    with pytest.raises(ValueError, match=reason):
        compile_topic_regex(pattern)


def test_a_class_of_no_topic_character_matches_nothing_and_costs_nothing() -> None:
    compiled = compile_topic_regex(r"(é|[^\x00-\x{10FFFF}])+a*")
    assert not compiled.fullmatch("a")
    assert compile_topic_regex(r"\p{Greek}+").fullmatch("abc") is None
