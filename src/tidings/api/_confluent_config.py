"""``/config`` and ``/mode`` of the Confluent-compatible face (mixed into its endpoints)."""

from __future__ import annotations

import msgspec

from ..core.wire_schemas import CompatibilityConfig, SchemaErr, SchemaLimitsUpdate
from ..errors import BadRequest, Forbidden
from ..schemas import SchemaRegistry
from ._confluent_router import Call
from ._confluent_wire import (
    MODES,
    ConfigBody,
    ConfigOut,
    ConfluentError,
    LevelOut,
    ModeBody,
    decode,
    error_from,
    flag,
    level,
)

__all__ = ["ConfigEndpoints"]

_CONFIG_BODY = msgspec.json.Decoder(ConfigBody)
_MODE_BODY = msgspec.json.Decoder(ModeBody)


class ConfigEndpoints:
    reg: SchemaRegistry

    # -- /config --------------------------------------------------------------------------

    async def get_default(self, c: Call) -> ConfigOut:
        return ConfigOut(self.reg.limits.default_compatibility)

    async def _set_default(self, c: Call, value: str) -> None:
        try:
            await self.reg.update_limits(c.caller, SchemaLimitsUpdate(default_compatibility=value))
        except BadRequest as e:
            raise ConfluentError(422, 42203, e.message) from None

    async def put_default(self, c: Call) -> LevelOut:
        value = level(decode(await c.body(), _CONFIG_BODY, 42203))
        await self._set_default(c, value)
        return LevelOut(value)

    async def delete_default(self, c: Call) -> ConfigOut:
        old = self.reg.limits.default_compatibility
        await self._set_default(c, "BACKWARD")
        return ConfigOut(old)

    async def set_level(self, c: Call, subject: str, value: str | None) -> None:
        [res] = await self.reg.set_compatibility(c.caller, [CompatibilityConfig(name=subject, compatibility=value)])
        if isinstance(res.Err, SchemaErr):
            raise error_from(res.Err, subject, "")

    async def get_config(self, c: Call) -> ConfigOut:
        own = self.reg.own_compatibility(c.args[0])
        if own is None and not flag(c.query, "defaultToGlobal"):
            raise ConfluentError(404, 40408, f"Subject '{c.args[0]}' does not have subject-level compatibility "
                                             "configured")
        return ConfigOut(own or self.reg.compatibility(None))

    async def put_config(self, c: Call) -> LevelOut:
        value = level(decode(await c.body(), _CONFIG_BODY, 42203))
        await self.set_level(c, c.args[0], value)
        return LevelOut(value)

    async def delete_config(self, c: Call) -> ConfigOut:
        old = self.reg.compatibility(c.args[0])
        await self.set_level(c, c.args[0], None)
        return ConfigOut(old)

    # -- /mode ----------------------------------------------------------------------------

    async def get_mode(self, c: Call) -> ModeBody:
        if not c.args:
            return ModeBody(self.reg.mode(None))
        own = self.reg.own_mode(c.args[0])
        if own is None and not flag(c.query, "defaultToGlobal"):
            raise ConfluentError.no_subject_mode(c.args[0])
        return ModeBody(own or self.reg.mode(None))

    async def put_mode(self, c: Call) -> ModeBody:
        if not c.caller.admin:
            raise ConfluentError.forbidden("only an admin sets the mode")
        body: ModeBody = decode(await c.body(), _MODE_BODY, 42204)
        mode = body.mode.strip().upper()
        if mode not in MODES:
            raise ConfluentError(422, 42204, f"Invalid mode {body.mode!r}. Valid values are {', '.join(MODES)}")
        await self._set_mode(c, c.args[0] if c.args else None, mode)
        return ModeBody(mode)

    async def delete_mode(self, c: Call) -> ModeBody:
        if not c.caller.admin:
            raise ConfluentError.forbidden("only an admin sets the mode")
        subject = c.args[0] if c.args else None
        old = self.reg.mode(None) if subject is None else self.reg.own_mode(subject)
        if old is None and subject is not None:
            raise ConfluentError.no_subject_mode(subject)
        await self._set_mode(c, subject, None)
        return ModeBody(old or "READWRITE")

    async def _set_mode(self, c: Call, subject: str | None, mode: str | None) -> None:
        try:
            await self.reg.set_mode(c.caller, subject, mode, force=flag(c.query, "force"))
        except Forbidden as e:
            raise ConfluentError.forbidden(e.message) from None
        except BadRequest as e:
            status = 42208 if e.code == "improper_name" else 42205
            raise ConfluentError(422, status, e.message) from None
