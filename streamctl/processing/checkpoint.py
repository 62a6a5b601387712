"""The schema of a `window --follow --group G` checkpoint (LOG/groups/.G.window.json), checked on load.

    {"format": 1, "group": "G", "offsets": {"0": 42}, "merge_keys": {"0": 17},
     "run": {"config": {...}, "watermark": {"lateness": 0, "max_time": T}, "seq": N,
             "stats": {"events": N, "late": N, "bad_time": N, "bad_time_example": TEXT},
             "non_numeric": {"avg_x": N}, "state": OPERATOR STATE}}

The operator state is what WindowRun.dump writes for the kind in `run.config`
(tumbling and hopping: open and closed windows; session: open and closed
sessions; sliding: events, pending rows, revisions), and each window's
aggregation state is one slot per `--agg` of `run.config.aggs`, of the shape
Plan.dump gives that function. load_checkpoint decodes the file against these
msgspec types, so a damaged field (`"seq": "many"`, a window start that is a
string) is a StorageError naming the file and the field, never a TypeError
while the run resumes from it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
import orjson

from streamctl.errors import StorageError, StreamctlError
from streamctl.timeparse import MAX_MS, MIN_MS  # every window bound lies in it

FORMAT = 1  # windows.follow.CHECKPOINT_FORMAT

Count = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]
Time = Annotated[int, msgspec.Meta(ge=MIN_MS, le=MAX_MS)]  # an event time or a window bound (epoch ms)
Number = int | float
KEY = str  # a group key's JSON text


class Watermark(msgspec.Struct, forbid_unknown_fields=True):
    lateness: Count
    max_time: Time | None


class Stats(msgspec.Struct):
    events: Count
    late: Count
    bad_time: Count
    bad_time_example: str | None = None  # where the first of them is, and why


class Config(msgspec.Struct):
    """WindowConfig.describe(): compared with the run's own options by WindowRun.load."""

    kind: Literal["tumbling", "hopping", "sliding", "session"]
    size: Count
    hop: Count
    by: list[str]
    time_field: str
    processing_time: bool
    aggs: list[str]
    lateness: Count
    late: str
    emit: str


class Run(msgspec.Struct):
    config: Config
    watermark: Watermark
    seq: Count
    stats: Stats
    non_numeric: dict[str, Count]
    state: msgspec.Raw  # decoded against the kind's and the aggregations' types below


class Checkpoint(msgspec.Struct):
    format: int
    group: str | None
    offsets: dict[Annotated[int, msgspec.Meta(ge=0, le=9_999)], Count]
    run: Run
    merge_keys: dict[Annotated[int, msgspec.Meta(ge=0, le=9_999)], int] = {}


class _Types:
    """The checkpoint's number types, for the aggregation classes' state_type (which import no msgspec)."""

    Count = Count
    Number = Number


def agg_type(funcs: list[str]) -> Any:
    """The msgspec type of one window's aggregation state (Plan.dump): a slot per function, each of
    the shape its class's dump gives (Agg.state_type)."""
    from streamctl.processing.aggregations import agg_class

    return tuple.__class_getitem__(tuple(agg_class(f).state_type(_Types) for f in funcs)) if funcs else tuple[()]


def state_type(kind: str, funcs: list[str]) -> Any:
    """The msgspec type of the operator state a run of this kind with these aggregations dumps
    (a session's entries are checked one by one by session_entry_type: older checkpoints have 4)."""
    agg: Any = agg_type(funcs)
    if kind in ("tumbling", "hopping"):
        return msgspec.defstruct("Grid", [
            ("open", list[tuple[Time, KEY, agg]]),  # window end, key, state
            ("closed", list[tuple[Time, KEY, agg, Count]]),  # ... and its revision (--late correct)
        ])
    if kind == "session":
        return msgspec.defstruct("Sessions", [
            ("open", list[tuple[KEY, list[list[Any]]]]),  # per key: its sessions (session_entry_type)
            ("closed", list[tuple[KEY, list[list[Any]]]]),
            ("closed_last", list[tuple[KEY, Time]], []),
        ])
    if kind == "sliding":
        vals: Any = tuple.__class_getitem__(tuple(Any for _ in funcs)) if funcs else tuple[()]
        return msgspec.defstruct("Sliding", [
            ("events", list[tuple[KEY, list[tuple[Time, Count, vals]]]]),  # per key: (time, seq, values)
            ("pending", list[tuple[Time, KEY, Count]]),  # rows not yet written: (time, key, seq)
            ("revisions", list[tuple[KEY, Time, Count]]),
            ("swept", int | None),
        ])
    raise ValueError(f"unknown window type {kind!r}")


def session_entry_type(funcs: list[str], n: int) -> Any:
    """[start, last event, state, revision] and, in a checkpoint of 5, the windows written for the
    session so far (--emit update) or null."""
    head: tuple[Any, ...] = (Time, Time, agg_type(funcs), Count)
    if n == 5:
        head += (list[tuple[Time, Time]] | None,)
    return tuple.__class_getitem__(head)


def _field(e: msgspec.ValidationError, prefix: str = "") -> str:
    """msgspec's `Expected `int`, got `str` - at `$.run.seq`` -> "field run.seq: expected `int`, got `str`"."""
    msg = str(e)
    reason, sep, at = msg.rpartition(" - at `")
    if not sep:
        return f"{prefix or 'the file'}: {msg[:1].lower()}{msg[1:]}"
    path = at.rstrip("`").removeprefix("$").lstrip(".")
    path = f"{prefix}.{path}" if prefix and path and not path.startswith("[") else prefix + path
    return f"field {path}: {reason[:1].lower()}{reason[1:]}"


def validate(raw: bytes, path: str) -> dict:
    """The bytes of a checkpoint file -> its data, every field the loader uses checked; StorageError
    naming `path` and the field otherwise. (msgspec reads an int beyond 64 bits, a sum's total,
    exactly, where orjson would make it a float.)"""
    hint = "move it away to start over"
    try:
        data = msgspec.json.decode(raw)
    except msgspec.DecodeError as e:
        raise StorageError(f"{path}: unreadable checkpoint ({e}); {hint}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or "run" not in data:
        raise StorageError(f"{path}: not a window checkpoint (overwritten by hand or by a group reset?); {hint}")
    try:
        ck = msgspec.json.decode(raw, type=Checkpoint)
    except msgspec.ValidationError as e:
        raise StorageError(f"{path}: damaged window checkpoint: {_field(e)}; {hint}") from None
    from streamctl.processing import aggregations
    from streamctl.storage import fieldpaths

    funcs = []
    for i, spec in enumerate(ck.run.config.aggs):
        try:
            funcs.append(aggregations.parse_agg(spec, fieldpaths.record_path).func)
        except (ValueError, StreamctlError) as e:  # AggSpecError is a ValueError
            raise StorageError(f"{path}: damaged window checkpoint: field run.config.aggs[{i}]: {e}; {hint}") from None
    kind = ck.run.config.kind
    try:
        state = msgspec.json.decode(ck.run.state, type=state_type(kind, funcs))
    except msgspec.ValidationError as e:
        raise StorageError(f"{path}: damaged window checkpoint: {_field(e, 'run.state')}; {hint}") from None
    if kind == "session":
        types = {n: session_entry_type(funcs, n) for n in (4, 5)}
        for name in ("open", "closed"):
            for i, (_key, entries) in enumerate(getattr(state, name)):
                for j, entry in enumerate(entries):
                    where = f"run.state.{name}[{i}][1][{j}]"
                    if len(entry) not in types:
                        raise StorageError(f"{path}: damaged window checkpoint: field {where}: expected an array "
                                           f"of 4 or 5 items, got {len(entry)}; {hint}")
                    try:
                        msgspec.convert(entry, types[len(entry)])
                    except msgspec.ValidationError as e:
                        raise StorageError(f"{path}: damaged window checkpoint: {_field(e, where)}; {hint}") from None
    return data


def encode(body: dict) -> bytes:
    """A checkpoint's bytes: orjson's, or where an int is beyond 64 bits (which orjson refuses)
    msgspec's, the same JSON with that int exact."""
    try:
        return orjson.dumps(body)
    except TypeError:
        return msgspec.json.encode(body)


def load_checkpoint(path: str) -> dict | None:
    """The checkpoint at `path`, validated (see validate); None when there is none."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StorageError(f"{path}: unreadable checkpoint ({e.strerror}); move it away to start over") from None
    return validate(raw, path)
