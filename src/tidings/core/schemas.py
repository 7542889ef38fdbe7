"""The rules of the schema registry that need no I/O: states, windows, names, limits.

A schema is Active when registered. An admin may deprecate it with a validity window
``[valid_from, valid_to)`` (UTC nanoseconds; ``valid_to`` None means no end yet) or
retract it. Retracted is final: a schema with a bug is replaced, never revived. A
deprecation may be lifted (back to Active) or given a new window.

What a state means for an event published at ``now`` (:func:`usability`):

* Active: accepted.
* Deprecated: accepted with a warning until ``valid_to``, refused from then on.
* Retracted: refused.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "DEFAULT_LIMITS",
    "InvalidTransition",
    "Limits",
    "SchemaState",
    "Usability",
    "Validity",
    "check_transition",
    "usability",
    "valid_name",
]


class SchemaState(enum.StrEnum):
    Active = "Active"
    Deprecated = "Deprecated"
    Retracted = "Retracted"


class Usability(enum.Enum):
    OK = "ok"
    WARN = "warn"
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class Validity:
    state: SchemaState = SchemaState.Active
    valid_from: int | None = None
    """UTC nanoseconds the current state took effect."""
    valid_to: int | None = None
    """UTC nanoseconds a Deprecated schema stops being accepted; None: not yet decided."""


class InvalidTransition(ValueError):
    """A state change the lifecycle does not allow; the message says why."""


def check_transition(current: Validity, new: Validity) -> None:
    if current.state is SchemaState.Retracted:
        raise InvalidTransition("a Retracted schema stays Retracted; register a replacement instead")
    if new.state is SchemaState.Deprecated:
        if new.valid_from is not None and new.valid_to is not None and new.valid_to <= new.valid_from:
            raise InvalidTransition("valid_to must come after valid_from")
    elif new.valid_to is not None:
        raise InvalidTransition(f"only a Deprecated schema has a valid_to; {new.state} has none")


def usability(v: Validity, now: int) -> tuple[Usability, str]:
    """Whether an event published at ``now`` may use a schema in this state, and why not."""
    if v.state is SchemaState.Active:
        return Usability.OK, ""
    if v.state is SchemaState.Retracted:
        return Usability.REFUSED, "the schema is Retracted"
    if v.valid_to is not None and now >= v.valid_to:
        return Usability.REFUSED, "the schema is Deprecated and its validity window has ended"
    until = "" if v.valid_to is None else f" until {v.valid_to} (UTC ns)"
    return Usability.WARN, f"the schema is Deprecated; it is accepted{until}"


_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._:@/-]{0,254}$")


def valid_name(name: str) -> bool:
    """A schema name: 1-255 of letters, digits and ``. _ : @ / -``.

    The convention is ``protocol.descriptor`` (``payments.transfer``); Confluent subject
    names such as ``orders-value`` are accepted too, so its clients work unchanged."""
    return bool(_NAME.match(name))


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """The registry's limits and policies; only an admin changes them."""

    max_count: int = 65_000
    """Schemas that may exist at once (deleted ones do not count)."""
    min_size: int = 8
    """Smallest model accepted, in bytes of UTF-8."""
    max_size: int = 65_500
    """Largest model accepted, in bytes of UTF-8."""
    open_registration: bool = True
    """Any principal may register; when False only admins and ``registrars``."""
    registrars: tuple[str, ...] = field(default_factory=tuple)
    """Principals allowed to register when registration is not open."""
    default_compatibility: str = "BACKWARD"
    """The compatibility mode of a name that has none of its own."""

    def problem(self) -> str | None:
        """Why these limits make no sense, or None: each within the specification's bounds
        (``BOUNDS``), which governance may lower but never raise."""
        for name, (low, high) in BOUNDS.items():
            value = getattr(self, name)
            if not low <= value <= high:
                return f"{name} must be in [{low}, {high}] (the specification's bounds); it is {value}"
        if self.min_size > self.max_size:
            return f"min_size ({self.min_size}) is larger than max_size ({self.max_size})"
        if len(self.registrars) > MAX_REGISTRARS:
            return f"at most {MAX_REGISTRARS} registrars"
        return None

    def may_register(self, principal: str, admin: bool) -> bool:
        return admin or self.open_registration or principal in self.registrars


BOUNDS: Final = {"max_count": (0, 65_000), "min_size": (1, 65_500), "max_size": (1, 65_500)}
"""The registry limits' bounds: MRC's count and size checks with Frequency's figures
(65,000 schemas; 8 bytes up to a hard cap of 65,500), the defaults being the caps. An
empty model (0 bytes) is never a schema, so the minimum is at least 1."""

MAX_REGISTRARS: Final = 1_000

DEFAULT_LIMITS = Limits()
