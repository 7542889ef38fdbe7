"""What a long-lived task asks before it retries: was it told to stop?

A library cancelled while it waits may close its connection and raise an error of its
own (a ConnectionError, a TimeoutError) in place of the ``CancelledError``. A loop that
retries on ``Exception`` would then go on forever, and whatever awaits the task (a
``TaskGroup``, a shutdown) with it. The request stays counted on the task
(``Task.cancelling``), so a retrying loop checks it in its handler and stops.
"""

from __future__ import annotations

import asyncio

__all__ = ["stop_if_cancelled"]


def stop_if_cancelled(error: BaseException | None = None) -> None:
    """Raise ``CancelledError`` if the current task was asked to stop (its cancellation
    may have been turned into ``error`` by a library); return otherwise."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no event loop: nothing to stop
        return
    if task is not None and task.cancelling() > 0:
        raise asyncio.CancelledError() from error
