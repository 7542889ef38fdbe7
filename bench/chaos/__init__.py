"""Fault injection for a cluster of broadcasters, in the manner of Jepsen (docs/scaling.md,
"Failure model"): ``python -m bench.chaos`` runs a schedule of faults and checks what a
cluster must keep. ``run.Chaos`` is the same run for the tests."""

from .run import KINDS, Chaos, Fault, FaultResult, Report, random_schedule

__all__ = ["KINDS", "Chaos", "Fault", "FaultResult", "Report", "random_schedule"]
