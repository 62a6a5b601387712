"""produce: input lines -> decoded records -> partitioned batches -> Appender."""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import orjson

from streamctl.appender import Appender, AppendResult, Item
from streamctl.errors import DataError, StorageError
from streamctl.fsutil import NOFOLLOW, write_all
from streamctl.linereader import TooLong, read_batches
from streamctl.log import Log
from streamctl.partitioner import Partitioner

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
    # 4 MiB: one fsync per partition per batch stays a small share of the work
    batch_bytes: int = 4 << 20
    per_record: bool = False  # --fsync always: one append (and fsync) per record
    echo: Callable[[list[bytes]], None] | None = None
    # Fast lane for plain JSON values: validates a whole batch of lines and returns
    # them as value texts, or None to send the batch through `decoder` line by line.
    validate_batch: Callable[[list], list[bytes] | None] | None = None
    const_key: str | None = None
    # (partition, items, sources) -> items to append; exactly-once filtering hooks in here
    dedupe: Callable[[int, list[Item], list], list[Item]] | None = None


@dataclass
class ProduceStats:
    records: int = 0
    rejected: int = 0
    ranges: dict[int, list[int]] = field(default_factory=dict)  # partition -> [first, last]
    skipped_duplicates: int = 0

    def add(self, r: AppendResult) -> None:
        self.records += r.last_offset - r.first_offset + 1
        rng = self.ranges.get(r.partition)
        if rng is None:
            self.ranges[r.partition] = [r.first_offset, r.last_offset]
        else:
            rng[1] = r.last_offset


class _DeadLetters:
    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = -1

    def write(self, name: str, lineno: int, reason: str, raw: bytes) -> None:
        if self.fd < 0:
            try:
                self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | NOFOLLOW, 0o644)
            except OSError as e:
                raise StorageError(f"{self.path}: cannot open dead-letter file: {e.strerror}") from None
        entry: dict = {"input": name, "line": lineno, "reason": reason}
        try:
            entry["raw"] = raw.decode("utf-8")
        except UnicodeDecodeError:
            entry["raw"] = raw.decode("utf-8", "replace")
            entry["raw_base64"] = base64.b64encode(raw).decode()
        try:
            write_all(self.fd, orjson.dumps(entry) + b"\n")
        except OSError as e:
            raise StorageError(f"{self.path}: dead-letter write failed: {e.strerror}") from None

    def close(self) -> None:
        if self.fd >= 0:
            os.fsync(self.fd)
            os.close(self.fd)


def produce(log: Log, inputs: Iterable[Input], opts: ProduceOptions, appender: Appender) -> ProduceStats:
    stats = ProduceStats()
    part = Partitioner(log.partitions, start=os.getpid())
    dead = _DeadLetters(opts.dead_letter) if opts.dead_letter else None
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
    fast = opts.validate_batch if not opts.per_record and opts.dedupe is None else None
    key_json = b"null" if opts.const_key is None else orjson.dumps(opts.const_key)

    # The keyed fast lane (--key-field): a whole batch parsed in one tight loop into
    # items, no per-record decode call (formats.inputs.keyed_items).
    keyed = getattr(decode, "batch", None) if fast is None and not opts.per_record and opts.dedupe is None else None
    key_texts: dict[str, bytes] = {}
    fixed = opts.partition is not None or log.partitions == 1

    def append_keyed(items: list[Item], keys: list | None) -> None:
        if fixed:
            groups = {opts.partition if opts.partition is not None else 0: items}
        else:
            groups = {}
            for k, item in zip(keys, items, strict=True):
                group = groups.get(pp := part(k))
                if group is None:
                    group = groups[pp] = []
                group.append(item)
        for p, group in groups.items():
            res = appender.append(p, group, want_lines=opts.echo is not None)
            stats.add(res)
            if opts.echo is not None and res.lines:
                opts.echo(res.lines)

    def append_fast(values: list[bytes]) -> None:
        if opts.partition is not None or opts.const_key is not None or log.partitions == 1:
            p = opts.partition if opts.partition is not None else part(opts.const_key)
            shares = [(p, values)]
        else:
            n = log.partitions
            start = part.spread(len(values))
            shares = [((start + i) % n, values[i::n]) for i in range(min(n, len(values)))]
        for p, vals in shares:
            res = appender.append_values(p, key_json, vals, want_lines=opts.echo is not None)
            stats.add(res)
            if opts.echo is not None and res.lines:
                opts.echo(res.lines)

    try:
        for inp in inputs:
            for batch in read_batches(inp.fd, opts.max_record_bytes, opts.batch_bytes):
                if fast is not None:
                    values = fast([ln for _, ln in batch])
                    if values is not None:
                        append_fast(values)
                        continue
                elif keyed is not None:
                    got = keyed([ln for _, ln in batch], key_texts, not fixed)
                    if got is not None:
                        append_keyed(*got)
                        continue
                for lineno, line in batch:
                    if isinstance(line, TooLong):
                        reason = f"record of {line.length} bytes is over --max-record-bytes {opts.max_record_bytes}"
                        raw = b""
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
                        dead.write(inp.name, lineno, reason, raw)
                flush()
    finally:
        if dead is not None:
            dead.close()
    return stats
