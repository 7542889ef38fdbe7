"""What a request handler of the ENS and pubsub faces gets, and what it may ask of the component.

A handler takes the component serving the request, the ``<iq>`` and its child element,
and returns the child of the result (or ``None`` for an empty result), or raises
:class:`~tidings.xmpp.stanzas.StanzaError`. It sees the component only through
:class:`Face`, so ``ens_face`` and ``pubsub_face`` do not depend on
:class:`~tidings.xmpp.component.XmppFace`, which imports them to build its table.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol, TypeAlias
from xml.etree import ElementTree as ET

if TYPE_CHECKING:
    import slixmpp

    from ..broker import Broker
    from ..store import PrincipalRecord

__all__ = ["Face", "Handler"]


class Face(Protocol):
    """The component as the request handlers see it (``XmppFace`` is one)."""

    @property
    def broker(self) -> Broker:
        """The broker serving the request: its orchestrator and broadcaster, as HTTP's."""

    @property
    def domain(self) -> str:
        """The component's domain, in lower case: the JID events are named under."""

    @property
    def max_payload(self) -> int:
        """The largest payload a request may carry, in bytes of its serialised XML."""

    async def principal(self, jid: str) -> PrincipalRecord:
        """The principal the entity ``jid`` acts as, created on its first request."""

    async def entity_publication(self, namespace: str) -> None:
        """Register an XMPP entity's own namespace on its first use (nothing for others)."""


Handler: TypeAlias = "Callable[[Face, slixmpp.Iq, ET.Element], Awaitable[ET.Element | None]]"
"""Serves one kind of request: the table key is the child element's (namespace, name)."""
