"""Compatibility modes, as in Confluent Schema Registry, over any pair of formats."""

from __future__ import annotations

import enum
from collections.abc import Sequence

from ._model import Incompatibility, Model

__all__ = ["CompatibilityMode", "check_compatibility"]


class CompatibilityMode(enum.StrEnum):
    """Which earlier versions a new schema must agree with, and in which direction.

    BACKWARD: the new schema reads data written with the old one. FORWARD: the old schema
    reads data written with the new one. FULL: both. Plain modes compare with the latest
    version only; ``*_TRANSITIVE`` ones with every version, so A→B→C cannot drift.
    """

    NONE = "NONE"
    BACKWARD = "BACKWARD"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD = "FORWARD"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @classmethod
    def parse(cls, text: str) -> CompatibilityMode:
        """Read a mode name case-insensitively; ``ValueError`` names the valid ones."""
        try:
            return cls(str(text).strip().upper())
        except ValueError:
            known = ", ".join(m.value for m in cls)
            raise ValueError(f"unknown compatibility mode {text!r}; expected one of {known}") from None

    @property
    def transitive(self) -> bool:
        return self.value.endswith("_TRANSITIVE")

    @property
    def backward(self) -> bool:
        return self.value.startswith(("BACKWARD", "FULL"))

    @property
    def forward(self) -> bool:
        return self.value.startswith(("FORWARD", "FULL"))


def check_compatibility(mode: CompatibilityMode | str, new: Model, previous: Sequence[Model]) -> list[Incompatibility]:
    """Everything that keeps ``new`` from following ``previous`` (oldest first) under ``mode``.

    Each finding carries ``version``, the index into ``previous`` it conflicts with; the list
    is ordered by version, then as found, with duplicates (same version, path and rule) removed.
    """
    mode = CompatibilityMode.parse(mode)
    if mode is CompatibilityMode.NONE or not previous:
        return []
    versions = range(len(previous)) if mode.transitive else [len(previous) - 1]
    found: dict[tuple[int, str, str], Incompatibility] = {}
    for i in versions:
        old = previous[i]
        if old.format != new.format:
            issues = [
                Incompatibility(
                    "$", "format-changed", f"The new schema is {new.format} but version {i} is {old.format}."
                )
            ]
        else:
            issues = []
            if mode.backward:
                issues += new._reading_issues(old, reader_is_new=True)
            if mode.forward:
                issues += old._reading_issues(new, reader_is_new=False)
        for issue in issues:
            key = (i, issue.path, issue.rule)
            if key not in found:
                found[key] = Incompatibility(issue.path, issue.rule, issue.message, version=i)
    return list(found.values())
