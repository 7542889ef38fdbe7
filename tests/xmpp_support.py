"""A real Prosody in a temp dir on free ports, and slixmpp clients that record what they get."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import slixmpp
from slixmpp.exceptions import IqError
from slixmpp.xmlstream import StanzaBase
from slixmpp.xmlstream.handler import Callback, CoroutineCallback
from slixmpp.xmlstream.matcher import MatcherId, StanzaPath

from .conftest import free_port

ENS = "http://xml.cataclysm.cx/jabber/ens/"
PUBSUB = "http://jabber.org/protocol/pubsub"
PUBSUB_EVENT = "http://jabber.org/protocol/pubsub#event"
DOMAIN = "localhost"
COMPONENT = "tidings.localhost"
USERS = ("alice", "bob", "carol", "dave")
PASSWORD = "pw-for-tests"

_CONFIG = """
pidfile = "{dir}/prosody.pid"
data_path = "{dir}/data"
daemonize = false
run_as_root = true
interfaces = {{ "127.0.0.1" }}
c2s_ports = {{ {c2s} }}
s2s_ports = {{ }}
component_ports = {{ {component} }}
component_interfaces = {{ "127.0.0.1" }}
http_ports = {{ }}
https_ports = {{ }}
c2s_require_encryption = false
allow_unencrypted_plain_auth = true
authentication = "internal_plain"
log = {{ {{ levels = {{ min = "info" }}, to = "file", filename = "{dir}/prosody.log" }} }}
modules_enabled = {{ "roster"; "saslauth"; "disco"; "ping"; }}
modules_disabled = {{ "s2s"; "tls"; "http"; "posix"; "offline"; }}
VirtualHost "{domain}"
Component "{component_name}"
  component_secret = "{secret}"
"""


def prosody_available() -> bool:
    return shutil.which("prosody") is not None and shutil.which("prosodyctl") is not None


class Prosody:
    """Prosody 0.12 from Debian's package, configured in ``dir``; restartable."""

    def __init__(self, dir: Path) -> None:
        self.dir = dir
        self.c2s = free_port()
        self.component_port = free_port()
        self.secret = secrets.token_hex(16)
        self.proc: subprocess.Popen[bytes] | None = None
        (dir / "data").mkdir(parents=True, exist_ok=True)
        self.config = dir / "prosody.cfg.lua"
        self.config.write_text(_CONFIG.format(
            dir=dir, c2s=self.c2s, component=self.component_port, domain=DOMAIN, component_name=COMPONENT,
            secret=self.secret,
        ))
        for user in USERS:
            subprocess.run(
                ["prosodyctl", "--config", str(self.config), "register", user, DOMAIN, PASSWORD],
                check=True, capture_output=True, timeout=30,
            )

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["prosody", "--config", str(self.config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.c2s), 0.2), \
                    socket.create_connection(("127.0.0.1", self.component_port), 0.2):
                return
            time.sleep(0.05)
        raise RuntimeError("prosody did not start in 20 s: " + (self.dir / "prosody.log").read_text()[-2000:])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def server_env(self) -> dict[str, str]:
        return {"xmpp_component": COMPONENT, "xmpp_host": "127.0.0.1", "xmpp_port": str(self.component_port),
                "xmpp_secret": self.secret}


class Client(slixmpp.ClientXMPP):
    """A user's client that records ENS and pubsub notifications and answers them."""

    def __init__(self, prosody: Prosody, user: str, resource: str = "test") -> None:
        super().__init__(f"{user}@{DOMAIN}/{resource}", PASSWORD,
                         plugin_config={"feature_mechanisms": {"unencrypted_plain": True}})
        self.prosody = prosody
        self.online = asyncio.Event()
        self.ens: list[tuple[str, list[ET.Element]]] = []
        self.ens_at: list[int] = []  # perf_counter_ns when each of ``ens`` arrived
        self.items: list[tuple[str, str, list[ET.Element]]] = []
        self.item_messages: list[ET.Element] = []  # the whole <message> of each pubsub notification
        self.authorise_requests: list[tuple[str, str | None]] = []
        self.ens_answer = "result"  # or an error condition, or "none" (never answer)
        self.refuse_once: dict[str, str] = {}  # payload text -> the error condition its first push gets
        self.ens_log: list[tuple[str, str, dict[str, str]]] = []  # every push: iq id, answer, publish's attributes
        self.authorise_answer: Any = "result"  # or ("error", code, condition), or "none"
        self.keep_online = True
        self.enable_starttls = False
        self.enable_direct_tls = False
        self.enable_plaintext = True
        self.add_event_handler("session_start", self._start)
        self.add_event_handler("disconnected", self._gone)
        self.register_handler(CoroutineCallback("ens", StanzaPath("iq@type=set"), self._on_set))
        self.register_handler(CoroutineCallback("auth", StanzaPath("iq@type=get"), self._on_get))
        # 'message' fires only for messages with a body; item notifications have none.
        self.register_handler(CoroutineCallback("items", StanzaPath("message"), self._on_message))

    async def _start(self, _: object) -> None:
        self.send_presence()
        self.online.set()

    def _gone(self, _: object) -> None:
        self.online.clear()
        if self.keep_online:
            self.loop.call_later(0.5, lambda: self.keep_online and self.connect(
                "127.0.0.1", self.prosody.c2s))

    async def start(self) -> Client:
        self.connect("127.0.0.1", self.prosody.c2s)
        await asyncio.wait_for(self.online.wait(), 20)
        return self

    async def close(self) -> None:
        self.keep_online = False
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.disconnect(wait=0.5), 3)

    async def _on_set(self, stanza: StanzaBase) -> None:
        iq: Any = stanza
        child = iq.xml[0] if len(iq.xml) else None
        if child is None or child.tag != f"{{{ENS}}}publish":
            return
        if self.ens_answer == "none":
            return
        text = child[0].text if len(child) else None
        answer = self.refuse_once.pop(text or "", None) or self.ens_answer
        self.ens_log.append((str(iq["id"]), answer, dict(child.attrib)))
        self.ens.append((child.get("jid", ""), list(child)))
        self.ens_at.append(time.perf_counter_ns())
        if answer == "result":
            reply = iq.reply(clear=True)
            ET.SubElement(reply.xml, f"{{{ENS}}}published")
            reply.send()
        else:
            self.ens.pop()  # refused: not received
            self.ens_at.pop()
            reply = iq.reply(clear=True)
            reply["error"]["condition"] = answer
            reply["type"] = "error"
            reply.send()

    async def _on_get(self, stanza: StanzaBase) -> None:
        iq: Any = stanza
        child = iq.xml[0] if len(iq.xml) else None
        if child is None or child.tag != f"{{{ENS}}}authorise":
            return
        info = child.find("{jabber:iq:auth}auth-info")
        self.authorise_requests.append((child.get("jid", ""), info.text if info is not None else None))
        if self.authorise_answer == "none":
            return
        reply = iq.reply(clear=True)
        if self.authorise_answer == "result":
            ET.SubElement(reply.xml, f"{{{ENS}}}authorised", {"jid": child.get("jid", "")})
        else:
            _, code, condition = self.authorise_answer
            reply["type"] = "error"
            reply.xml.append(ET.Element(f"{{{ENS}}}authorise", {"jid": child.get("jid", "")}))
            reply["error"]["code"] = str(code)
            reply["error"]["condition"] = condition
            reply["error"]["text"] = "not you"
        reply.send()

    async def _on_message(self, msg: Any) -> None:
        event = msg.xml.find(f"{{{PUBSUB_EVENT}}}event")
        if event is None:
            return
        self.item_messages.append(msg.xml)
        for items in event.findall(f"{{{PUBSUB_EVENT}}}items"):
            for item in items.findall(f"{{{PUBSUB_EVENT}}}item"):
                self.items.append((items.get("node", ""), item.get("id", ""), list(item)))

    async def request(self, xml: str, type_: str = "set", timeout: float = 15) -> Any:
        """Send ``<iq to=component>xml</iq>``; the result iq (raises IqError, IqTimeout)."""
        iq = self.make_iq(ito=COMPONENT, itype=type_)
        iq.xml.append(ET.fromstring(xml))
        return await iq.send(timeout=timeout)

    async def request_raw(self, xml: str, type_: str = "set", timeout: float = 15) -> Any:
        """As :meth:`request`, with ``xml`` sent as written: for payloads slixmpp itself
        cannot write out (nested thousands deep)."""
        iq_id = self.new_id()
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.register_handler(Callback(f"raw {iq_id}", MatcherId(iq_id), answer.set_result, once=True))
        self.send_raw(f"<iq type='{type_}' to='{COMPONENT}' id='{iq_id}'>{xml}</iq>")
        got = await asyncio.wait_for(answer, timeout)
        if got["type"] == "error":
            raise IqError(got)
        return got
