"""``stop_if_cancelled``: a retrying loop stops once its task was asked to, even after a
library swallowed the cancellation; a timeout the loop set itself is not a stop."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from tidings.tasks import stop_if_cancelled


async def test_a_swallowed_cancel_still_stops_the_loop() -> None:
    entered = asyncio.Event()
    tries = 0

    async def loop() -> None:
        nonlocal tries
        while True:
            try:
                entered.set()
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    raise ConnectionError("closed while reading") from None  # a library's way
            except Exception as e:
                stop_if_cancelled(e)
                tries += 1

    task = asyncio.create_task(loop())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert tries == 0


async def test_no_stop_without_a_cancel_nor_after_a_timeout_of_its_own() -> None:
    stop_if_cancelled()
    stop_if_cancelled(ConnectionError("refused"))
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(0.01):
            await asyncio.sleep(1)
    stop_if_cancelled()  # the timeout took its own cancel back


def test_outside_a_task_it_returns() -> None:
    stop_if_cancelled()
