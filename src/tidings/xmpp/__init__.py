"""The XMPP face: XEP-0021 ENS and XEP-0060 publish-subscribe as an external component.

Needs the ``xmpp`` extra (slixmpp). docs/xmpp.md says how to connect it to a server.
"""

from .component import XmppFace

__all__ = ["XmppFace"]
