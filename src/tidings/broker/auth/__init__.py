"""Who the caller is and whether a publisher allows a subscription.

``Authenticator``: principals and their bearer tokens (``_authentication``).
``Authorizer``: a publication's authorization URL asked before a subscription is
registered (``_authorization``; ``RemoteAuthorizer`` is the seam a face plugs another
protocol into). Imports nothing else of the broker.
"""

from __future__ import annotations

from ._authentication import Authenticator
from ._authorization import Authorizer, RemoteAuthorizer

__all__ = ["Authenticator", "Authorizer", "RemoteAuthorizer"]
