"""Before pytest-timeout ends a hung test, print its asyncio tasks' stacks.

pytest-timeout dumps the threads' stacks; a hung asyncio test shows there as one idle
thread in ``select``, which says nothing of what its tasks wait for. Shortly before the
timeout a watchdog thread finds the event loops that are running and asks each, through
``call_soon_threadsafe`` (which wakes an idle loop), to print every task's stack."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
from collections.abc import Iterator

import pytest

_MARGIN_S = 30.0
"""How long before the timeout the tasks are printed."""


def _print_tasks(loop: asyncio.AbstractEventLoop, test_id: str) -> None:
    tasks = asyncio.all_tasks(loop)
    print(f"\n===== {test_id}: near its timeout, {len(tasks)} asyncio task(s) =====", file=sys.stderr)
    for task in tasks:
        print(f"--- {task!r}", file=sys.stderr)
        task.print_stack(limit=30, file=sys.stderr)
    sys.stderr.flush()


def _dump(test_id: str) -> None:
    loops = [o for o in gc.get_objects() if isinstance(o, asyncio.AbstractEventLoop) and o.is_running()]
    if not loops:
        print(f"\n===== {test_id}: near its timeout, no event loop is running =====", file=sys.stderr)
    for loop in loops:
        loop.call_soon_threadsafe(_print_tasks, loop, test_id)


def _timeout_of(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    given = item.config.getoption("timeout", None)  # --timeout, over the ini file's
    return float(given if given is not None else item.config.getini("timeout") or 0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    timeout = _timeout_of(item)
    timer = None
    if timeout > 2 * _MARGIN_S:
        timer = threading.Timer(timeout - _MARGIN_S, _dump, args=(item.nodeid,))
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()
