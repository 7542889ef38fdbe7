"""The synchronous face of the SDK, for scripts: the async classes run on a private loop.

Each ``Sync*`` object starts (once per process) a daemon thread with its own event loop
and runs every coroutine method of the wrapped async object there, blocking until it
is done. No second implementation exists to drift from the async one.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

from ._admin import Admin
from ._publisher import Publisher
from ._replays import Replays
from ._schemas import Schemas

__all__ = ["SyncAdmin", "SyncPublisher", "SyncReplays", "SyncSchemas"]

T = TypeVar("T")


class _LoopThread:
    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def loop(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="tidings-sync", daemon=True).start()
                cls._loop = loop
            return cls._loop


def _run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run_coroutine_threadsafe(coro, _LoopThread.loop()).result()


class _Blocking(Generic[T]):
    def __init__(self, make: Callable[[], T]) -> None:
        async def build() -> T:
            return make()

        self._inner: T = _run(build())

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if inspect.iscoroutinefunction(attr):
            @functools.wraps(attr)
            def call(*args: Any, **kwargs: Any) -> Any:
                return _run(attr(*args, **kwargs))

            return call
        return attr

    def close(self) -> None:
        _run(self._inner.close())  # type: ignore[attr-defined]

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SyncPublisher(_Blocking[Publisher]):
    """:class:`Publisher` with blocking methods."""

    def __init__(
        self, url: str, token: str, *, timeout: float = 30.0, follow_owners: bool = False, deadline: float = 60.0
    ) -> None:
        super().__init__(
            lambda: Publisher(url, token, timeout=timeout, follow_owners=follow_owners, deadline=deadline)
        )


class SyncAdmin(_Blocking[Admin]):
    """:class:`Admin` with blocking methods."""

    def __init__(self, url: str, token: str, *, timeout: float = 30.0) -> None:
        super().__init__(lambda: Admin(url, token, timeout=timeout))


class SyncSchemas(_Blocking[Schemas]):
    """:class:`Schemas` with blocking methods."""

    def __init__(self, url: str, token: str, *, timeout: float = 30.0) -> None:
        super().__init__(lambda: Schemas(url, token, timeout=timeout))


class SyncReplays(_Blocking[Replays]):
    """:class:`Replays` with blocking methods."""

    def __init__(self, url: str, token: str, *, timeout: float = 30.0) -> None:
        super().__init__(lambda: Replays(url, token, timeout=timeout))
