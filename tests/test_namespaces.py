"""The one grammar of namespaces and patterns (core/namespaces.py, docs/semantics.md)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from tidings.core.namespaces import is_catch_all, is_pattern, matcher, namespace_error, pattern_error

NAME = st.from_regex(re.compile(r"[A-Za-z0-9_:\-]{1,8}", re.ASCII), fullmatch=True)
NAMESPACES = st.lists(NAME, min_size=1, max_size=5).map(".".join)
SEGMENTS = st.lists(st.one_of(NAME, st.just("*")), min_size=1, max_size=5)
PATTERNS = st.tuples(SEGMENTS, st.booleans()).map(lambda t: ".".join(t[0] + (["**"] if t[1] else [])))


@given(NAMESPACES)
def test_namespaces_are_valid_and_match_only_themselves(ns: str) -> None:
    assert namespace_error(ns) is None and pattern_error(ns) is None and not is_pattern(ns)
    assert matcher(ns)(ns) and not matcher(ns)(ns + ".x")


@given(PATTERNS)
def test_patterns_of_the_grammar_are_valid(p: str) -> None:
    assert pattern_error(p) is None


@given(st.one_of(NAMESPACES, PATTERNS), st.sampled_from(["\n", " ", "\t", ".", "..", "*x", "é", "\x00", "**.a"]))
def test_anything_else_is_refused(text: str, junk: str) -> None:
    """No line end, whitespace, empty segment, non-ASCII, '*' inside a name, '**' not last."""
    for bad in (text + junk, junk + text):
        assert pattern_error(bad) is not None, repr(bad)


@given(PATTERNS, NAMESPACES)
def test_only_a_catch_all_pattern_matches_every_namespace_of_a_depth(p: str, ns: str) -> None:
    """A pattern that names a segment always misses some namespace of every depth it
    matches; a catch-all one matches all of them."""
    segments = p.split(".")
    depth = len(segments)
    match = matcher(p)
    # A namespace of the pattern's depth (deeper for a final **) with every name changed.
    probe = ".".join(f"{seg}x" if seg not in ("*", "**") else "y" for seg in segments)
    if is_catch_all(p):
        assert match(probe) and match(".".join(ns.split(".")[:1] * depth))
    else:
        assert not match(probe)
    assert match(".".join(seg if seg not in ("*", "**") else "y" for seg in segments))


def test_catch_all_patterns() -> None:
    for p in ("*", "**", "*.*", "*.**", "*.*.*.**"):
        assert pattern_error(p) is None and is_catch_all(p), p
    for p in ("a.*", "*.a", "*.a.**", "a.**"):
        assert pattern_error(p) is None and not is_catch_all(p), p
    assert matcher("**")("a") and matcher("**")("a.b.c") and matcher("*.**")("a.b")
