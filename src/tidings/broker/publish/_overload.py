"""Publishes waiting for the store: admitted under caps, waited for within a bound, watched
for a stall (docs/operations.md, "Overload and a stalling store").

- **Admission** (``core.admission``): the faces take a :class:`Ticket` for each publish
  before reading its body and give it back once answered; past the caps the publish is
  refused at once (503 ``overloaded`` with ``Retry-After``).
- **A bounded wait**: :meth:`Overload.commit` waits for the store's commit at most
  ``store_timeout_s``, then answers 503 ``commit_timeout`` (the events may have been
  stored). The commit itself goes on, and its ticket stays counted until the store is
  done with it: what the store holds is what the caps bound.
- **Stalls**: the age of the oldest commit in progress is what ``/readyz`` reads (a read
  probe cannot see a writer stuck in ``fsync``); a stall is logged once when it starts and
  once when it ends.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import Any, TypeVar

from ...core.admission import Admission
from ...errors import StoreUnavailable, Unavailable

__all__ = ["COMMIT_TIMEOUT", "CommitTimeout", "Overload", "Overloaded", "Ticket"]

log = logging.getLogger("tidings.overload")
T = TypeVar("T")

COMMIT_TIMEOUT = "commit_timeout"
"""Refusal reason and error code: a commit not done within ``store_timeout_s``."""
_PAUSE_S = 1.0
"""A check of :meth:`Overload.watch` this much later than due: the process itself was not running."""
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Overloaded(Unavailable):
    """A publish refused before it was read: too much waits for the store already."""

    def __init__(self, reason: str, admission: Admission) -> None:
        cap = (f"{admission.max_bytes} bytes (TIDINGS_MAX_WAITING_BYTES)" if reason == "bytes"
               else f"{admission.max_requests} requests (TIDINGS_MAX_WAITING_REQUESTS)")
        super().__init__(f"too much is waiting for the store ({cap}); nothing was stored, retry later",
                         code="overloaded", retry_after_s=1)


class CommitTimeout(Unavailable):
    """A publish whose commit was not done within the store's timeout: its outcome is unknown."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(
            f"the store did not commit within {timeout_s:g} s (TIDINGS_STORE_TIMEOUT_S); the events "
            "may have been stored: retry with the same key", code=COMMIT_TIMEOUT, retry_after_s=max(1, int(timeout_s)),
        )


class Ticket:
    """One publish admitted: its bytes, and who gives them back (the face, or the store
    when its commit outlived the answer)."""

    __slots__ = ("held", "nbytes", "released")

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self.held = 0
        """Commits of this publish still in the store after their wait timed out."""
        self.released = False


_TICKET: ContextVar[Ticket | None] = ContextVar("tidings_publish_ticket", default=None)


class Overload:
    def __init__(
        self, admission: Admission, *, store: str, timeout_s: float, stall_s: float,
        probe: Callable[[], Awaitable[Any]] | None = None, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.admission = admission
        self.store = store
        """The store's name in the log lines (an address without its password)."""
        self.timeout_s = timeout_s
        self.stall_s = stall_s
        self._clock = clock
        self._probe = probe
        """A commit of nothing (``store.append([])``): see :meth:`watch`."""
        self._waiting: dict[int, float] = {}
        """Commits in progress: when each started (insertion order: the first is the oldest)."""
        self._next = 0
        self.counts = [0] * (len(_BUCKETS) + 1)
        self.latency_sum = 0.0
        self.latency_count = 0
        self.stall_since: float | None = None
        self._refused_before = 0
        self._last_done = float("-inf")
        """When a commit last succeeded."""

    # -- admission --------------------------------------------------------------------

    def admit(self, nbytes: int) -> Ticket:
        """Take a publish of ``nbytes`` (declared; 0 if unknown), or raise :class:`Overloaded`.
        The ticket is this task's until :meth:`release`: its commits count against it."""
        reason = self.admission.take(nbytes)
        if reason is not None:
            raise Overloaded(reason, self.admission)
        ticket = Ticket(max(0, nbytes))
        _TICKET.set(ticket)
        return ticket

    def grow(self, ticket: Ticket, nbytes: int) -> None:
        """The body of ``ticket`` has reached ``nbytes``; raise :class:`Overloaded` if that no
        longer fits (the ticket is still the caller's to release)."""
        if nbytes <= ticket.nbytes:
            return
        reason = self.admission.grow(ticket.nbytes, nbytes)
        ticket.nbytes = nbytes
        if reason is not None:
            raise Overloaded(reason, self.admission)

    def release(self, ticket: Ticket) -> None:
        """The publish is answered; its bytes go back now, or when the store is done with it."""
        ticket.released = True
        if _TICKET.get() is ticket:
            _TICKET.set(None)
        if not ticket.held:
            self.admission.give_back(ticket.nbytes)

    # -- commits ----------------------------------------------------------------------

    async def commit(self, store_call: Awaitable[T]) -> T:
        """The store's answer to ``store_call``, waited for at most ``timeout_s``; past it
        :class:`CommitTimeout`, while the commit goes on and stays counted."""
        task = asyncio.ensure_future(store_call)
        ticket = _TICKET.get()
        self._track(task, ticket)
        try:
            return await asyncio.wait_for(asyncio.shield(task), self.timeout_s)
        except asyncio.CancelledError:
            if ticket is not None and not task.done():  # the caller went away: the store still holds it
                ticket.held += 1
            raise
        except TimeoutError:
            if task.done():  # done at the deadline: its answer stands
                return task.result()
            if ticket is not None:
                ticket.held += 1
            self.admission.count(COMMIT_TIMEOUT)
            raise CommitTimeout(self.timeout_s) from None

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """Around another wait of a publish on the store (its token's look-up, a read a
        paused database holds as long as a commit): counted as in progress, so a stall is
        seen even when no publish has reached its commit; only a commit ends one."""
        key = self._next
        self._next += 1
        self._waiting[key] = self._clock()
        try:
            yield
        finally:
            self._waiting.pop(key, None)

    def _track(self, task: asyncio.Future[Any], ticket: Ticket | None) -> None:
        key = self._next
        self._next += 1
        started = self._clock()
        self._waiting[key] = started

        def done(t: asyncio.Future[Any]) -> None:
            self._waiting.pop(key, None)
            now = self._clock()
            self._observe(now - started)
            failed = t.cancelled() or isinstance(t.exception(), StoreUnavailable)  # retrieved either way
            if not failed:
                self._last_done = now
                if self.stall_since is not None:
                    self._end_stall()
            if ticket is not None and ticket.held:
                ticket.held -= 1
                if ticket.released and not ticket.held:
                    self.admission.give_back(ticket.nbytes)

        task.add_done_callback(done)

    def _observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(_BUCKETS, seconds)] += 1
        self.latency_sum += seconds
        self.latency_count += 1

    def oldest_age(self) -> float:
        """Seconds the oldest commit in progress has waited, counted from the last commit
        done if that is later (0 when none waits): a backlog that drains after a stall,
        commit after commit, is progress, not another stall."""
        for started in self._waiting.values():
            return max(0.0, self._clock() - max(started, self._last_done))
        return 0.0

    @property
    def commits_waiting(self) -> int:
        return len(self._waiting)

    # -- stalls -----------------------------------------------------------------------

    def stalled(self) -> bool:
        """Whether commits have stopped: from the moment the oldest in progress is older
        than ``stall_s`` until a commit succeeds (a commit that fails for want of the store
        does not end it). Its start and end are logged once each."""
        if self.stall_since is None:
            age = self.oldest_age()
            if age < self.stall_s:
                return False
            self.stall_since = self._clock() - age
            self._refused_before = self.admission.refused_total()
            log.warning(
                "the store %s has not committed for %.1f s: %d commit(s) and %d request(s) (%d bytes) wait; "
                "/readyz answers 503, and publishes past the caps are refused with Retry-After",
                self.store, age, len(self._waiting), self.admission.waiting_requests, self.admission.waiting_bytes,
            )
        return True

    def _end_stall(self) -> None:
        since, self.stall_since = self.stall_since, None
        if since is not None:
            log.warning(
                "the store %s commits again after a stall of %.1f s; %d publish(es) were refused meanwhile",
                self.store, self._clock() - since, self.admission.refused_total() - self._refused_before,
            )

    async def watch(self, every_s: float = 0.25) -> None:
        """Check for a stall every ``every_s`` (the log line comes even if nobody probes
        ``/readyz``). While stalled with no commit in progress (those that waited failed),
        a commit of nothing (``probe``) tells when the store commits again, so that a node
        unready, and sent no traffic, still learns it."""
        probe: asyncio.Future[Any] | None = None
        last = self._clock()
        try:
            while True:
                await asyncio.sleep(every_s)
                now = self._clock()
                late, last = now - last - every_s, now
                if late >= max(_PAUSE_S, self.stall_s / 2):
                    self.paused(late)
                if self.stalled() and not self._waiting and self._probe is not None and (
                        probe is None or probe.done()):
                    probe = asyncio.ensure_future(self._probe())
                    self._track(probe, None)
        finally:
            if probe is not None and not probe.done():
                probe.cancel()

    def paused(self, seconds: float) -> None:
        """This process did not run for ``seconds`` (stopped with SIGSTOP, a VM paused, a
        starved CPU): the commits waiting meanwhile are not counted as the store's stall,
        since the answers they waited for could not be taken in. Said once in the log."""
        # Never past now: a commit begun or done since the process ran again is not moved
        # into the future, where it would hide a stall for as long as the pause lasted.
        now = self._clock()
        self._waiting = {k: min(started + seconds, now) for k, started in self._waiting.items()}
        self._last_done = min(self._last_done + seconds, now)
        log.warning("this process did not run for %.1f s (stopped, paused or starved of CPU); "
                    "its commits' wait meanwhile is not counted as the store's", seconds)

    def committed_within(self, seconds: float) -> bool:
        """Whether a commit succeeded in the last ``seconds``: proof enough that the store
        takes writes, without a read that waits behind the backlog a stall leaves."""
        return self._clock() - self._last_done <= seconds

    def problem(self) -> str | None:
        """``/readyz``'s reason while commits are stalled."""
        if not self.stalled():
            return None
        return (f"commits are stalled: none has succeeded for {self._clock() - (self.stall_since or 0):.1f} s "
                f"(the oldest in progress waited more than {self.stall_s:g} s, TIDINGS_STORE_STALL_S)")

    # -- metrics ----------------------------------------------------------------------

    def render(self, prefix: str = "tidings") -> str:
        """These figures in the Prometheus text format."""
        a = self.admission
        out: list[str] = []

        def gauge(name: str, help_: str, value: float) -> None:
            out.extend((f"# HELP {prefix}_{name} {help_}", f"# TYPE {prefix}_{name} gauge", f"{prefix}_{name} {value}"))

        gauge("publish_waiting_requests", "Publishes admitted and not yet answered by the store.", a.waiting_requests)
        gauge("publish_waiting_bytes", "Bytes of the publishes admitted and not yet answered by the store.",
              a.waiting_bytes)
        gauge("store_commits_waiting", "Commits of publishes in progress in the store.", len(self._waiting))
        gauge("store_oldest_commit_age_seconds", "Age of the oldest commit in progress (0: none).",
              round(self.oldest_age(), 6))
        gauge("store_stalled", "1 while commits are stalled (TIDINGS_STORE_STALL_S).",
              int(self.stall_since is not None))
        name = f"{prefix}_publish_refused_total"
        out.extend((f"# HELP {name} Publishes refused for overload, by reason.", f"# TYPE {name} counter"))
        for reason in ("bytes", "requests", COMMIT_TIMEOUT):
            out.append(f'{name}{{reason="{reason}"}} {a.refused[reason]}')
        name = f"{prefix}_store_commit_seconds"
        out.extend((f"# HELP {name} How long publishes' commits took in the store.", f"# TYPE {name} histogram"))
        running = 0
        for bound, n in zip(_BUCKETS, self.counts, strict=False):
            running += n
            out.append(f'{name}_bucket{{le="{bound}"}} {running}')
        out.append(f'{name}_bucket{{le="+Inf"}} {self.latency_count}')
        out.append(f"{name}_sum {self.latency_sum}")
        out.append(f"{name}_count {self.latency_count}")
        return "\n".join(out) + "\n"
