"""The XMPP face of tidings: an external component (XEP-0114) in the server's process.

::

    face = XmppFace(broker, settings)     # settings.xmpp_component names its domain
    await face.start()                    # connects, and reconnects for as long as it runs
    ...
    await face.stop()

Every request is served by the same broker as HTTP: an XMPP user acts as the principal
``xmpp:<bare JID>``; subscriptions it makes are ordinary subscriptions whose endpoint is
its own JID (``core.ens``), pushed by the broker's delivery through this face's
transport, so filters, skip, allow/deny lists, retries, statistics and dead letters are
the ones HTTP subscribers get. docs/xmpp.md has the whole mapping.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast
from xml.etree import ElementTree as ET

import msgspec
import slixmpp
from slixmpp.exceptions import IqError, IqTimeout
from slixmpp.xmlstream import StanzaBase
from slixmpp.xmlstream.handler import CoroutineCallback
from slixmpp.xmlstream.matcher import StanzaPath

from ..core import ens, tracecontext
from ..core.addresses import unreachable
from ..core.config import PublicationConfig, SubscriptionConfig
from ..core.retry import Backoff, Outcome
from ..core.wire import GenericError, ItemResult, PublicationRegistration, err
from ..errors import TidingsError
from ..settings import Settings
from ..store import PrincipalRecord, SubscriptionRecord
from . import ens_face, pubsub_face
from .handler import Handler
from .payload import MAX_DEPTH, to_xml, too_deep
from .stanzas import ENS, NOTIFICATION, StanzaError, code_of, shim_headers

if TYPE_CHECKING:
    from ..broker import Broker
    from ..broker.delivery import Note

__all__ = ["XmppFace"]

log = logging.getLogger("tidings.xmpp")
_decode = msgspec.json.Decoder().decode
_RECONNECT_MAX_S = 5.0
_REFUSED_BACKOFF = Backoff(initial_s=1.0, maximum_s=60.0)
"""Between tries after the server refused the component (a wrong secret): the refusal
is logged once, and tries slow down to one a minute instead of two a second."""
_WRAPPING = 3
"""Elements a request may wrap its payload in (``pubsub``, ``publish``, ``item``). A
request nested deeper than these plus :data:`MAX_DEPTH` is refused before it is read;
``from_xml`` then holds the payload itself to :data:`MAX_DEPTH`."""


class XmppFace:
    def __init__(self, broker: Broker, settings: Settings) -> None:
        if not settings.xmpp_component:
            raise ValueError("settings.xmpp_component is empty: no XMPP face to run")
        self.broker = broker
        self.settings = settings
        self.domain = settings.xmpp_component.lower()
        self.max_payload = min(settings.max_body_bytes, 256 * 1024)
        self._known: set[str] = set()
        self._xmpp: slixmpp.ComponentXMPP | None = None
        self._online = asyncio.Event()
        self._stopping = False
        self._refusals = 0
        """Refusals since the last session: the back-off's attempt number."""
        self._told = ""
        """The problem last logged, so that an episode is logged once, not per try."""
        self._watchdog: asyncio.TimerHandle | None = None
        self._handlers: dict[tuple[str, str], Handler] = {
            **ens_face.HANDLERS, **pubsub_face.HANDLERS,
        }

    # -- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        slix = logging.getLogger("slixmpp")
        if not slix.isEnabledFor(logging.DEBUG):
            # slixmpp logs every lost connection at INFO; the component tells each episode once.
            slix.setLevel(logging.WARNING)
        x = slixmpp.ComponentXMPP(
            self.domain, self.settings.xmpp_secret, self.settings.xmpp_host, self.settings.xmpp_port
        )
        # slixmpp writes out a namespaced attribute only under a prefix it knows.
        x.namespace_map[NOTIFICATION] = "tidings"
        x.register_handler(CoroutineCallback("tidings iq get", StanzaPath("iq@type=get"), self._on_iq))
        x.register_handler(CoroutineCallback("tidings iq set", StanzaPath("iq@type=set"), self._on_iq))
        x.add_event_handler("session_start", self._on_session_start)
        x.add_event_handler("disconnected", self._on_disconnected)
        x.add_event_handler("connection_failed", self._on_failed)
        x.add_event_handler("stream_error", self._on_stream_error)
        self._xmpp = x
        self.broker.delivery.transports["xmpp"] = self.push
        self.broker.authorizer.remote["xmpp"] = self.authorise
        self._connect()

    @property
    def _address(self) -> str:
        return f"{self.settings.xmpp_host}:{self.settings.xmpp_port}"

    def _connect(self) -> None:
        """One try; a try that has no session within the connect timeout (a server that
        takes the connection and says nothing, an address that drops packets) is ended
        and counted as failed."""
        if self._xmpp is None or self._stopping:
            return
        self._xmpp.connect()
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._watchdog = self._xmpp.loop.call_later(self.settings.connect_timeout_s, self._no_session)

    def _no_session(self) -> None:
        self._watchdog = None
        if self._online.is_set() or self._stopping or self._xmpp is None:
            return
        if self._xmpp.transport is None:
            # No connection made yet: slixmpp's own loop is trying, and 'connection_failed'
            # tells each failure. Look again later.
            self._watchdog = self._xmpp.loop.call_later(self.settings.connect_timeout_s, self._no_session)
            return
        self._tell(logging.WARNING, "xmpp: " + unreachable(
            "the XMPP server", self._address, self.settings.connect_timeout_s, "no session in time"))
        self._xmpp.abort()  # 'disconnected' follows, and with it the next try

    def _tell(self, level: int, message: str) -> None:
        """Log ``message`` unless it is the problem already told (one line per episode)."""
        if message != self._told:
            self._told = message
            log.log(level, "%s", message)

    async def stop(self) -> None:
        self._stopping = True
        if self._watchdog is not None:
            self._watchdog.cancel()
        self.broker.delivery.transports.pop("xmpp", None)
        self.broker.authorizer.remote.pop("xmpp", None)
        if self._xmpp is not None:
            with contextlib.suppress(Exception):
                self._xmpp.cancel_connection_attempt()
                await asyncio.wait_for(self._xmpp.disconnect(wait=1.0), 3.0)
        self._online.clear()

    async def wait_online(self, timeout: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._online.wait(), timeout)
        return self._online.is_set()

    def _on_session_start(self, _event: object) -> None:
        level = logging.WARNING if self._told else logging.INFO  # after a problem, say it is over
        log.log(level, "xmpp: component %s connected to %s", self.domain, self._address)
        self._refusals, self._told = 0, ""
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        self._online.set()

    def _on_disconnected(self, _reason: object) -> None:
        was_online = self._online.is_set()
        self._online.clear()
        if self._stopping or self._xmpp is None:
            return
        if was_online:
            log.warning("xmpp: disconnected from the XMPP server at %s; reconnecting", self._address)
        delay = 0.5
        if self._refusals:
            delay = _REFUSED_BACKOFF.delay(self._refusals, random.random())
        self._xmpp.loop.call_later(delay, self._reconnect)

    def _on_stream_error(self, error: Any) -> None:
        condition = str(error["condition"] or "") if error is not None else ""
        if condition == "not-authorized":
            self._refusals += 1
            self._tell(logging.ERROR, (
                f"xmpp: the XMPP server at {self._address} refused the component {self.domain}: "
                f"not-authorized (TIDINGS_XMPP_SECRET does not match the server's component secret, "
                f"or the server has no component {self.domain}); retrying with back-off up to "
                f"{_REFUSED_BACKOFF.maximum_s:g} s"))
        else:
            self._tell(logging.WARNING, f"xmpp: the XMPP server at {self._address} ended the stream: "
                                        f"{condition or 'stream error'} {error['text'] or ''}".rstrip())

    def _on_failed(self, reason: object) -> None:
        # slixmpp backs off up to 300 s between tries; the component keeps it short, so a
        # restarted server has its subscribers served again within seconds.
        self._tell(logging.WARNING, "xmpp: " + unreachable(
            "the XMPP server", self._address, self.settings.connect_timeout_s, str(reason)))
        if self._xmpp is not None:
            self._xmpp._connect_loop_wait = min(self._xmpp._connect_loop_wait, _RECONNECT_MAX_S)

    def _reconnect(self) -> None:
        if not self._stopping and self._xmpp is not None and not self._online.is_set():
            self._connect()

    # -- requests ---------------------------------------------------------------------

    async def _on_iq(self, stanza: StanzaBase) -> None:
        iq = cast(slixmpp.Iq, stanza)
        child = iq.xml[0] if len(iq.xml) else None
        try:
            if child is None:
                raise StanzaError("bad-request", "an iq request needs one child element")
            if too_deep(child, MAX_DEPTH + _WRAPPING):
                # Dropped before anything copies it: slixmpp's reply copies the stanza by recursion.
                iq.xml.remove(child)
                raise StanzaError("not-acceptable", f"the payload nests more than {MAX_DEPTH} elements deep")
            ns, _, name = child.tag[1:].partition("}") if child.tag.startswith("{") else ("", "", child.tag)
            handler = self._handlers.get((ns, name))
            if handler is None:
                raise StanzaError("feature-not-implemented" if ns else "bad-request",
                                  f"{name!r} in {ns or 'no namespace'} is not served here")
            payload = await handler(self, iq, child)
        except StanzaError as e:
            self._answer_error(iq, child, e)
            return
        except TidingsError as e:
            self._answer_error(iq, child, StanzaError(_condition_of(e), str(e)))
            return
        except Exception:
            log.exception("xmpp: request %s from %s failed", iq["id"], iq["from"])
            self._answer_error(iq, child, StanzaError("internal-server-error"))
            return
        reply = iq.reply(clear=True)
        if payload is not None:
            reply.xml.append(payload)
        reply.send()

    def _answer_error(self, iq: slixmpp.Iq, child: ET.Element | None, e: StanzaError) -> None:
        reply = iq.reply(clear=True)
        reply["type"] = "error"
        if child is not None and child.tag.startswith(f"{{{ENS}}}"):
            reply.xml.append(ET.Element(child.tag, dict(child.attrib)))  # XEP-0021 §3.2 echoes it
        reply.xml.append(e.element(reply.namespace))
        reply.send()

    # -- principals -------------------------------------------------------------------

    async def principal(self, jid: str) -> PrincipalRecord:
        """The principal an XMPP entity acts as, created on its first request."""
        try:
            name = ens.principal_of(jid)
        except ValueError as e:
            raise StanzaError("bad-request", str(e)) from None
        if name not in self._known:
            try:
                await self.broker.auth.create(name)  # its token is thrown away: it signs in over XMPP
            except TidingsError as e:
                raise StanzaError("not-acceptable", str(e)) from None
            self._known.add(name)
        return PrincipalRecord(name=name)

    async def entity_publication(self, namespace: str) -> None:
        """Register an XMPP entity's own namespace on its first use (publish or subscribe).

        It is owned by the entity, and every subscription to it is approved by the
        entity itself over XMPP (XEP-0021 §4.3)."""
        orch = self.broker.orchestrator
        owner = ens.owner_of(namespace)
        if owner is None or namespace in orch.publications:
            return
        record = await self.principal(owner[len(ens.ENTITY_PREFIX):])
        url = "xmpp:" + ens.event_jid(namespace, self.domain)
        (res,) = await orch.register_publications(record, [PublicationRegistration(
            namespace=namespace, config=[
                ("tidings:publication:authorization:url", {"Text": url}),
                ("tidings:publication:authorization:timeoutMs",
                 {"Nat": max(1, int(self.settings.xmpp_request_timeout_s * 1000))}),
            ],
        )])
        if res is not None and res.Err is not msgspec.UNSET and namespace not in orch.publications:
            raise StanzaError("not-acceptable", f"{namespace!r} could not be registered")

    # -- the broker's side: authorisation and pushes ----------------------------------

    async def authorise(
        self, conf: PublicationConfig, namespace: str, subscriber: str, auth_info: Any, endpoint: str | None
    ) -> ItemResult | None:
        """Ask an XMPP publisher to approve a subscription (XEP-0021 §4.3-4.4)."""
        url = conf.authorization_url or ""
        target = url[len("xmpp:"):]
        pub = self.broker.orchestrator.publications.get(namespace)
        try:
            owner_ok = pub is not None and ens.principal_of(target) == pub.owner
        except ValueError:
            owner_ok = False
        if not owner_ok or self._xmpp is None or not self._online.is_set():
            return err("GenericError", GenericError(503, f"the publisher of {namespace!r} cannot be asked now"))
        iq = self._xmpp.make_iq_get(ito=target)
        el = ET.SubElement(iq.xml, f"{{{ENS}}}authorise", {"jid": _subscriber_jid(subscriber, endpoint, self.domain)})
        if auth_info is not None:
            info = ET.SubElement(el, "{jabber:iq:auth}auth-info")
            info.text = auth_info if isinstance(auth_info, str) else msgspec.json.encode(auth_info).decode()
        try:
            await iq.send(timeout=conf.authorization_timeout_s)
        except IqTimeout:
            return err("GenericError", GenericError(
                504, f"the publisher of {namespace!r} did not answer the authorisation request in time"
            ))
        except IqError as e:
            error = e.iq.xml.find(f"{{{e.iq.namespace}}}error")
            if error is None:
                return err("GenericError", GenericError(503, f"the publisher of {namespace!r} denied it"))
            error.tag = "error"
            return err("GenericError", GenericError(code_of(error), ET.tostring(error, encoding="unicode")))
        return None

    async def push(
        self, sub: SubscriptionRecord, batch: Sequence[Note], conf: SubscriptionConfig
    ) -> tuple[Outcome, object, str, float | None]:
        """Send notifications to an XMPP subscriber: the broker's transport for ``xmpp:``."""
        x = self._xmpp
        if x is None or not self._online.is_set() or sub.endpoint is None:
            # tidings' own link is down, not the subscriber: wait, without using up attempts.
            return Outcome.BACK_PRESSURE, None, "not_connected", 1.0
        ep = ens.parse_endpoint(sub.endpoint)
        if ep.flavour == "pubsub":
            for n in batch:
                msg = pubsub_face.notification(x, ep.jid, n.event.namespace, n.event.id,
                                               to_xml(_decode(n.event.data)))
                context = tracecontext.of_headers(n.event.headers)
                if context is not None:  # XEP-0131 headers, as XEP-0060 §12.x puts them in a notification
                    msg.xml.append(shim_headers(context.pairs()))
                x.send(msg)
            return Outcome.ACK, None, "sent", None  # XEP-0060 notifications have no answer
        deadline = conf.ack_deadline_s if conf.ack_deadline_s is not None else self.settings.push_timeout_s
        sends = []
        for n in batch:
            iq = x.make_iq_set(ito=ep.jid)
            # A resend is the same stanza: same iq id, same event id (docs/xmpp.md, repeats).
            iq["id"] = f"tidings-{n.id}"
            el = ET.SubElement(iq.xml, f"{{{ENS}}}publish", {
                "jid": ens.event_jid(n.event.namespace, self.domain),
                f"{{{NOTIFICATION}}}eventId": str(n.event.id),
                f"{{{NOTIFICATION}}}id": str(n.id),
            })
            context = tracecontext.of_headers(n.event.headers)
            if context is not None:
                # Attributes beside eventId: an iq set holds one child, so no SHIM element.
                for name, value in context.pairs().items():
                    el.set(f"{{{NOTIFICATION}}}{name}", value)
            el.extend(to_xml(_decode(n.event.data)))
            sends.append(iq.send(timeout=deadline))
        results = await asyncio.gather(*sends, return_exceptions=True)
        # Each iq is its own acknowledgement: only those not answered ``result`` are owed
        # again (the worker resends exactly the ``Err`` items).
        answer = [{"Err": _failure(r)} if isinstance(r, BaseException) else {"Ok": ""} for r in results]
        failures = [a["Err"] for a in answer if "Err" in a]
        if failures and len(failures) == len(answer) and all(f == "timeout" for f in failures):
            return Outcome.NO_ANSWER, None, "timeout", None
        return Outcome.ACK, answer, failures[0] if failures else "ok", None


def _failure(e: BaseException) -> str:
    if isinstance(e, IqTimeout):
        return "timeout"
    if isinstance(e, IqError):
        return f"xmpp_{e.condition or 'error'}"
    return "xmpp_error"


def _condition_of(e: TidingsError) -> str:
    status = getattr(e, "status", 500)
    return {400: "bad-request", 401: "not-authorized", 403: "forbidden", 404: "item-not-found",
            413: "not-acceptable", 503: "service-unavailable"}.get(status, "internal-server-error")


def _subscriber_jid(subscriber: str, endpoint: str | None, domain: str) -> str:
    """The JID a publisher is told asks to subscribe: the XMPP user's own, or for an
    HTTP principal ``<component>/principal/<name>``."""
    if endpoint is not None and endpoint.startswith("xmpp:"):
        with contextlib.suppress(ValueError):
            return ens.parse_endpoint(endpoint).jid
    return f"{domain}/principal/{subscriber}"
