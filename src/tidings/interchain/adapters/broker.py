"""A network that is a tidings broker, reached through the SDK.

Config: ``kind = "tidings"``, ``url``, ``token`` (a principal allowed to publish and
subscribe), optional ``namespace`` (default ``dlt.events``) and ``data_dir`` (the
broker's data folder, when it is on this machine or a shared filesystem, or the
PostgreSQL address of a broker that runs on PostgreSQL: needed to list the broker's
events for ``GET /api/v1/events`` and reconciliation, read straight from its log).

Mapping: every DLT event goes to the one namespace; the publish body is the event's
ICRC-16 ``data``, a Map of its fields (``relevantMetadata`` an Array of Text), so
broker filters can select on ``eventType``. One namespace keeps event types free of
namespace syntax and lets one subscription follow them all. Reading back, ``id`` is the
broker's event id, ``timestamp`` its time in milliseconds, ``network`` this network.

Publishing: each event's idempotency key is ``dlt:`` and the SHA-256 of its global id
(from its ``dataLocation``), so an outbox sent again after a crash or a lost answer stores nothing
twice in the broker (within the publication's deduplication window) and counts as sent.

Following: one subscription pushing to the distributor's push endpoint (its id is kept
in the distributor's state, so a restart re-attaches instead of subscribing twice).
The broker's reliable delivery holds the events while the distributor is away. With
``data_dir``, each start of following also reads the broker's log, catching up with
events published before the subscription existed.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import msgspec
from starlette.routing import Mount

from ...client import ClientError, Publisher, Subscriber, to_python
from ...client import EventNotification as BrokerNotification
from ...core.interchain import DltPublish, NetworkNotification, global_id, notification_of
from ..errors import NetworkUnavailable
from ._base import Deliver, Network

__all__ = ["BrokerNetwork"]

log = logging.getLogger("tidings.interchain.broker")


def _body_of(data: Any) -> DltPublish | None:
    try:
        return msgspec.convert(data, DltPublish)
    except msgspec.ValidationError:
        return None


def _key_of(event: DltPublish) -> str | None:
    try:
        gid = global_id(event.dataLocation)
    except ValueError:  # not a hashlink: the SDK gives the event a key of its own
        return None
    # Hashed: a global id may be longer than a key may be, or hold control characters.
    return "dlt:" + hashlib.sha256(gid.encode()).hexdigest()


class BrokerNetwork(Network):
    kind = "tidings"

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.url = str(self.param("url"))
        self.token = str(self.param("token"))
        self.namespace = str(self.param("namespace", "dlt.events"))
        self.data_dir: str | None = self.param("data_dir", None)
        self._pub = Publisher(self.url, self.token, timeout=10)
        self._sub = Subscriber(self._handle, url=self.url, token=self.token)
        self._registered = False

    def routes(self) -> list[Any]:
        return [Mount(self.push_path, app=self._sub)]  # type: ignore[arg-type]

    async def close(self) -> None:
        await self._pub.close()
        await self._sub.close()

    async def _register(self) -> None:
        if not self._registered:
            try:
                await self._pub.register_publication(self.namespace)
            except ClientError as e:
                raise NetworkUnavailable(f"{self.name}: register {self.namespace}: {e}") from e
            self._registered = True

    async def publish(self, event: DltPublish) -> None:
        await self._register()
        try:
            await self._pub.publish(self.namespace, msgspec.to_builtins(event), key=_key_of(event))
        except ClientError as e:
            raise NetworkUnavailable(f"{self.name}: publish: {e}") from e

    async def publish_many(self, events: list[DltPublish]) -> int:
        """One ``icrc72_publish`` call for the whole batch; the leading ``Ok`` items count."""
        await self._register()
        batch = [Publisher.event(self.namespace, msgspec.to_builtins(e), key=_key_of(e)) for e in events]
        try:
            results = await self._pub.publish_batch(batch)
        except ClientError as e:
            raise NetworkUnavailable(f"{self.name}: publish: {e}") from e
        done = 0
        for r in results:
            if r is None or r.Ok is msgspec.UNSET:
                break
            done += 1
        if done == 0:
            raise NetworkUnavailable(f"{self.name}: publish refused: {results[0]!r}")
        return done

    def _notification(self, n: BrokerNotification) -> NetworkNotification | None:
        body = _body_of(to_python(n.data))
        if body is None:
            log.warning("%s: event %s is not a DLT event; ignored", self.name, n.eventId)
            return None
        return notification_of(body, id=n.eventId, timestamp=n.timestamp // 1_000_000, network=self.name)

    async def _handle(self, n: BrokerNotification) -> None:
        deliver = await self._deliverer()
        if deliver is None:
            raise NetworkUnavailable("not followed")  # answered Err: the broker sends it again
        found = self._notification(n)
        if found is not None:
            await deliver([found])

    async def follow(self, deliver: Deliver) -> None:
        import asyncio

        await self._register()
        key = f"tidings-subscription:{self.name}"
        endpoint = self.context.public_url + self.push_path + "/"
        self._following(deliver)  # before subscribing: the first push may come at once
        try:
            known = await self.context.state.get_cursor(key)
            if known is None:
                sub_id = await self._sub.subscribe(self.namespace, endpoint)
                await self.context.state.set_cursor(key, str(sub_id))
            else:
                await self._sub.secrets(int(known))  # verify its pushes again after a restart
            if self.data_dir is not None:
                # Catch up with what was published before the subscription existed (or
                # while it was not followed); repeats are harmless.
                found = await self.events()
                for lo in range(0, len(found), 500):
                    await deliver(found[lo:lo + 500])
            await asyncio.Event().wait()  # pushes arrive through routes() until cancelled
        except ClientError as e:
            raise NetworkUnavailable(f"{self.name}: subscribe: {e}") from e
        finally:
            self._following(None)

    async def events(self) -> list[NetworkNotification]:
        if self.data_dir is None:
            raise NetworkUnavailable(f"{self.name}: listing a broker's events needs its data_dir",
                                     code="not_supported")
        import asyncio

        return await asyncio.to_thread(self._read_log)

    def _read_log(self) -> list[NetworkNotification]:
        from ...pipeline._backend import hot_log
        from ...pipeline._hotlog import EVENT_COLUMNS, IdRange

        out: list[NetworkNotification] = []
        with hot_log(str(self.data_dir)).connect() as conn:
            bounds = conn.id_bounds(self.namespace)
            if bounds is None:
                return out
            for rows in conn.read_range(IdRange(self.namespace, *bounds)):
                for row in rows:
                    r = dict(zip(EVENT_COLUMNS.replace(" ", "").split(","), row, strict=True))
                    body = _body_of(to_python(msgspec.json.decode(r["data"])))
                    if body is not None:
                        out.append(notification_of(body, id=r["id"], timestamp=r["timestamp"] // 1_000_000,
                                                   network=self.name))
        return out

    def frame(self, spark: Any) -> Any | None:
        """The broker's events read by Spark through the ``tidings`` source (in bulk, in parallel)."""
        if self.data_dir is None:
            return None
        from pyspark.sql import functions as F

        from ...pipeline.global_id import global_id_column
        from ...pipeline.session import prepare

        prepare(spark)
        df = (spark.read.format("tidings").schema("namespace string, id long, data_json string")
              .load(self.data_dir).where(F.col("namespace") == self.namespace))
        return df.select(
            global_id_column(F.get_json_object("data_json", "$.dataLocation")).alias("gid"),
            F.col("data_json").alias("payload"),
        ).where(F.col("gid").isNotNull())
