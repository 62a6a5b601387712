"""produce: input lines -> decoded records -> partitioned batches -> Appender.

A read batch takes its input mode's lane (streamctl/clients/lanes.py: validated and spliced
in C-level steps) or, by the rule written there, the per-line path through the mode's
decoder (formats/inputs.py), which is the reference and names a bad line.
"""

from __future__ import annotations

import base64
import errno
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from operator import call
from typing import Any, cast

import orjson

from streamctl.clients.inputlines import Batch, TooLong, read_batches
from streamctl.clients.lanes import EnvelopeLane, Exact, KeyedLane, RawLane, Spliced, validate_values
from streamctl.errors import DataError, StorageError, StreamctlError, UsageError
from streamctl.storage.appender import Appender, AppendResult, Item
from streamctl.storage.fsutil import NOFOLLOW, write_all
from streamctl.storage.log import Log
from streamctl.storage.partitioner import Partitioner

__all__ = ["EnvelopeLane", "Input", "KeyedLane", "ProduceOptions", "ProduceStats", "RawLane", "produce",
           "validate_values"]

DEFAULT_MAX_RECORD_BYTES = 1 << 20


@dataclass
class Input:
    name: str
    fd: int


@dataclass
class ProduceOptions:
    decoder: Callable[[bytes], tuple]
    partition: int | None = None
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    on_error: str = "fail"  # fail | skip | dead-letter
    dead_letter: str | None = None
    dead: _DeadLetters | None = None  # dead_letter opened already (open_dead_letters)
    # 1 MiB: one fsync per partition per batch stays a small share of the work, and a batch's
    # buffers (read, lines, the built lines) are reused by malloc rather than mapped afresh
    # (4 MiB took twice the system time in page faults)
    batch_bytes: int = 1 << 20
    per_record: bool = False  # --fsync always: one append (and fsync) per record
    echo: Callable[[list[bytes]], None] | None = None
    # The batch lanes (lanes.py), one per input mode; each takes a read batch and `decoder`
    # (for the lines it hands over to be checked) and returns None to send the batch
    # through `decoder` line by line.
    # Plain JSON values: the batch's value texts (lanes.validate_values), keyed by const_key.
    validate_batch: Callable[[Batch, Exact], list | None] | None = None
    const_key: str | None = None
    # --key-field as a value path (fieldpaths.value_path): the keyed lane (lanes.KeyedLane)
    key_path: tuple[str, ...] | None = None
    # --envelope lines (lanes.EnvelopeLane) and --raw lines (lanes.RawLane)
    envelope_batch: Callable[[Batch, Exact], Spliced | None] | None = None
    raw_batch: Callable[[Batch, Exact], Spliced | None] | None = None
    # (partition, items, sources) -> items to append; exactly-once filtering hooks in here
    dedupe: Callable[[int, list[Item], list], list[Item]] | None = None


@dataclass
class ProduceStats:
    records: int = 0
    rejected: int = 0
    ranges: dict[int, list[int]] = field(default_factory=dict)  # partition -> [first, last]
    skipped_duplicates: int = 0
    unsourced: int = 0  # --exactly-once: records appended without a source to deduplicate by
    lane_batches: int = 0  # read batches that took their mode's lane
    line_batches: int = 0  # read batches that went line by line through the decoder

    def add(self, r: AppendResult) -> None:
        self.records += r.last_offset - r.first_offset + 1
        rng = self.ranges.get(r.partition)
        if rng is None:
            self.ranges[r.partition] = [r.first_offset, r.last_offset]
        else:
            rng[1] = r.last_offset


def split_by_partition(partitions: list[int], items: list, n: int) -> list[tuple[int, list]]:
    """The items of each partition in input order; partitions in order of first appearance."""
    groups: list[list] = [[] for _ in range(n)]
    deque(map(call, map([g.append for g in groups].__getitem__, partitions), items), maxlen=0)
    return [(p, groups[p]) for p in dict.fromkeys(partitions)]


def _split_spliced(ps: list[int], s: Spliced, n: int) -> list[tuple[int, Any, list, list | None]]:
    """(partition, key texts, values, headers) of a batch's records, split by their partitions."""
    groups = split_by_partition(ps, s.values, n)
    kts: list[Any] = [kt for _, kt in split_by_partition(ps, s.key_texts, n)] if isinstance(s.key_texts, list) \
        else [s.key_texts] * len(groups)
    hss: list[Any] = [hs for _, hs in split_by_partition(ps, s.headers, n)] if s.headers is not None \
        else [None] * len(groups)
    return [(p, kt, vs, hs) for (p, vs), kt, hs in zip(groups, kts, hss, strict=True)]


# A line over --max-record-bytes goes to --on-error dead-letter=FILE with up to this many of its first
# bytes (the rest is counted in "length"): a rejected line is kept whole up to there, and memory stays
# bounded however long it is.
RAW_KEEP = 16 << 20


class _DeadLetters:
    def __init__(self, path: str, fd: int = -1) -> None:
        self.path = path
        self.fd = fd

    def write(self, name: str, lineno: int | None, reason: str, raw: bytes, byte: int | None = None,
              length: int | None = None) -> None:
        """One rejected line; `byte` (produce --follow) is where the line starts in the file. `length`: the
        line's length when raw may hold only its first RAW_KEEP bytes (a line over --max-record-bytes)."""
        if self.fd < 0:
            try:
                self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | NOFOLLOW, 0o644)
            except OSError as e:
                raise StorageError(f"{self.path}: cannot open dead-letter file: {e.strerror}") from None
        entry: dict = {"input": name, "line": lineno, "reason": reason}
        if byte is not None:
            entry["byte"] = byte
        try:
            entry["raw"] = raw.decode("utf-8")
        except UnicodeDecodeError:
            entry["raw"] = raw.decode("utf-8", "replace")
            entry["raw_base64"] = base64.b64encode(raw).decode()
        if length is not None and len(raw) < length:
            entry["raw_truncated"] = True  # raw holds the first RAW_KEEP bytes of the line
            entry["length"] = length
        try:
            write_all(self.fd, orjson.dumps(entry) + b"\n")
        except OSError as e:
            raise StorageError(f"{self.path}: dead-letter write failed: {e.strerror}") from None

    def close(self) -> None:
        if self.fd >= 0:
            os.fsync(self.fd)
            os.close(self.fd)


def open_dead_letters(path: str, log: str) -> _DeadLetters:
    """--on-error dead-letter=FILE, checked and opened (created if missing) when produce starts: a FILE
    that cannot be written is a usage error before anything is appended, not a failure at the first bad
    line with that line's batch half done. FILE inside LOG (a segment, say) is refused: a rejected line
    written there would corrupt the log. Paths are compared resolved (symlinks, `..`)."""
    shown = f"--on-error dead-letter={path}"
    real, log_real = os.path.realpath(path), os.path.realpath(log)
    if real == log_real or real.startswith(log_real.rstrip(os.sep) + os.sep):
        raise UsageError(f"{shown}: that is inside the log {log}, and a rejected line written there would "
                         "corrupt it; name a file outside the log's folder")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | NOFOLLOW, 0o644)
    except OSError as e:
        folder = os.path.dirname(path) or "."
        why = (f"its folder {folder} does not exist" if e.errno == errno.ENOENT and not os.path.isdir(folder)
               else "it is a symlink (refusing to follow it)" if e.errno == errno.ELOOP else e.strerror)
        raise UsageError(f"{shown}: cannot open: {why}") from None
    return _DeadLetters(path, fd)


def batch_lane(opts: ProduceOptions) -> Callable[[Batch, Exact], Spliced | None] | None:
    """The lane of the input mode (lanes.py), or None when every batch goes line by line
    (--fsync always, --exactly-once)."""
    if opts.per_record or opts.dedupe is not None:
        return None
    if opts.validate_batch is not None:
        check, key_json, const_key = opts.validate_batch, orjson.dumps(opts.const_key), opts.const_key

        def plain(batch: Batch, exact: Exact) -> Spliced | None:
            values = check(batch, exact)
            return None if values is None else Spliced(values, key_json, None, None, const_key)

        return plain
    if opts.key_path is not None:
        return KeyedLane(opts.key_path)
    if opts.envelope_batch is not None:
        return opts.envelope_batch
    return opts.raw_batch


def _read(inp: Input, max_line: int, batch_bytes: int, keep_raw: int, stats: ProduceStats) -> Iterator[Batch]:
    """read_batches of one input; a read that fails (stdin closed with `<&-`: EBADF; EIO) names the input."""
    batches = read_batches(inp.fd, max_line, batch_bytes, keep_raw=keep_raw)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except OSError as e:
            why = "it is closed" if e.errno == errno.EBADF and inp.name == "<stdin>" else e.strerror
            raise StreamctlError(f"{inp.name}: cannot read: {why}; {stats.records} record(s) before it were "
                                 "appended and are durable") from None
        yield batch


def produce(log: Log, inputs: Iterable[Input], opts: ProduceOptions, appender: Appender) -> ProduceStats:
    stats = ProduceStats()
    part = Partitioner(log.partitions, start=os.getpid())
    dead = opts.dead if opts.dead is not None else _DeadLetters(opts.dead_letter) if opts.dead_letter else None
    pending: dict[int, list[Item]] = {}
    sources: dict[int, list] = {}

    def flush() -> None:
        for p, items in pending.items():
            srcs = sources.get(p, [])
            if opts.dedupe is not None:
                before = len(items)
                items = opts.dedupe(p, items, srcs)
                stats.skipped_duplicates += before - len(items)
            if not items:
                continue
            res = appender.append(p, items, want_lines=opts.echo is not None)
            appended = res.last_offset - res.first_offset + 1
            if appended < len(items):
                # the exactly-once filter dropped more under the partition lock
                stats.skipped_duplicates += len(items) - appended
            if appended <= 0:
                continue
            stats.add(res)
            if opts.echo is not None and res.lines:
                opts.echo(res.lines)
        pending.clear()
        sources.clear()

    decode = opts.decoder
    want = opts.echo is not None
    lane = batch_lane(opts)
    fixed = opts.partition if opts.partition is not None else 0 if log.partitions == 1 else None

    def append_spliced(s: Spliced) -> None:
        n = len(s.values)
        if not n:
            return
        shares: list[tuple[int, Any, list, list | None]]  # (partition, key texts, values, headers)
        if fixed is not None:
            shares = [(fixed, s.key_texts, s.values, s.headers)]
        elif s.keys is None and s.key is not None:
            shares = [(part(s.key), s.key_texts, s.values, s.headers)]
        elif s.keys is None and isinstance(s.key_texts, bytes):  # null keys: round-robin, as line by line
            np_ = log.partitions
            start = part.spread(n)
            shares = [((start + i) % np_, s.key_texts, s.values[i::np_],
                       None if s.headers is None else s.headers[i::np_]) for i in range(min(np_, n))]
        else:  # each record's key (or, without keys, its key text) picks its partition
            ps = part.many(s.keys) if s.keys is not None else part.many_texts(cast(list, s.key_texts))
            shares = _split_spliced(ps, s, log.partitions)
        for p, kt, vs, hs in shares:
            res = appender.append_texts(p, kt, vs, hs, want_lines=want)
            stats.add(res)
            if opts.echo is not None and res.lines:
                opts.echo(res.lines)

    try:
        for inp in inputs:
            for batch in _read(inp, opts.max_record_bytes, opts.batch_bytes, RAW_KEEP if dead is not None else 0,
                               stats):
                if lane is not None:
                    spliced = lane(batch, decode)
                    if spliced is not None:
                        stats.lane_batches += 1
                        append_spliced(spliced)
                        continue
                stats.line_batches += 1
                for lineno, line in batch.numbered():
                    if isinstance(line, TooLong):
                        reason = f"record of {line.length} bytes is over --max-record-bytes {opts.max_record_bytes}"
                        raw = line.raw
                    elif not line.strip():
                        continue  # blank lines carry no record
                    else:
                        try:
                            key, value, headers, source = decode(line)
                        except ValueError as e:
                            reason, raw = str(e), line
                        else:
                            if opts.partition is not None:
                                p = opts.partition
                            elif key is None and source is not None and opts.dedupe is not None:
                                # exactly-once needs the same partition on a rerun: not round-robin
                                p = source[1] % log.partitions
                            else:
                                p = part(key)
                            items = pending.get(p)
                            if items is None:
                                items = pending[p] = []
                            items.append((b"null" if key is None else orjson.dumps(key), value, headers))
                            if opts.dedupe is not None:
                                sources.setdefault(p, []).append(source)
                            if opts.per_record:
                                flush()
                            continue
                    # a rejected line
                    if opts.on_error == "fail":
                        flush()
                        raise DataError(
                            f"{inp.name}:{lineno}: {reason}; {stats.records} record(s) before it were appended "
                            "and are durable, nothing after it (use --on-error skip or dead-letter=FILE to go on)"
                        )
                    stats.rejected += 1
                    if dead is not None:
                        dead.write(inp.name, lineno, reason, raw,
                                   length=line.length if isinstance(line, TooLong) else None)
                flush()
    finally:
        if dead is not None:
            dead.close()
    return stats
