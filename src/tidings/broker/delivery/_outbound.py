"""The outbound policy a server's settings ask for: the one rule every process that calls
a principal's URL builds its ``Outbound`` with (the broker, the replay process)."""

from __future__ import annotations

from ...core.netpolicy import AddressPolicy
from ...errors import ConfigError
from ...settings import Settings

__all__ = ["policy_for"]


def policy_for(settings: Settings) -> AddressPolicy:
    """The outbound policy a server's settings ask for (docs/security.md); raises ``ConfigError``."""
    for name in ("outbound_per_host", "outbound_max_connections", "answer_max_bytes"):
        if getattr(settings, name) < 1:  # aiohttp reads 0 as "no limit": refuse it
            raise ConfigError(f"TIDINGS_{name.upper()} must be at least 1")
    modes = {"auto": None, "restricted": True, "open": False}
    if settings.outbound_policy not in modes:
        raise ConfigError(f"TIDINGS_OUTBOUND_POLICY={settings.outbound_policy!r}: use auto, restricted or open")
    try:
        return AddressPolicy.for_server(
            settings.host, settings.port, settings.outbound_allow, restricted=modes[settings.outbound_policy]
        )
    except ValueError as e:
        raise ConfigError(f"TIDINGS_OUTBOUND_ALLOW: {e}") from None
