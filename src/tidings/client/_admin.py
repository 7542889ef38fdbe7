from __future__ import annotations

from ..core.wire import (
    BroadcasterInfo,
    BroadcasterSubscriptionsQuery,
    InfoQuery,
    PrincipalCreate,
    PrincipalCreated,
    PrincipalInfo,
    PublicationBroadcastersQuery,
    PublicationInfo,
    PublisherInfo,
    SubscriberInfo,
    SubscriptionInfo,
    SubscriptionQuery,
    Whoami,
)
from ._http import Connection


class Admin:
    """Principals and the info queries. Any principal may query; creating needs an admin."""

    def __init__(self, url: str, token: str, *, timeout: float = 30.0) -> None:
        self._conn = Connection(url, token, timeout=timeout)

    async def __aenter__(self) -> Admin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._conn.close()

    async def create_principal(self, name: str, *, admin: bool = False) -> str:
        """Create a principal and return its bearer token."""
        created = await self._conn.call(
            "tidings_create_principal", PrincipalCreate(name=name, admin=admin), PrincipalCreated
        )
        return created.token

    async def get_principals(self, *, prev: str | None = None, take: int | None = None) -> list[PrincipalInfo]:
        """Principals ordered by name after ``prev`` (admins only; never a token)."""
        return await self._conn.call("tidings_get_principals", InfoQuery(prev=prev, take=take), list[PrincipalInfo])

    async def whoami(self) -> str:
        return (await self._conn.call("tidings_whoami", None, Whoami)).name

    async def get_publications(
        self, *, prev: str | None = None, take: int | None = None, stats_filter: list[str] | None = None
    ) -> list[PublicationInfo]:
        q = InfoQuery(prev=prev, take=take, statsFilter=stats_filter)
        return await self._conn.call("icrc72_get_publications", q, list[PublicationInfo])

    async def get_publishers(
        self, *, prev: str | None = None, take: int | None = None, stats_filter: list[str] | None = None
    ) -> list[PublisherInfo]:
        q = InfoQuery(prev=prev, take=take, statsFilter=stats_filter)
        return await self._conn.call("icrc72_get_publishers", q, list[PublisherInfo])

    async def get_subscribers(
        self, *, prev: str | None = None, take: int | None = None, stats_filter: list[str] | None = None
    ) -> list[SubscriberInfo]:
        q = InfoQuery(prev=prev, take=take, statsFilter=stats_filter)
        return await self._conn.call("icrc72_get_subscribers", q, list[SubscriberInfo])

    async def get_subscriptions(
        self,
        *,
        namespace: str | None = None,
        prev: int | None = None,
        take: int | None = None,
        stats_filter: list[str] | None = None,
    ) -> list[SubscriptionInfo]:
        q = SubscriptionQuery(namespace=namespace, prev=prev, take=take, statsFilter=stats_filter)
        return await self._conn.call("icrc72_get_subscriptions", q, list[SubscriptionInfo])

    async def get_broadcasters(
        self, *, prev: str | None = None, take: int | None = None, stats_filter: list[str] | None = None
    ) -> list[BroadcasterInfo]:
        q = InfoQuery(prev=prev, take=take, statsFilter=stats_filter)
        return await self._conn.call("icrc72_get_broadcasters", q, list[BroadcasterInfo])

    async def get_publication_broadcasters(
        self, namespace: str, *, prev: str | None = None, take: int | None = None,
        stats_filter: list[str] | None = None,
    ) -> list[BroadcasterInfo]:
        """The publication's owner and the broadcasters delivering its subscriptions
        (``tidings:broadcaster:role`` in their stats)."""
        q = PublicationBroadcastersQuery(namespace=namespace, prev=prev, take=take, statsFilter=stats_filter)
        return await self._conn.call("icrc72_get_publication_broadcasters", q, list[BroadcasterInfo])

    async def get_broadcaster_subscriptions(
        self, broadcaster: str | None = None, *, prev: int | None = None, take: int | None = None,
        stats_filter: list[str] | None = None,
    ) -> list[SubscriptionInfo]:
        """The subscriptions ``broadcaster`` delivers (the one answering if None)."""
        q = BroadcasterSubscriptionsQuery(broadcaster=broadcaster, prev=prev, take=take, statsFilter=stats_filter)
        return await self._conn.call("icrc72_get_broadcaster_subscriptions", q, list[SubscriptionInfo])
