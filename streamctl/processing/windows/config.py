"""A window run's options (WindowConfig, checked by WindowRun), its counters, and the plan and
usable event times they make (the operator: windows.kinds.make_operator). The Spark window job
builds its run from a WindowConfig here too (spark/window_job.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from streamctl.errors import UsageError
from streamctl.processing import aggregations
from streamctl.storage import fieldpaths
from streamctl.timeparse import usable_range

LATE_POLICIES = ("drop", "correct")
EMIT_MODES = ("final", "update")
BAD_TIME_POLICIES = ("skip", "fail")


@dataclass
class WindowConfig:
    kind: str  # tumbling | hopping | sliding | session
    size: int  # ms; the GAP for sessions
    hop: int = 0  # hopping only
    by: list[str] = field(default_factory=list)  # default: the record key
    time_field: str = "ts"
    processing_time: bool = False
    on_bad_time: str = "skip"
    aggs: list[str] = field(default_factory=lambda: ["count"])
    lateness: int = 0
    late: str = "drop"
    emit: str = "final"

    def describe(self) -> dict:
        """What a checkpoint must match to be resumed (changing any of it changes the answers)."""
        return {"kind": self.kind, "size": self.size, "hop": self.hop, "by": self.by,
                "time_field": self.time_field, "processing_time": self.processing_time,
                "aggs": self.aggs, "lateness": self.lateness, "late": self.late, "emit": self.emit}


@dataclass
class WindowStats:
    events: int = 0
    late: int = 0
    bad_time: int = 0
    bad_time_example: str | None = None


def make_plan(cfg: WindowConfig) -> aggregations.Plan:
    try:
        return aggregations.Plan([aggregations.parse_agg(a, fieldpaths.record_path) for a in cfg.aggs])
    except aggregations.AggSpecError as e:
        raise UsageError(str(e)) from None


def time_range(cfg: WindowConfig) -> tuple[int, int]:
    """The event times this run can use (timeparse.usable_range): outside it, a time is a bad time."""
    lo, hi = usable_range(cfg.kind, cfg.size, cfg.hop)
    if lo > hi:
        raise UsageError(f"--{cfg.kind} windows of {cfg.size} ms are too long: no event time has windows "
                         f"that fit in years 1..9999, where ISO-8601 can write their bounds")
    return lo, hi

