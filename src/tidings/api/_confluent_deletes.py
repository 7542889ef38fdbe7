"""Deletes on the Confluent-compatible face: soft first, then permanent, with Confluent's codes.

A plain ``DELETE`` soft-deletes: the versions leave listings and checks, and the schema
keeps its id (``GET /schemas/ids/{id}`` still answers). ``?permanent=true`` then removes
what was soft-deleted; a schema left with no version at all is deleted. Refusals, in
the order they are checked: 40301 not an admin, 42205 the subject is read-only, 40401
nothing under the subject, 40402 no such version, 40404/40406 soft-deleted already,
40405/40407 permanent before soft, 42206 other schemas reference it, 409 with
``IN_USE`` (40960) a publication binds what would go, unless ``?force=true``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..broker import Broker
from ..core.config import PublicationConfig
from ..schemas import SchemaRegistry
from ..store import SchemaVersion
from ._confluent_router import Call
from ._confluent_wire import IN_USE, ConfluentError, flag, parse_version

__all__ = ["DeleteEndpoints"]


class DeleteEndpoints:
    reg: SchemaRegistry
    broker: Broker

    def _may_delete(self, c: Call, subject: str) -> None:
        if not c.caller.admin:
            raise ConfluentError.forbidden("only an admin deletes schemas")
        mode = self.reg.mode(subject)
        if mode in ("READONLY", "READONLY_OVERRIDE"):
            raise ConfluentError.not_permitted(f"Subject '{subject}' is in {mode} mode")

    def _no_referrers(self, versions: Sequence[SchemaVersion], permanent: bool) -> None:
        ids = {v.schema_id for v in versions}  # versions deleted together may refer to each other
        for v in versions:
            found = [i for i in self.reg.referrers(v.name, v.version, deleted=permanent) if i not in ids]
            if found:
                raise ConfluentError.references_exist(v.name, v.version, found)

    async def _not_bound(self, c: Call, subject: str, versions: Sequence[SchemaVersion], permanent: bool) -> None:
        """Refuse (unless ``force``) to take from a publication the schema it binds."""
        if flag(c.query, "force"):
            return
        gone = {(v.name, v.version) for v in versions}
        name_left = any((v.name, v.version) not in gone for v in self.reg.versions_of(subject))
        ids_gone = set()
        if permanent:
            for v in versions:
                held = self.reg.versions_of_id(v.schema_id, deleted=True)
                if all((x.name, x.version) in gone for x in held):
                    ids_gone.add(v.schema_id)
        # The publications as stored, not as this broadcaster last heard of them.
        configs = [(p.namespace, PublicationConfig.read(p.config)) for p in await self.broker.store.list_publications()]
        bound = sorted(
            ns for ns, conf in configs
            if (conf.schema == subject and not name_left) or (isinstance(conf.schema, int) and conf.schema in ids_gone)
        )
        if bound:
            raise ConfluentError(409, IN_USE, f"publications {', '.join(bound)} bind this schema: deleting it would "
                                              "refuse every event they publish; rebind them first, or add force=true")

    async def delete_version(self, c: Call) -> int:
        subject, text = c.args
        self._may_delete(c, subject)
        n, permanent = parse_version(text), flag(c.query, "permanent")
        if not self.reg.versions_of(subject) and not self.reg.soft_deleted_of(subject):
            raise ConfluentError.subject_not_found(subject)
        v = self.reg.find_version(subject, n, deleted=True)
        if v is None:
            raise ConfluentError.version_not_found(subject, text)
        soft = v.soft_deleted_at is not None
        if not permanent and soft:
            raise ConfluentError.version_soft_deleted(subject, v.version)
        if permanent and not soft:
            raise ConfluentError.version_not_soft_deleted(subject, v.version)
        self._no_referrers([v], permanent)
        await self._not_bound(c, subject, [v], permanent)
        if permanent:
            await self.reg.hard_delete(c.caller, [v])
            await self.reg.forget_subject(c.caller, subject)
        else:
            await self.reg.soft_delete(c.caller, [v])
        return v.version

    async def delete_subject(self, c: Call) -> list[int]:
        subject = c.args[0]
        self._may_delete(c, subject)
        permanent = flag(c.query, "permanent")
        live, soft = self.reg.versions_of(subject), self.reg.soft_deleted_of(subject)
        if not live and not soft:
            raise ConfluentError.subject_not_found(subject)
        if permanent and live:
            raise ConfluentError.subject_not_soft_deleted(subject)
        if not permanent and not live:
            raise ConfluentError.subject_soft_deleted(subject)
        versions = soft if permanent else live
        self._no_referrers(versions, permanent)
        await self._not_bound(c, subject, versions, permanent)
        if permanent:
            await self.reg.hard_delete(c.caller, versions)
            await self.reg.forget_subject(c.caller, subject)
        else:
            await self.reg.soft_delete(c.caller, versions)
        return [v.version for v in versions]
