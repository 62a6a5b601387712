"""One captured table's log: records built from rows, appended in batches, and what the log already holds.

Exactly once rests on the log itself. Every record carries its commit's LSN (header `lsn`),
and a partition's records are in commit order, so per partition the log knows the last
commit it holds and how many of that commit's records made it (a crash can cut a batch
between two segment writes). A rerun receives the transactions after the slot's confirmed
position again; a commit older than a partition's last is skipped there, and of the last
one only the records past those already present are appended. Records of a commit are
built the same way on every run (the same changes in the same order), so the counts match.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import orjson

from streamctl.capture.pgoutput import UNCHANGED, parse_lsn
from streamctl.capture.server import TableInfo
from streamctl.capture.values import is_json_number, key_text, to_float, to_int, to_text, unescape_copy
from streamctl.errors import StorageError
from streamctl.storage import reader, record
from streamctl.storage.appender import Appender, Item
from streamctl.storage.log import Log
from streamctl.storage.partitioner import Partitioner
from streamctl.storage.segment import list_segments, visible_end

CACHE_ROWS = 2000  # latest rows kept per table to fill in unchanged TOASTed columns without a log scan


def _json(value: object) -> bytes:
    """orjson.dumps(value) copied into a bytes object of its own size. orjson's result keeps the
    heap block of its output buffer (~4 KiB for a small row), so the thousands of records held until
    a flush grew the heap by ~4 KiB each and cost ~3 us each in fresh pages; the copy costs ~0.3 us
    (python -m bench.experiments.orjson_kept: 450 MB and 2.8 us against 65 MB and 0.25 us per 100k)."""
    return b"%b" % orjson.dumps(value)


def _headers(op: str, lsn: int, txid: int) -> bytes:
    # every part is ASCII letters, digits and a slash: nothing to escape; the LSN as lsn_text() prints it
    return b'{"op":"%s","lsn":"%X/%X","txid":"%d"}' % (op.encode(), lsn >> 32, lsn & 0xFFFFFFFF, txid)


def _lines(log: Log, p: int, newest_first: bool = False) -> Iterator[bytes]:
    """Partition p's records, oldest (or newest) first; whole segments are read (used once per run)."""
    segs = list_segments(log.partition_dir(p))
    for seg in reversed(segs) if newest_first else segs:
        try:
            fd = os.open(seg.path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            end = visible_end(fd, os.fstat(fd).st_size)
            data = os.pread(fd, end, 0)
        finally:
            os.close(fd)
        lines = data.splitlines()
        yield from reversed(lines) if newest_first else lines


def _parse(log: Log, p: int, line: bytes) -> dict:
    """A stored line of partition p as a record; a line that is not one is an error naming its segment,
    line and byte (found again on this error path only: the scans stay one split per segment)."""
    try:
        return record.parse(line)
    except record.BadRecord as e:
        raise _corrupt(log, p, line, e) from None


def _corrupt(log: Log, p: int, line: bytes, e: Exception) -> StorageError:
    hint = (" (capture resumes from what the log holds, so it cannot go on past this line: "
            "restore the segment from a copy, or capture into another LOG)")
    for seg in list_segments(log.partition_dir(p)):
        try:
            with open(seg.path, "rb") as f:
                data = f.read()
        except OSError:
            continue
        at = data.find(line + b"\n")
        while at > 0 and data[at - 1] != 0x0A:  # the line itself, not the end of a longer one
            at = data.find(line + b"\n", at + 1)
        if at >= 0:
            return reader.corrupt(seg.path, at, e, hint)
    return reader.corrupt(log.partition_dir(p), None, e, hint)


def _op_lsn(rec: dict) -> tuple[str, int] | None:
    h = rec.get("headers")
    if not isinstance(h, dict) or not isinstance(h.get("lsn"), str):
        return None
    try:
        return str(h.get("op")), parse_lsn(h["lsn"])
    except ValueError:
        return None


def _value_text(line: bytes) -> bytes:
    """The value's JSON text as stored (a resync compares the new snapshot's text with it, byte for byte).

    The headers member comes last and the value just before it, so the last `,"headers":` is the
    envelope's own (one inside the value would come earlier; inside a string its quotes are escaped).
    """
    i = line.find(b',"value":')
    j = line.rfind(b',"headers":')
    if i > 0 and j > i:
        return line[i + 9:j]
    return record.value_bytes(line)


@dataclass
class _Resume:
    lsn: int  # the last commit this partition holds
    held: int  # how many of its records it holds
    seen: int = 0  # of those, how many this run has met again (and skipped)


@dataclass
class TableLog:
    table: TableInfo
    log: Log
    appender: Appender
    part: Partitioner = field(init=False)
    pending: dict[int, list[Item]] = field(default_factory=dict)
    resume: dict[int, _Resume] = field(default_factory=dict)
    cache: dict = field(default_factory=dict)  # key text -> latest row (None: deleted), oldest first
    appended: int = 0
    skipped: int = 0
    columns: list[str] = field(default_factory=list)
    key_idx: list[int] = field(default_factory=list)
    key_is_text: bool = False
    insert_convs: list = field(default_factory=list)
    txn_keys: list[tuple[str, bool]] = field(default_factory=list)  # the open commit's (key, alive), in order
    # (key column texts, column names) -> those columns' current values in the database: the last
    # resort for an unchanged TOASTed column of a row neither this run nor the log has seen
    fetch: Any = None
    single: bool = False  # one partition: no partitioner call per record
    queued: int = 0  # records in pending
    _hcache: dict = field(default_factory=dict)  # (op, lsn, txid) -> headers JSON, for the open commit

    def __post_init__(self) -> None:
        self.part = Partitioner(self.log.partitions)
        self.single = self.log.partitions == 1
        self.set_columns(self.table.columns, self.table.key)
        self.load_resume()

    def load_resume(self) -> None:
        """Per partition, the last commit the log holds and how many of its records: what a stream
        (started again from the slot) skips. The rows remembered for TOASTed columns are dropped
        with the state of the commit the stream was in: they are read again from the log."""
        self.resume.clear()
        self.cache.clear()
        self.txn_keys.clear()
        self._hcache.clear()
        for p in range(self.log.partitions):
            last: int | None = None
            held = 0
            for line in _lines(self.log, p, newest_first=True):
                ol = _op_lsn(_parse(self.log, p, line))
                if ol is None or ol[0] == "r":
                    break
                if last is None:
                    last = ol[1]
                if ol[1] != last:
                    break
                held += 1
            if last is not None:
                self.resume[p] = _Resume(last, held)

    def set_columns(self, columns: list[str], key: list[str]) -> None:
        self.columns = columns
        self.key_idx = [columns.index(k) for k in key]
        # a one-column key whose record key is the text the server sends (an integer, numeric or text
        # column: _key gives that same text), so an insert's key needs no conversion
        self.key_is_text = len(key) == 1 and self.table.convs[self.key_idx[0]] in (to_int, to_float, to_text)
        # the converters as insert() calls them: a text column's text is its value (no call), an
        # integer's is orjson.Fragment itself (what to_int returns, without the Python frame)
        self.insert_convs = [None if c is to_text else orjson.Fragment if c is to_int else c for c in self.table.convs]

    # -- building records

    def _add(self, key: str, value: bytes, headers: bytes, lsn: int | None) -> None:
        """Queue a record, unless the log already holds it (lsn None: a snapshot row, never skipped here)."""
        p = 0 if self.single else self.part(key)
        if lsn is not None:
            self.txn_keys.append((key, value != b"null"))
            r = self.resume.get(p)
            if r is not None:
                if lsn > r.lsn:  # past what the log held: commits only grow from here
                    del self.resume[p]
                elif lsn < r.lsn or r.seen < r.held:
                    r.seen += lsn == r.lsn
                    self.skipped += 1
                    return
        kj = b'"%s"' % key.encode() if key.isdigit() and key.isascii() else _json(key)
        self.pending.setdefault(p, []).append((kj, value, headers))
        self.queued += 1

    def _remember(self, key: str, row: dict | None) -> None:
        # a plain dict in order of last change (a key changed again moves to the end), cut back to
        # the newest CACHE_ROWS when twice that: one dict operation per change, the cut amortized
        c = self.cache
        if key in c:
            del c[key]
        c[key] = row
        if len(c) > 2 * CACHE_ROWS:
            self.cache = dict(islice(c.items(), len(c) - CACHE_ROWS, None))

    def snapshot_rows(self, lines: list[bytes], headers: bytes, convs: list, names: list[str],
                      known: dict[str, bytes] | None) -> None:
        """COPY text lines -> 'r' records; with `known` (a resync), rows the log already holds as they are
        are left out, and each row met is taken out of `known` (what stays there was deleted meanwhile)."""
        key_idx = self.key_idx
        dumps = orjson.dumps
        pend = self.pending
        part = self.part
        single = len(key_idx) == 1
        k0 = key_idx[0]
        for raw in lines:
            fields = raw.decode().rstrip("\n").split("\t")
            vals = [None if f == "\\N" else conv(unescape_copy(f) if "\\" in f else f)
                    for f, conv in zip(fields, convs, strict=True)]
            if single:
                kv = vals[k0]
                key = kv if isinstance(kv, str) else dumps(kv).decode()
            else:
                key = key_text([vals[i] for i in key_idx])
            value = _json(dict(zip(names, vals, strict=True)))
            if known is not None and known.pop(key, None) == value:
                continue
            pend.setdefault(part(key), []).append((_json(key), value, headers))
            self.queued += 1

    def snapshot_fast(self, rows: list[tuple], headers: bytes, kinds: list[str],
                      known: dict[str, bytes] | None, mend: Callable[[bytes], bytes] | None = None) -> None:
        """The fast lane's rows (key column texts, then the row's JSON, as bytes) -> 'r' records, appended
        through the appender's spliced lane; as snapshot_rows otherwise."""
        dumps = orjson.dumps
        nk = len(kinds)
        if nk == 1:
            keys = [r[0].decode() for r in rows]
        else:
            # a number as is, but NaN or one beyond the double range as a string (to_float's form)
            keys = ["[" + ",".join(f.decode() if k == "n" and is_json_number(f.decode()) else dumps(f.decode()).decode()
                                   for f, k in zip(r, kinds, strict=False)) + "]" for r in rows]
        values = [r[nk] for r in rows] if mend is None else [mend(r[nk]) for r in rows]
        if known is not None:
            keep = [known.pop(k, None) != v for k, v in zip(keys, values, strict=True)]
            keys = [k for k, ok in zip(keys, keep, strict=True) if ok]
            values = [v for v, ok in zip(values, keep, strict=True) if ok]
        key_json = [_json(k) for k in keys]
        self.flush()
        if self.log.partitions == 1:
            shares = [(0, key_json, values)]
        else:
            by: dict[int, tuple[list, list]] = {}
            for k, kj, v in zip(keys, key_json, values, strict=True):
                kv = by.setdefault(self.part(k), ([], []))
                kv[0].append(kj)
                kv[1].append(v)
            shares = [(p, kv[0], kv[1]) for p, kv in by.items()]
        for p, kjs, vs in shares:
            if vs:
                self.appender.append_texts(p, kjs, vs, [headers] * len(vs))
                self.appended += len(vs)

    def _row(self, cols: list) -> dict:
        return {name: (None if v is None else v if v is UNCHANGED else conv(v))
                for name, v, conv in zip(self.columns, cols, self.table.convs, strict=True)}

    def _key(self, row: dict, texts: list | None = None) -> str:
        if len(self.key_idx) == 1:
            i = self.key_idx[0]
            v = row[self.columns[i]]
            if type(v) is str:
                return v
            if type(v) is orjson.Fragment and texts is not None and type(texts[i]) is str:
                return texts[i]  # a number: its JSON is the text the server sent
        return key_text([row[self.columns[i]] for i in self.key_idx])

    def insert(self, new: list, lsn: int, headers: bytes) -> None:
        """An insert -> its record: change("c", ...) and _add() for the stream's most common message,
        with the commit's headers given (built once per commit) and the key taken from the column's
        text when it is the record key."""
        row = {name: v if v is None or conv is None else conv(v)
               for name, v, conv in zip(self.columns, new, self.insert_convs, strict=True)}
        key = new[self.key_idx[0]] if self.key_is_text else self._key(row, new)
        if self.resume or not self.single:
            self._add(key, _json(row), headers, lsn)
        else:
            self.txn_keys.append((key, True))
            items = self.pending.get(0)
            if items is None:
                items = self.pending[0] = []
            items.append((_json(key), _json(row), headers))
            self.queued += 1
        c = self.cache  # _remember(key, row)
        if key in c:
            del c[key]
        c[key] = row
        if len(c) > 2 * CACHE_ROWS:
            self.cache = dict(islice(c.items(), len(c) - CACHE_ROWS, None))

    def change(self, op: str, new: list | None, old: list | None, lsn: int, txid: int,
               fill: Any) -> None:
        """A row change -> its records (a key change: the old key's tombstone first)."""
        hk = (op, lsn, txid)
        h = self._hcache.get(hk)
        if h is None:
            if len(self._hcache) > 8:
                self._hcache.clear()
            h = self._hcache[hk] = _headers(op, lsn, txid)
        if op == "d":
            assert old is not None
            key = self._key(self._row(old))
            self._add(key, b"null", h, lsn)
            self._remember(key, None)
            return
        assert new is not None
        row = self._row(new)
        key = self._key(row, new)
        if op == "u":
            old_key = key if old is None else self._key(self._row(old))
            missing = [c for c, v in row.items() if v is UNCHANGED]
            if missing:
                # before the old key's tombstone below: the row as it was, under the key it had
                prior = self.prior_row(old_key, fill)
                if prior is None and self.fetch is not None:
                    prior = self.fetch([(old or new)[i] for i in self.key_idx], missing)
                for c in missing:
                    row[c] = prior.get(c) if prior is not None else None
            if old_key != key:
                self._add(old_key, b"null", _headers("d", lsn, txid), lsn)
                self._remember(old_key, None)
        self._add(key, _json(row), h, lsn)
        self._remember(key, row)

    def prior_row(self, key: str, fill: Any) -> dict | None:
        """The latest row of key before this change: from the rows of this run, else the log (fill writes
        what is queued first, so the log holds everything before this change)."""
        if key in self.cache:
            return self.cache[key]
        fill()
        p = self.part(key)
        kj = orjson.dumps(key)
        for line in _lines(self.log, p, newest_first=True):
            if kj not in line:
                continue
            rec = _parse(self.log, p, line)
            if rec.get("key") == key:
                v = rec.get("value")
                return v if isinstance(v, dict) else None
        return None

    def live_keys(self, before_lsn: int) -> dict[str, bytes]:
        """Each live key of the log (its latest record not a tombstone) -> its value JSON, leaving out
        records of commits at or after before_lsn (a rerun may already hold part of that commit)."""
        live: dict[str, bytes] = {}
        for p in range(self.log.partitions):
            for line in _lines(self.log, p):
                rec = _parse(self.log, p, line)
                ol = _op_lsn(rec)
                if ol is not None and ol[0] != "r" and ol[1] >= before_lsn:
                    continue
                key = rec.get("key")
                if not isinstance(key, str):
                    continue
                if rec.get("value") is None:
                    live.pop(key, None)
                else:
                    live[key] = _value_text(line)
        return live

    def truncate(self, lsn: int, txid: int, fill: Any) -> None:
        """TRUNCATE: a tombstone for every key live in the log (as of just before it)."""
        fill()
        live = set(self.live_keys(lsn))
        for key, alive in self.txn_keys:
            if alive:
                live.add(key)
            else:
                live.discard(key)
        h = _headers("d", lsn, txid)
        for key in sorted(live):
            self._add(key, b"null", h, lsn)
            self._remember(key, None)
        self.cache.clear()

    def flush(self) -> int:
        n = 0
        for p, items in self.pending.items():
            if items:
                self.appender.append(p, items)
                n += len(items)
        self.pending.clear()
        self.queued = 0
        self.appended += n
        return n

    def pending_count(self) -> int:
        return self.queued
