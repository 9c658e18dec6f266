"""The Structs a Kineto trace's events are decoded into (msgspec): only the fields read, so that the
others are skipped without being built as Python objects."""

from __future__ import annotations

import math
from typing import Any

import msgspec


class Ids(msgspec.Struct, gc=False):
    """The args HTA's analyses read."""

    stream: Any = -1
    correlation: Any = -1


class Args(Ids, gc=False):
    """And those the critical path and the collectives read."""

    # the critical path's (trace/critical_path.py): NCCL kernels' process group and sequence number
    group: Any = msgspec.field(default=None, name="Process Group Name")
    members: Any = msgspec.field(default=None, name="Process Group Ranks")
    seq: Any = None
    Seq: Any = None
    # the collectives' sizes (trace/collectives.py): record_param_comms' and its NCCL kernel's
    collective: Any = msgspec.field(default=None, name="Collective name")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    dtype: Any = None
    group_size: Any = msgspec.field(default=None, name="Group size")
    external: Any = msgspec.field(default=None, name="External id")


class LoadEvent(msgspec.Struct, gc=False):
    """The fields of a trace event that the analyses read (load_trace decodes no more: 10 % faster)."""

    cat: Any = None
    name: Any = None
    ts: int | float | None = None
    dur: float | None = math.nan  # missing (flow, metadata events) -> NaN, fast to convert
    args: Ids | None = None


class IdleEvent(LoadEvent, gc=False):
    """And those the idle attribution reads (trace/idle.py): the event's phase and thread."""

    ph: Any = None
    tid: Any = None


class Event(IdleEvent, gc=False):
    """The fields of a trace event that the analyses, the idle attribution, the critical path and
    the collectives read."""

    args: Args | None = None


class Head(msgspec.Struct):
    """The trace's members other than its events that are read."""

    distributedInfo: Any = None  # noqa: N815 (Kineto's key)
    baseTimeNanoseconds: Any = None  # noqa: N815 (the idle attribution's, trace/idle.py)


class NoFields(msgspec.Struct):
    """An event decoded for nothing (peek_rank only needs the trace's other members)."""
