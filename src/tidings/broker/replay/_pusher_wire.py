"""What the broker and a replay's pusher process (``_pusher``) say to each other over the
pusher's stdin and stdout: length-prefixed MessagePack frames.

The broker drives each replay one batch at a time (``Step``); the pusher reads, filters,
pushes that one batch and answers (``Stepped``). Everything a push needs travels with
its step (the endpoint, the subscription's push settings, its signing secrets, the
lease's deadline), so the pusher holds no state the broker could see change: a step
made under an old subscription config is never sent, because the broker makes no step
for it.
"""

from __future__ import annotations

import msgspec

from ...store import StoredEvent

__all__ = ["Failed", "Forget", "Init", "Ready", "Step", "Stepped", "decode_answer", "decode_request", "encode", "frame"]


class Init(msgspec.Struct, tag="init"):
    settings: bytes
    """The broker's settings as JSON (its store's address, the outbound policy, the limits)."""
    reader: str
    """Where the store's events are read (``store.range_reader.reader_address``)."""


class Step(msgspec.Struct, tag="step", kw_only=True):
    """Read the replay's next batch after ``after``, push it, and say what happened."""

    req: int
    replay: int
    namespace: str
    after: int
    before: int
    """The range's end, exclusive."""
    from_id: int
    base: int
    """Notification ids: the event ``from_id + k`` is notification ``base + k``."""
    pairs: bytes
    """The replay's headers, appended to each event's."""
    filter: str | None
    skip: tuple[int, int] | None
    batch: int
    sub: int
    endpoint: str
    mode: str
    echo_filter: str | None
    """The subscription's own filter, echoed in each notification."""
    cloudevents: str | None
    deadline_s: float
    epoch: int | None
    secrets: list[str]
    act_until: float | None
    """Until when (``time.monotonic``, one clock for every process of the host) the broker
    surely holds the subscription's lease; None: no lease. Checked by the pusher last,
    just before the bytes leave, so a step that waited (a stopped process, a full pipe)
    pushes nothing once the lease may have passed to another broadcaster."""
    clock_offset_ns: int
    """The broker's clock less this host's wall clock: the pusher stamps ``sent`` and
    signs by the broker's clock."""


class Forget(msgspec.Struct, tag="forget"):
    """The replay ended (or went back to the broker): drop what was read ahead for it."""

    replay: int


class Stepped(msgspec.Struct, tag="stepped", kw_only=True):
    req: int
    position: int
    """How far the range has been considered once this batch is recorded."""
    whole: bool
    """The endpoint took the batch whole (or it was empty)."""
    outcome: str | None = None
    """``core.retry.Outcome`` value; None: nothing was pushed (the lease's deadline had passed)."""
    answer: bytes | None = None
    """The decoded answer, as JSON again (to find ``Err`` items)."""
    code: str = ""
    retry_after: float | None = None
    seqs: list[int] = []
    ids: list[int] = []
    sources: list[str] = []
    timestamps: list[int] = []
    """The batch taken whole: what its delivery records need."""
    events: list[StoredEvent] = []
    """The batch not taken whole, in full: recorded as pending and retried by the broker."""


class Ready(msgspec.Struct, tag="ready"):
    """The process has opened the store and its outbound calls: steps may come."""


class Failed(msgspec.Struct, tag="failed"):
    req: int
    error: str


_encoder = msgspec.msgpack.Encoder()
_requests = msgspec.msgpack.Decoder(Init | Step | Forget)
_answers = msgspec.msgpack.Decoder(Stepped | Failed | Ready)


def encode(msg: Init | Step | Forget | Stepped | Failed | Ready) -> bytes:
    return _encoder.encode(msg)


def frame(msg: Init | Step | Forget | Stepped | Failed | Ready) -> bytes:
    body = _encoder.encode(msg)
    return len(body).to_bytes(4, "big") + body


def decode_request(b: bytes) -> Init | Step | Forget:
    return _requests.decode(b)


def decode_answer(b: bytes) -> Stepped | Failed | Ready:
    return _answers.decode(b)
