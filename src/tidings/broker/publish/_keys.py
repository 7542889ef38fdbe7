"""Idempotency keys on the publish path: which accepted events are repeats.

A keyed event is looked up among the live keys of its namespace before it is appended;
a live key answers the event it was first published as (``repeat``), or refuses the
event if what was sent differs (another event reusing the key). The append writes each
key in the commit of its event under a uniqueness rule, so two publishes of one key that
both missed the lookup (through two members at once, or in one group commit) store one
event: the other append fails with ``KeyTaken`` as a whole, and is settled again against
the keys as they now are (docs/semantics.md, "Exactly once").
"""

from __future__ import annotations

from collections.abc import Sequence

from ...core.ingest import ERR_KEY_REUSED
from ...core.wire import GenericError, ItemResult, err
from ...store import KeyRecord, NewEvent

__all__ = ["ERR_KEY_REUSED", "Keyed", "answer_echoes", "repeat_of", "settle"]

Keyed = tuple[int, NewEvent]


def repeat_of(first_id: int) -> ItemResult:
    return ItemResult(Ok=[first_id], repeat=True)


def _reused(e: NewEvent, held: KeyRecord) -> ItemResult:
    return err("GenericError", GenericError(
        ERR_KEY_REUSED,
        f"the idempotency key {e.key!r} names another event of {e.namespace!r} (id {held.event_id}) "
        "within the publication's deduplication window",
    ))


def settle(
    accepted: Sequence[Keyed], held: dict[tuple[str, str], KeyRecord], results: list[ItemResult | None]
) -> tuple[list[Keyed], list[tuple[int, int]]]:
    """Split ``accepted`` into what to append and, answered in ``results``, the repeats
    and reuses of ``held`` keys. Also returns the events that repeat a key used earlier
    in the same request, as (position, position of the first): they are answered once the
    first is (:func:`answer_echoes`)."""
    out: list[Keyed] = []
    first: dict[tuple[str, str], int] = {}
    echoes: list[tuple[int, int]] = []
    for i, e in accepted:
        if e.key is None:
            out.append((i, e))
            continue
        k = (e.namespace, e.key)
        h = held.get(k)
        if h is not None:
            same = h.fingerprint == e.fingerprint and h.source == e.source
            results[i] = repeat_of(h.event_id) if same else _reused(e, h)
        elif k in first:
            echoes.append((i, first[k]))
        else:
            first[k] = i
            out.append((i, e))
    return out, echoes


def answer_echoes(
    echoes: Sequence[tuple[int, int]], events: dict[int, NewEvent], results: list[ItemResult | None]
) -> None:
    """Answer each event that repeated a key of its own request like its first: a repeat
    of the first's id when the same was sent, else refused; an error of the first is its."""
    for i, j in echoes:
        r = results[j]
        if r is None:
            continue
        if events[i].fingerprint != events[j].fingerprint:
            results[i] = err("GenericError", GenericError(
                ERR_KEY_REUSED, f"the idempotency key {events[i].key!r} names another event of this request",
            ))
        elif isinstance(r.Ok, list):
            results[i] = repeat_of(r.Ok[0])
        else:
            results[i] = r
