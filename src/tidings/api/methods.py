"""The table of HTTP methods: name, argument type, result type, handler.

Every ICRC method keeps its standard name at ``POST /v1/<name>``; tidings' own
additions are prefixed ``tidings_``. The OpenAPI document is generated from this table.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..broker import Broker
from ..broker.registry import take_of
from ..core.wire import (
    BroadcasterInfo,
    BroadcasterSubscriptionsQuery,
    ConfirmResult,
    DeadLetterInfo,
    DeadLetterQuery,
    Event,
    InfoQuery,
    ItemResult,
    PendingAuthorization,
    PrincipalCreate,
    PrincipalCreated,
    PrincipalInfo,
    PublicationBroadcastersQuery,
    PublicationInfo,
    PublicationRegistration,
    PublicationUpdate,
    PublisherInfo,
    SecretRotation,
    SubscriberInfo,
    SubscriptionInfo,
    SubscriptionQuery,
    SubscriptionRegistration,
    SubscriptionUpdate,
    TokenRevocation,
    TokensRevoked,
    Whoami,
    err,
)
from ..errors import BadRequest, Forbidden
from ..store import PrincipalRecord
from ._method import Handler, Method, Reply, warning_header
from .replay_methods import REPLAY_METHODS
from .schema_methods import SCHEMA_METHODS

__all__ = ["METHODS", "Method"]


async def _create_principal(b: Broker, caller: PrincipalRecord, arg: PrincipalCreate) -> PrincipalCreated:
    if not caller.admin:
        raise Forbidden("only an admin principal may create principals")
    token = await b.auth.create(arg.name, admin=arg.admin)
    if token is None:
        raise BadRequest(f"principal {arg.name!r} already exists", code="already_exists")
    return PrincipalCreated(name=arg.name, token=token, admin=arg.admin)


async def _revoke_tokens(b: Broker, caller: PrincipalRecord, arg: TokenRevocation) -> TokensRevoked:
    # An admin revokes anyone's; a principal its own (a token it fears has leaked).
    if not caller.admin and arg.principal != caller.name:
        raise Forbidden("only an admin may revoke another principal's tokens")
    if len(arg.principal) > 128 or (arg.token is not None and len(arg.token) > 256):
        raise BadRequest("principal or token too long", code="invalid_argument")
    return TokensRevoked(revoked=await b.auth.revoke(arg.principal, arg.token))


async def _pending_authorizations(b: Broker, caller: PrincipalRecord, arg: None) -> list[PendingAuthorization]:
    # The subscriber sees its own requests; a publication's controllers and admins see theirs.
    def visible(p: PendingAuthorization) -> bool:
        pub = b.orchestrator.publications.get(p.namespace)
        return p.subscriber == caller.name or (pub is not None and b.orchestrator.controls_publication(caller, pub))

    return [p for p in b.authorizer.pending() if visible(p)]


async def _publish(b: Broker, caller: PrincipalRecord, events: list[Event]) -> Any:
    warnings: list[str] = []
    results = await b.broadcaster.publish(caller, events, warnings)
    return Reply(results, warning_header(warnings)) if warnings else results


async def _get_principals(b: Broker, caller: PrincipalRecord, arg: InfoQuery) -> list[PrincipalInfo]:
    if not caller.admin:
        raise Forbidden("only an admin principal may list principals")
    found = sorted(await b.store.list_principals(), key=lambda p: p.name)
    after = [p for p in found if arg.prev is None or p.name > arg.prev][: take_of(arg.take)]
    return [PrincipalInfo(name=p.name, admin=p.admin, createdAt=p.created_at) for p in after]


async def _whoami(b: Broker, caller: PrincipalRecord, arg: None) -> Whoami:
    return Whoami(name=caller.name, admin=caller.admin)


def _too_many(b: Broker, items: list[Any]) -> list[ItemResult | None] | None:
    """``max_batch_items`` holds for every batch call: more make every item GenericBatchError."""
    n, limit = len(items), b.settings.max_batch_items
    return [err("GenericBatchError", f"a batch holds at most {limit} items")] * n if n > limit else None


def _batch(fn: Callable[[Broker, PrincipalRecord, Any], Awaitable[Any]]) -> Handler:
    """A batch method: refused item by item beyond ``max_batch_items``."""

    async def call(b: Broker, c: PrincipalRecord, a: list[Any]) -> Any:
        return _too_many(b, a) or await fn(b, c, a)

    return call


async def _confirm(b: Broker, c: PrincipalRecord, a: list[int]) -> ConfirmResult:
    refused = _too_many(b, a)
    return ConfirmResult(itemized=refused) if refused else await b.confirm(c, a)


async def _no_store(results: Awaitable[list[ItemResult]]) -> Reply:
    """Secrets in full: no cache on the way keeps a copy of the answer."""
    return Reply(await results, {"Cache-Control": "no-store"})


_ITEMS = list[ItemResult | None]

METHODS: dict[str, Method] = {
    m.name: m
    for m in [
        Method(
            "icrc72_register_publication", list[PublicationRegistration], _ITEMS,
            _batch(lambda b, c, a: b.orchestrator.register_publications(c, a)),
            "Register publications; the caller becomes a publisher of each namespace.",
        ),
        Method(
            "icrc72_register_subscription", list[SubscriptionRegistration], _ITEMS,
            _batch(lambda b, c, a: b.orchestrator.register_subscriptions(c, a)),
            "Register subscriptions; Ok carries the subscription id.",
        ),
        Method(
            "icrc72_publish", list[Event], _ITEMS,
            _publish,
            "Publish events; Ok carries the assigned event id, once the event is durable.",
            bounded_ints=False,  # a publisher's id and timestamp are checked, never stored
        ),
        Method(
            "icrc72_confirm_notifications", list[int], ConfirmResult,
            _confirm,
            "Confirm notifications received in oneshot mode.",
        ),
        Method(
            "icrc72_confirm_messages", list[int], ConfirmResult,
            _confirm,
            "Alias of icrc72_confirm_notifications (the draft uses both names).",
        ),
        Method(
            "icrc72_update_publication", list[PublicationUpdate], _ITEMS,
            _batch(lambda b, c, a: b.orchestrator.update_publications(c, a)),
            "Change publication configs (controllers only); a null value removes a key.",
        ),
        Method(
            "icrc72_update_subscription", list[SubscriptionUpdate], _ITEMS,
            _batch(lambda b, c, a: b.orchestrator.update_subscriptions(c, a)),
            "Change subscription configs, endpoints or modes (controllers only).",
        ),
        Method(
            "icrc72_delete_publication", list[str], _ITEMS,
            _batch(lambda b, c, a: b.orchestrator.delete_publications(c, a)),
            "Delete publications (controllers only); their subscriptions end, their events stay.",
        ),
        Method(
            "icrc72_delete_subscription", list[int], _ITEMS,
            _batch(lambda b, c, a: b.orchestrator.delete_subscriptions(c, a)),
            "Delete subscriptions (controllers only).",
        ),
        Method(
            "icrc72_start_subscription", list[int], _ITEMS,
            _batch(lambda b, c, a: b.orchestrator.set_stopped(c, a, False)),
            "Start stopped subscriptions: delivery resumes with the next event published.",
        ),
        Method(
            "icrc72_stop_subscription", list[int], _ITEMS,
            _batch(lambda b, c, a: b.orchestrator.set_stopped(c, a, True)),
            "Stop subscriptions: nothing is delivered until they are started.",
        ),
        Method(
            "icrc72_get_publications", InfoQuery, list[PublicationInfo],
            lambda b, c, a: b.orchestrator.get_publications(a),
            "Publications ordered by namespace, with statistics.", InfoQuery(),
        ),
        Method(
            "icrc72_get_publishers", InfoQuery, list[PublisherInfo],
            lambda b, c, a: b.orchestrator.get_publishers(a),
            "Publishers ordered by principal, with statistics.", InfoQuery(),
        ),
        Method(
            "icrc72_get_subscribers", InfoQuery, list[SubscriberInfo],
            lambda b, c, a: b.orchestrator.get_subscribers(a),
            "Subscribers ordered by principal, with statistics.", InfoQuery(),
        ),
        Method(
            "icrc72_get_subscriptions", SubscriptionQuery, list[SubscriptionInfo],
            lambda b, c, a: b.orchestrator.get_subscriptions(c, a),
            "Subscriptions ordered by id, optionally of one namespace, with statistics.",
            SubscriptionQuery(),
        ),
        Method(
            "icrc72_get_broadcasters", InfoQuery, list[BroadcasterInfo],
            lambda b, c, a: b.broadcasters.get_broadcasters(a),
            "Live broadcasters by id, with statistics, their URL and what they serve.", InfoQuery(),
        ),
        Method(
            "icrc72_get_publication_broadcasters", PublicationBroadcastersQuery, list[BroadcasterInfo],
            lambda b, c, a: b.broadcasters.get_publication_broadcasters(a),
            "The broadcasters serving a publication: its owner, and those delivering its subscriptions.",
        ),
        Method(
            "icrc72_get_broadcaster_subscriptions", BroadcasterSubscriptionsQuery, list[SubscriptionInfo],
            lambda b, c, a: b.broadcasters.get_broadcaster_subscriptions(c, a),
            "The subscriptions a broadcaster delivers (this one unless named), by id, with statistics.",
            BroadcasterSubscriptionsQuery(),
        ),
        Method(
            "tidings_get_dead_letters", DeadLetterQuery, list[DeadLetterInfo],
            lambda b, c, a: b.dead_letters.query(c, a),
            "Dead letters of the subscriptions the caller controls, by id.", DeadLetterQuery(),
        ),
        Method(
            "tidings_redrive_dead_letters", list[int], _ITEMS,
            _batch(lambda b, c, a: b.dead_letters.redrive(c, a)),
            "Send dead letters again (under their notification ids), before new events.",
        ),
        Method(
            "tidings_drop_dead_letters", list[int], _ITEMS,
            _batch(lambda b, c, a: b.dead_letters.drop(c, a)),
            "Delete dead letters for good.",
        ),
        Method(
            "tidings_get_pending_authorizations", None, list[PendingAuthorization],
            _pending_authorizations,
            "Subscription requests waiting for their publisher's approval.", None,
        ),
        Method(
            "tidings_get_subscription_secrets", list[int], _ITEMS,
            _batch(lambda b, c, a: b.signing.get(c, a)),
            "The secrets pushes to these subscriptions are signed with, newest first, masked.",
        ),
        Method(
            "tidings_reveal_subscription_secrets", list[int], _ITEMS,
            _batch(lambda b, c, a: _no_store(b.signing.reveal(c, a))),
            "The secrets pushes to these subscriptions are signed with, newest first, in full "
            "(for a receiver to verify pushes; the subscription's controllers only).",
        ),
        Method(
            "tidings_rotate_subscription_secret", list[SecretRotation], _ITEMS,
            _batch(lambda b, c, a: b.signing.rotate(c, a)),
            "Give subscriptions a new signing secret; Ok is the secret. The old ones sign for overlap_s more.",
        ),
        Method(
            "tidings_create_principal", PrincipalCreate, PrincipalCreated, _create_principal,
            "Create a principal and return its bearer token (admin only).",
        ),
        Method(
            "tidings_revoke_tokens", TokenRevocation, TokensRevoked, _revoke_tokens,
            "Revoke one token of a principal, or all of them (admin; or a principal its own). "
            "Takes effect on every server of the store within seconds.",
        ),
        Method("tidings_whoami", None, Whoami, _whoami, "The calling principal.", None),
        Method(
            "tidings_get_principals", InfoQuery, list[PrincipalInfo], _get_principals,
            "Principals ordered by name, whether each is an admin, when it was made (admin; never a token).",
            InfoQuery(),
        ),
        *SCHEMA_METHODS,
        *REPLAY_METHODS,
    ]
}
