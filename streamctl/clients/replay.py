"""Range replay and snapshots of a log: the local engine.

`replay LOG --from A --until B [--key K] [--compact]` re-emits the stored
lines of a range, byte for byte, in (ts, partition, offset) order: the order
consume uses to merge partitions. Ranges are half-open, [from, until):

- a bare integer is an offset, applied in every partition;
- a time (ISO-8601, @epoch-ms, relative -1h) selects records with
  from <= ts < until (found by binary search, as ts never decreases in a
  partition).

`--compact` is the table as of --until (the "initial snapshot" of change data
capture): for each key, the last record of the range in that same order;
a tombstone (value null) deletes the key; records without a key are left out
(a table has no row for them). Keys are compared as strings, so two spellings
of one key (`"é"` and `"\\u00e9"`) are one key. The Spark job in
streamctl/spark/replay_job.py implements the same rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from streamctl.errors import UsageError
from streamctl.storage import reader, record
from streamctl.storage.log import Log
from streamctl.timeparse import now_ms, parse_duration, parse_time

if TYPE_CHECKING:
    from streamctl.clients.filters import Filter

Progress = Callable[[int], None]  # called with the number of bytes just read


@dataclass(frozen=True)
class Bound:
    """One end of a range: an offset (per partition) or a time in epoch ms.

    `ago_ms` keeps a relative time (`-1h`) relative, so a job emitted for cron
    resolves it when it runs, not when it was generated.
    """

    kind: str  # "offset" | "ts"
    value: int
    ago_ms: int | None = None

    def job_param(self, relative: bool) -> dict:
        if self.kind == "offset":
            return {"offset": self.value}
        if relative and self.ago_ms is not None:
            return {"ago_ms": self.ago_ms}
        return {"ts": self.value}


def parse_bound(text: str, flag: str, now: int | None = None) -> Bound:
    """`--from/--until` text -> Bound. A bare integer is always an offset."""
    s = text.strip()
    if s.isdecimal():
        return Bound("offset", int(s))
    if s.startswith("-") and s[1:].isdecimal():
        raise UsageError(f"{flag} {text!r}: a negative number is neither an offset nor a time "
                         "(for a relative time give a unit: -1h, -30m, -7d)")
    if now is None:
        now = now_ms()
    try:
        ts = parse_time(s, now)
    except UsageError as e:
        raise UsageError(f"{flag}: {e} or an offset (a bare integer)") from None
    ago = parse_duration(s[1:]) if s.startswith("-") else None
    return Bound("ts", ts, ago)


@dataclass(frozen=True)
class ReplaySpec:
    start: Bound | None = None
    until: Bound | None = None
    key: str | None = None  # one --key and no other filter: what a Spark job can apply
    compact: bool = False
    filter: Filter | None = None  # --key/--header/--where (it includes `key` when both are set)

    def selector(self) -> Filter | None:
        if self.filter is not None:
            return self.filter
        if self.key is not None:
            from streamctl.clients.filters import Filter

            return Filter([self.key])
        return None


@dataclass
class Range:
    start: int
    end: int  # exclusive


def plan(log: Log, spec: ReplaySpec, partitions: list[int] | None = None) -> dict[int, Range]:
    """Offsets to read per partition, with each end snapshotted now (a busy producer cannot extend it)."""
    out: dict[int, Range] = {}
    for p in partitions if partitions is not None else range(log.partitions):
        info = reader.partition_info(log, p)
        start, end = info.first_offset, info.next_offset
        if spec.start is not None:
            b = spec.start
            start = max(start, b.value) if b.kind == "offset" else reader.offset_for_time(log, p, b.value)
        if spec.until is not None:
            b = spec.until
            end = min(end, b.value if b.kind == "offset" else reader.offset_for_time(log, p, b.value))
        out[p] = Range(start, max(start, end))
    return out


# Above this many bytes an active segment is not copied for a Spark job (the copy would cost
# more than the second scan it saves; the job then caps that segment with a filter instead),
# and the copies of one run stop at the total (many partitions must not fill the temp folder).
ACTIVE_COPY_LIMIT = 64 << 20
ACTIVE_COPY_TOTAL = 256 << 20


def copy_active_segments(log: Log, ends: dict[int, int], folder: str, limit: int = ACTIVE_COPY_LIMIT,
                         total: int = ACTIVE_COPY_TOTAL) -> dict[str, dict]:
    """Copy each partition's active segment, up to its end offset in `ends` (the replay's snapshot),
    into `folder`, for a Spark job run on this machine: {partition: {"base", "path", "bytes"}}.

    The copy holds exactly the records below the end, and never grows, so the job reads
    every file in one scan with no end filter (docs/design/performance.md). A partition is
    left out, and capped by the job's filter as before, when its end lies in a sealed
    segment (a roll since the snapshot), the part to copy exceeds `limit` bytes, or the
    copies would exceed `total` bytes in all.
    """
    import os

    copies: dict[str, dict] = {}
    copied = 0
    for p, end in sorted(ends.items()):
        segs = log.segments(p)
        if not segs or segs[-1].base >= end:
            continue
        seg = segs[-1]
        for path, fd, lo, hi in reader.iter_ranges(log, p, seg.base, end):
            if path != seg.path or lo != 0 or hi > limit or copied + hi > total:
                break
            dst = os.path.join(folder, f"p{p}-{seg.base:020d}.jsonl")
            _copy_prefix(fd, dst, hi)
            copies[str(p)] = {"base": seg.base, "path": dst, "bytes": hi}
            copied += hi
            break
    return copies


def _copy_prefix(src: int, dst_path: str, n: int) -> None:
    """The first n bytes of the open file src into a new file (the kernel copies: sendfile)."""
    import os

    out = os.open(dst_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        done = 0
        while done < n:
            try:
                sent = os.sendfile(out, src, done, n - done)
            except OSError:  # a file system without file-to-file sendfile: copy through memory
                sent = os.write(out, os.pread(src, min(n - done, 1 << 20), done))
            if sent == 0:
                raise OSError(f"{dst_path}: the segment ended before {n} bytes")
            done += sent
    finally:
        os.close(out)


def _blocks(log: Log, p: int, rng: Range, progress: Progress | None) -> Iterator[bytes]:
    if rng.start >= rng.end:
        return
    for block in reader.iter_blocks(log, p, rng.start, rng.end):
        if progress is not None:
            progress(len(block))
        yield block


def _lines(log: Log, p: int, rng: Range, flt: Filter | None, progress: Progress | None) -> Iterator[bytes]:
    for block in _blocks(log, p, rng, progress):
        if flt is not None:
            block = flt.select(block)
        yield from block.splitlines(keepends=True)


def _merge(per_partition: Mapping[int, Iterator[bytes]]) -> Iterator[bytes]:
    """Lines of several partitions in (ts, partition, offset) order (each input is in offset order)."""
    if len(per_partition) == 1:
        yield from next(iter(per_partition.values()))
        return
    for _p, _off, line in reader.merge_by_ts(sorted(per_partition.items())):
        yield line


def replay(log: Log, spec: ReplaySpec, ranges: dict[int, Range], progress: Progress | None = None) -> Iterator[bytes]:
    """The stored lines selected by spec and ranges, in (ts, partition, offset) order."""
    flt = spec.selector()
    if spec.compact:
        yield from _compact(log, ranges, flt, progress)
        return
    live = {p: r for p, r in ranges.items() if r.start < r.end}
    if not live:
        return
    if len(live) == 1:
        p, rng = next(iter(live.items()))
        for block in _blocks(log, p, rng, progress):  # whole blocks, no per-line work
            if flt is not None:
                block = flt.select(block)
            if block:
                yield block
        return
    yield from _merge({p: _lines(log, p, r, flt, progress) for p, r in live.items()})


def _canonical_key(k: bytes) -> bytes:
    return orjson.dumps(orjson.loads(k)) if b"\\" in k else k


def _partition_table(log: Log, p: int, rng: Range, wanted: set[bytes] | None,
                     progress: Progress | None) -> dict[bytes, bytes]:
    """key -> last line of the partition's range (tombstones kept), in offset order.

    The range is read backwards, so a key's first sighting is its latest record:
    a block whose keys were all seen already (most of a long changelog) costs
    two regex calls and a set difference, and only blocks that bring new keys
    are split into lines. Memory is the table: one line per key.
    """
    table: dict[bytes, bytes] = {}
    seen: set[bytes] = set()  # key texts as spelled on disk, latest record found
    if rng.start >= rng.end:
        return table
    for block in reader.iter_blocks_reverse(log, p, rng.start, rng.end):
        if progress is not None:
            progress(len(block))
        keys = record.block_keys(block, len(block))
        lines = None
        if keys is None:
            lines = block.splitlines(keepends=True)
            keys = [record.key_bytes(line) for line in lines]
        new = set(keys)
        new.difference_update(seen)
        if not new:
            continue
        seen.update(new)
        if lines is None:
            lines = block.splitlines(keepends=True)
        last = dict(zip(keys, lines, strict=True))  # the later of equal keys wins
        for k in new:
            canon = _canonical_key(k)
            if canon == b"null" or (wanted is not None and canon not in wanted):
                continue
            line = last[k]
            had = table.get(canon)
            # two spellings of one key (`"é"`, `"\u00e9"`): the later record wins
            if had is None or record.offset_of(had) < record.offset_of(line):
                table[canon] = line
        if wanted is not None and len(table) == len(wanted):
            break  # the keys asked for all have their latest record
    return dict(sorted(table.items(), key=lambda kv: record.offset_of(kv[1])))


def _compact(log: Log, ranges: dict[int, Range], flt: Filter | None, progress: Progress | None) -> Iterator[bytes]:
    """The table as of the ranges' ends; filters select its rows (each key's latest record), so a
    key whose latest record does not match is left out, never shown with an older value."""
    keys = flt.key_texts if flt is not None and flt.keys else None
    tables = {}
    for p, r in sorted(ranges.items()):
        if r.start < r.end:
            try:
                tables[p] = _partition_table(log, p, r, keys, progress)
            except record.BadRecord as e:  # damage inside a line that the framing check lets by
                raise reader.locate_corrupt(log, p, r.start, e) from None
    if len(tables) > 1:
        # A key found in several partitions (a forced --partition, or a changed
        # partition count): the last write in (ts, partition, offset) order wins.
        owner: dict[bytes, int] = {}
        for p, table in tables.items():
            for k in list(table):
                q = owner.get(k)
                if q is None:
                    owner[k] = p
                    continue
                mine = record.envelope(table[k])
                theirs = record.envelope(tables[q][k])
                if (mine[2], p, mine[0]) > (theirs[2], q, theirs[0]):
                    del tables[q][k]
                    owner[k] = p
                else:
                    del table[k]
    survivors = {p: (ln for ln in t.values() if not record.is_tombstone(ln)
                     and (flt is None or flt.select(ln))) for p, t in tables.items()}
    if survivors:
        yield from _merge(survivors)


def replay_plain(path: str, spec: ReplaySpec) -> Iterator[bytes]:
    """A plain .jsonl file or `-`: values with line-number offsets, as consume shows them."""
    from streamctl.storage import plainfile

    if spec.key is not None or spec.compact or (spec.filter is not None and spec.filter.keys):
        raise UsageError(f"{path}: a plain file has no keys; --key and --compact need a log")
    flt = spec.filter
    for b in (spec.start, spec.until):
        if b is not None and b.kind != "offset":
            raise UsageError(f"{path}: a plain file has no timestamps; --from/--until take offsets (line numbers)")
    lo = spec.start.value if spec.start else 0
    hi = spec.until.value if spec.until else None
    for off, v in plainfile.iter_values(path, stop=hi):
        if off >= lo:
            line = plainfile.envelope_line(off, v)
            if flt is None or flt.select(line):
                yield line


@dataclass
class AppendStats:
    records: int = 0
    ranges: dict[int, list[int]] | None = None


def _item(line: bytes) -> tuple[bytes, bytes, bytes | None]:
    """(key JSON, value JSON, headers JSON) of a stored line, re-appended elsewhere."""
    if b'"headers"' not in line:
        return record.key_bytes(line), record.value_bytes(line), None
    split = record.value_and_headers(line)
    if split is not None:  # value and headers as stored: `1.10` stays `1.10`
        return record.key_bytes(line), split[0], split[1]
    obj = record.parse(line)
    headers = obj.get("headers")
    return (record.key_json(obj.get("key")), orjson.dumps(obj["value"]),
            orjson.dumps(headers) if headers is not None else None)


def _plain_item(line: bytes) -> tuple[bytes, bytes, None]:
    """(key JSON, value JSON, headers) of a plain file's line (plainfile.envelope_line): no key, and
    the value's text as read, sliced out whatever it holds (a value may have a "headers" member)."""
    i = line.find(b',"value":')
    end = len(line) - 1 if line.endswith(b"\n") else len(line)
    return b"null", line[i + 9:end - 1], None


def append_lines(dest: Log, lines: Iterator[bytes], batch_bytes: int = 1 << 20, fsync: str = "batch",
                 plain: bool = False, stats: AppendStats | None = None) -> AppendStats:
    """Append replayed lines to another log: new offsets and append times, same keys, values, headers.

    Keys go to their Kafka partition in `dest`; records without a key keep
    their source partition number (modulo dest's partition count), so a
    replay into a log with the same partition count keeps every record in
    its partition, in order. `plain`: the lines are a plain file's values
    (plainfile.envelope_line: no key, no ts, partition 0), appended in order
    to partition 0 like records of a one-partition log.

    An error while reading `lines` (a bad line of a plain file, a damaged
    segment) appends the records read before it, then raises: as produce
    keeps the records before a bad line. `stats` (filled as it goes) then
    says how many were appended.
    """
    from streamctl.errors import StreamctlError
    from streamctl.storage.appender import Appender
    from streamctl.storage.partitioner import partition_for_key

    if stats is None:
        stats = AppendStats(0, {})
    if stats.ranges is None:
        stats.ranges = {}
    n = dest.partitions
    pending: dict[int, list] = {}
    sizes: dict[int, int] = {}
    cache: dict[bytes, int] = {}

    with Appender(dest, fsync=fsync) as app:
        def flush(p: int) -> None:
            items = pending.pop(p, None)
            sizes.pop(p, None)
            if items:
                res = app.append(p, items)
                stats.records += len(items)
                assert stats.ranges is not None  # set when the stats are made
                rng = stats.ranges.setdefault(p, [res.first_offset, res.last_offset])
                rng[1] = res.last_offset

        appending = False
        try:
            item_of = _plain_item if plain else _item
            for line in lines:
                item = item_of(line)
                k = item[0]
                if k == b"null":
                    p = 0 if plain else record.envelope(line)[1] % n
                else:
                    p = cache.get(k, -1)
                    if p < 0:
                        p = partition_for_key(orjson.loads(k), n)
                        if len(cache) < 100_000:
                            cache[k] = p
                pending.setdefault(p, []).append(item)
                size = sizes.get(p, 0) + len(line)
                sizes[p] = size
                if size >= batch_bytes:
                    appending = True
                    flush(p)
                    appending = False
        except StreamctlError:
            if not appending:  # the source failed: what was read before it goes in
                for p in sorted(pending):
                    flush(p)
            raise
        for p in sorted(pending):
            flush(p)
    return stats
