"""produce: input lines -> decoded records -> partitioned batches -> Appender."""

from __future__ import annotations

import base64
import os
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import repeat
from operator import call, itemgetter

import orjson

from streamctl.clients.inputlines import TooLong, read_batches
from streamctl.errors import DataError, StorageError
from streamctl.storage import fieldpaths
from streamctl.storage.appender import Appender, AppendResult, Item
from streamctl.storage.fsutil import NOFOLLOW, write_all
from streamctl.storage.log import Log
from streamctl.storage.partitioner import Partitioner

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
    # Fast lane for plain JSON values: validates a whole read batch ((line number, line)
    # pairs) and returns its value texts, or None to send the batch through `decoder`
    # line by line.
    validate_batch: Callable[[list], list[bytes] | None] | None = None
    const_key: str | None = None
    # --key-field as a value path (fieldpaths.value_path): the keyed fast lane (KeyedLane)
    key_path: tuple[str, ...] | None = None
    # Fast lane for --envelope lines: decodes a whole read batch into (key JSON texts, value
    # texts, headers JSON texts or None, keys), or returns None to send the batch through
    # `decoder` line by line.
    envelope_batch: Callable[[list], tuple[list, list, list, list] | None] | None = None
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


# --- the fast lanes ---------------------------------------------------------------------
# A batch of input lines takes a fast lane when every line is a JSON value as it
# stands: the batch is validated by C-level loops (map over orjson.loads, no Python
# bytecode per record) and the value texts go to the appender as they are. Anything
# unusual (a bad, blank or over-long line, a possible integer beyond 64 bits, a key
# that is an object) makes a lane return None, which sends the batch through the
# per-line decoder: it names the bad line, and it is the reference the lanes match
# byte for byte (tests/test_produce.py compares them).

_WS = b" \t\r"  # what the per-line decoder strips around a value
_DIGITS = bytes(48 if 48 <= b <= 57 else 32 for b in range(256))
_BIG = b"0" * 20
_CACHE_KEYS = 100_000  # key texts kept across batches (a log has far fewer keys than records)
line_of = itemgetter(1)  # (line number, line) -> line


def _stripped(batch: list) -> list[bytes]:
    """A read batch's lines as the per-line decoder reads them; TypeError for an over-long line.

    bytes.strip hands back the line itself when there is nothing to strip, so this
    costs one C call per line and no copy.
    """
    return list(map(bytes.strip, map(line_of, batch), repeat(_WS)))


def _may_hold_big_int(values: list[bytes]) -> bool:
    """False if no value has a run of 20 digits; True if one may.

    orjson reads integers beyond 64 bits as floats, and the per-line decoder refuses
    them rather than let them round, so a batch with such a run goes through it. A
    run of 20 digits always covers 4 consecutive bytes of every 5th byte, so looking
    at a fifth of the bytes clears almost every batch (about 0.25 s less per million
    200-byte records than translating them all); only a batch with 16 or more digits
    in a row somewhere pays the full scan.
    """
    joined = b"\n".join(values)
    if b"0000" not in joined[::5].translate(_DIGITS):
        return False
    return _BIG in joined.translate(_DIGITS)


def validate_values(batch: list) -> list[bytes] | None:
    """The plain fast lane: the batch's value texts if every line is a JSON value, else None."""
    try:
        values = _stripped(batch)
        deque(map(orjson.loads, values), maxlen=0)
    except (orjson.JSONDecodeError, TypeError):
        return None
    if _may_hold_big_int(values):
        return None
    return values


class KeyedLane:
    """The fast lane for --key-field: a batch's key JSON texts, value texts and keys.

    Keys are taken from the parsed values in the validating loop itself (a chain of
    `dict.get` over `map(orjson.loads, ...)`), and key JSON texts come from a cache
    of texts per key string, looked up by a C-level map. Values that are not objects
    all the way down the path, and keys that are numbers or booleans, take a Python
    loop instead (the same results, a little slower).
    """

    def __init__(self, kpath: tuple[str, ...]) -> None:
        self.kpath = kpath
        self.texts: dict[str | None, bytes] = {None: b"null"}
        self.chain = True  # False after a batch the dict.get chain could not take

    def __call__(self, batch: list) -> tuple[list[bytes], list[bytes], list[str | None]] | None:
        try:
            values = _stripped(batch)
        except TypeError:  # an over-long line
            return None
        keys = self._keys(values)
        if keys is None or _may_hold_big_int(values):
            return None
        got = self._key_texts(keys)
        if got is None:
            return None
        texts, keys = got
        return texts, values, keys

    def _keys(self, values: list[bytes]) -> list | None:
        """The raw value at the key path of each value (None where missing), or None for a bad line."""
        try:
            if self.chain:
                try:
                    got = map(orjson.loads, values)
                    for name in self.kpath:
                        got = map(dict.get, got, repeat(name))
                    return list(got)
                except TypeError:
                    # a value (or a step on the path) that is not an object: take the
                    # loop below from now on rather than parse each batch twice
                    self.chain = False
            loads, get, kpath = orjson.loads, fieldpaths.get, self.kpath
            return [get(loads(v), kpath) for v in values]
        except orjson.JSONDecodeError:
            return None

    def _key_texts(self, keys: list) -> tuple[list[bytes], list[str | None]] | None:
        """(key JSON text, key as a string) per record, or None if a key is an object or array."""
        texts = self.texts
        try:
            return list(map(texts.__getitem__, keys)), keys
        except (KeyError, TypeError):
            pass
        try:
            missing = set(keys).difference(texts)
        except TypeError:  # an object or array: the per-line decoder names it
            return None
        if any(type(k) is not str for k in missing):
            # numbers and booleans become their JSON text (coerce_key); they are not
            # cache keys themselves, since 1 == 1.0 == True would share one entry
            if not all(type(k) in (str, int, float, bool) for k in missing):
                return None
            keys = [k if type(k) is str or k is None else orjson.dumps(k).decode() for k in keys]
            missing = set(keys).difference(texts)
        if len(texts) + len(missing) > _CACHE_KEYS:
            texts.clear()
            texts[None] = b"null"
        dumps = orjson.dumps
        for k in missing:
            texts[k] = dumps(k)
        return list(map(texts.__getitem__, keys)), keys


def split_by_partition(partitions: list[int], items: list, n: int) -> list[tuple[int, list]]:
    """The items of each partition in input order; partitions in order of first appearance."""
    groups: list[list] = [[] for _ in range(n)]
    deque(map(call, map([g.append for g in groups].__getitem__, partitions), items), maxlen=0)
    return [(p, groups[p]) for p in dict.fromkeys(partitions)]


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

    lane = KeyedLane(opts.key_path) if opts.key_path is not None and fast is None and not opts.per_record \
        and opts.dedupe is None else None
    envelopes = opts.envelope_batch if not opts.per_record and opts.dedupe is None else None
    fixed = opts.partition if opts.partition is not None else 0 if log.partitions == 1 else None

    def append_keyed(key_texts: list[bytes], values: list[bytes], keys: list[str | None]) -> None:
        if fixed is not None:
            shares = [(fixed, key_texts, values)]
        else:
            ps = part.many(keys)
            n = log.partitions
            shares = [(p, kt, vs) for (p, kt), (_, vs) in zip(split_by_partition(ps, key_texts, n),
                                                               split_by_partition(ps, values, n), strict=True)]
        for p, kt, vs in shares:
            res = appender.append_keyed(p, kt, vs, want_lines=opts.echo is not None)
            stats.add(res)
            if opts.echo is not None and res.lines:
                opts.echo(res.lines)

    def append_envelopes(key_texts: list[bytes], values: list, headers: list[bytes | None],
                         keys: list[str | None]) -> None:
        items = list(zip(key_texts, values, headers, strict=True))
        if fixed is not None:
            shares = [(fixed, items)]
        else:
            shares = split_by_partition(part.many(keys), items, log.partitions)
        for p, its in shares:
            res = appender.append(p, its, want_lines=opts.echo is not None)
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
                    values = fast(batch)
                    if values is not None:
                        append_fast(values)
                        continue
                elif lane is not None:
                    got = lane(batch)
                    if got is not None:
                        append_keyed(*got)
                        continue
                elif envelopes is not None:
                    decoded = envelopes(batch)
                    if decoded is not None:
                        append_envelopes(*decoded)
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
