"""Filters cannot stall the broker: bounded text and terms at compile time, and a work
budget per evaluation that depends on the filter and the event only (docs/filters.md)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.filters import MAX_LENGTH, MAX_TERMS, MAX_WORK, FilterSyntaxError, compile_predicate, parse


def nat(n: int) -> dict[str, Any]:
    return {"Nat": n}


def arr(items: list[Any]) -> dict[str, Any]:
    return {"Array": items}


def obj(**kv: Any) -> dict[str, Any]:
    return {"Map": [[k, v] for k, v in kv.items()]}


def test_filter_text_and_terms_are_bounded() -> None:
    parse(" | ".join(["a == 1"] * MAX_TERMS))
    with pytest.raises(FilterSyntaxError, match="at most 64 comparisons"):
        parse(" | ".join(["a == 1"] * (MAX_TERMS + 1)))
    with pytest.raises(FilterSyntaxError, match=f"at most {MAX_LENGTH} characters"):
        parse("a == " + "x" * MAX_LENGTH)
    # Terms inside [cond] count too.
    with pytest.raises(FilterSyntaxError):
        parse("a[" + " | ".join(["b == 1"] * MAX_TERMS) + "] | c == 1")


# Adversarial shapes: a filter whose [cond] rescans the whole event for every item, and
# nested wildcards over a wide event.
QUADRATIC = "items[$.items.*.n == -1 | n == 0].n == 0"
NESTED_STARS = "a.*.*.*.n == 1"


def wide(n: int) -> dict[str, Any]:
    return obj(items=arr([obj(n=nat(i + 1)) for i in range(n)]))


def test_an_evaluation_that_would_exceed_its_budget_does_not_pass_and_stops() -> None:
    keep = compile_predicate(QUADRATIC, max_work=10_000)
    small = obj(items=arr([obj(n=nat(0))]))
    assert keep(small)
    # 3,000 items x 3,000 rescans would be 9 million steps: it stops at the budget.
    big = wide(3_000)
    big["Map"][0][1]["Array"].append(obj(n=nat(0)))
    assert not keep(big)
    deep = obj(a=arr([arr([arr([obj(n=nat(2)) for _ in range(40)]) for _ in range(40)]) for _ in range(40)]))
    assert not compile_predicate(NESTED_STARS, max_work=10_000)(deep)  # 64,000 values: over budget
    assert compile_predicate(NESTED_STARS, max_work=MAX_WORK)(
        obj(a=arr([arr([arr([obj(n=nat(1))])])]))
    )


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 400), st.integers(100, 5_000))
def test_the_answer_depends_on_the_filter_and_the_event_only(n: int, budget: int) -> None:
    keep = compile_predicate(QUADRATIC, max_work=budget)
    event = wide(n)
    first = keep(event)
    assert all(keep(event) == first for _ in range(3))
    # Concurrent evaluations (the writer thread and the loop) never share a budget.
    results: list[bool] = []

    def run() -> None:
        results.extend(keep(event) for _ in range(5))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [first] * 20


def test_plain_filters_pay_nothing_and_never_hit_a_budget() -> None:
    keep = compile_predicate("a == 1 & b > 2", max_work=0)
    assert keep(obj(a=nat(1), b=nat(3)))
