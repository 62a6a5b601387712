"""A follower's join tables on disk: SQLite tables behind a bounded cache, written at checkpoints.

`join --follow` keeps its tables (a stream-table join's table or its versions, both
tables of a table-table join) here instead of in dicts, the way Kafka Streams keeps its
stores in RocksDB: memory holds at most CACHE_ENTRIES rows and SQLite's page cache
(CACHE_KIB), whatever the table's size, and a checkpoint writes only the rows that
changed since the last one.

- A DiskTable is a mapping from a normalized key (joins/keys.norm_key: a string, or
  the JSON text of another key) to a value; the join operators get, set and pop.
- Changes wait in `dirty` until `flush`, which the caller runs inside the
  transaction that also writes the offsets and the rest of the join state
  (joins/follow.py): a kill -9 leaves the tables exactly as of the last
  checkpoint, never ahead of its offsets.
- Reads look in `dirty`, then the cache (which also remembers keys that are not
  there), then SQLite. `prefetch` reads the keys a run of records needs, sorted, in
  statements of up to _CHUNK keys (SQLite walks the B-tree in key order, reading each
  page once for all the keys on it).
- A raw table (`raw=True`) keeps each value as the JSON text it is stored as: the
  follower's batches of the enrichment kernel (joins/follow.py, stream_table.enrich_sides) paste
  that text into their rows, read it with `rows` and change it with `apply`.
- A table of mutable values (a key's versions, stream_table._History) writes back
  every value read since the last flush, since the operator changes it in place.
"""

from __future__ import annotations

import sqlite3
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from itertools import chain, repeat
from operator import itemgetter
from typing import Any

import orjson

from streamctl.processing import exactjson

CACHE_ENTRIES = 1 << 15  # decoded rows kept in memory per table
CACHE_KIB = 8192  # SQLite's page cache per connection
_ABSENT = object()  # in the cache: the key has no row
_DELETED = object()  # in dirty: the row is deleted at the next flush
_MISS = object()  # not in the cache
# keys per prefetch statement, sorted (random keys of a 1M-row table: 2.6-3.2 us a key in
# statements of 30,000 keys, 5.8 in statements of 4,000, 7.4 in statements of 500)
_CHUNK = 1 << 15
# A statement's IN list is padded with NULLs (which match nothing) to a power of two from this up:
# the sqlite3 module caches 128 prepared statements by their text, a large one at about 1.5 MB
# (one per length of list held 190 MB)
_LEAST_LIST = 64
# rows per INSERT statement at a flush (1M rows: 2.2-2.4 s of CPU at 100 or 500 a statement, 3.0-3.4
# through executemany, whose binding and stepping per row is most of the cost)
_ROWS_PER_INSERT = 100
_ROWS_PER_JSON = 4096  # rows per statement of _insert_json (a JSON object of about 0.5 MB)
# distinct keys from which rows() reads past the cache (_bulk_rows): the follower's runs of events
# over a large table (32k random keys of a 1M-row table: ...)
_BULK = 4096


def sql_key(nkey: Any) -> str:
    """The TEXT key of a normalized key: a string as is (one starting with \\x01 escaped), another
    key's JSON text after \\x01j."""
    if nkey.__class__ is str:
        return "\x01s" + nkey if nkey.startswith("\x01") else nkey
    return "\x01j" + nkey[1].decode()


def open_db(path: str) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are the caller's), WAL, fsync at each commit."""
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    # a new file's, the largest SQLite has (1M rows in batches of 50k, then 500k random keys read 32k at a time:
    # 2.4 s of CPU to write and 1.9-2.1 to read at 64 KiB, 2.5-2.9 and 2.5 at 16 KiB, 2.8 and 2.9 at 4 KiB)
    db.execute("PRAGMA page_size=65536")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
    db.execute("PRAGMA mmap_size=0")  # mapped pages would count in memory as the table grows
    return db


_STR = {str}
_SOH = repeat("\x01")


def _escaped(names: list[Any]) -> bool:
    """Whether any of these sorted strings (or (string, value) pairs) starts with \\x01, which
    sql_key escapes: such strings sort together, from "\\x01" on."""
    i = bisect_left(names, ("\x01",) if names and names[0].__class__ is tuple else "\x01")
    if i == len(names):
        return False
    first = names[i]
    return (first[0] if first.__class__ is tuple else first).startswith("\x01")


def _same(raw: bytes) -> bytes:
    return raw


class DiskTable(MutableMapping[Any, Any]):
    def __init__(self, db: sqlite3.Connection, name: str, encode: Callable[[Any], bytes] = exactjson.dumps,
                 decode: Callable[[bytes], Any] = exactjson.loads, mutable: bool = False, raw: bool = False) -> None:
        self.db = db
        self.name = name
        self.raw = raw  # values are their stored JSON text (bytes), neither encoded nor decoded
        self.encode = encode
        self.decode: Callable[[bytes], Any] = _same if raw else decode
        self.mutable = mutable
        self.cache: dict[Any, Any] = {}
        self.dirty: dict[Any, Any] = {}
        db.execute(f"CREATE TABLE IF NOT EXISTS {name} (k TEXT PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID")
        self._select = f"SELECT v FROM {name} WHERE k = ?"
        # keys per prefetch statement: a power of two SQLite binds (32766 since 3.32, 999 before)
        self.chunk = min(_CHUNK, 1 << (db.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER).bit_length() - 1))

    # -- reads --
    def get(self, nkey: Any, default: Any = None) -> Any:
        v = self.dirty.get(nkey, _ABSENT)
        if v is not _ABSENT:
            return default if v is _DELETED else v
        v = self.cache.get(nkey, _MISS)
        if v is _MISS:
            v = self._load(nkey)
        if v is _ABSENT:
            return default
        if self.mutable:
            self.dirty[nkey] = v
        return v

    def _load(self, nkey: Any) -> Any:
        row = self.db.execute(self._select, (sql_key(nkey),)).fetchone()
        v = _ABSENT if row is None else self.decode(row[0])
        self._remember(nkey, v)
        return v

    def _remember(self, nkey: Any, v: Any) -> None:
        cache = self.cache
        if len(cache) >= CACHE_ENTRIES:
            cache.clear()  # cheaper than an LRU's bookkeeping on every read; hot keys come back at once
        cache[nkey] = v

    def prefetch(self, nkeys: Iterable[Any]) -> None:
        """Read the rows of these keys that are neither dirty nor cached, in sorted statements."""
        dirty, cache = self.dirty, self.cache
        asked = set(nkeys)
        asked -= dirty.keys()
        hits = asked & cache.keys()
        asked -= hits
        if not asked:
            return
        if {*map(type, asked)} == _STR and not any(map(str.startswith, asked, _SOH)):
            want = None  # the common keys, checked at C speed: each string is its own TEXT key
            names = sorted(asked)
        else:
            want = {sql_key(nk): nk for nk in asked}
            names = sorted(want)
        if len(asked) + len(cache) > CACHE_ENTRIES:
            keep = {nk: cache[nk] for nk in hits}  # what these keys read from the cache stays
            cache.clear()
            cache.update(keep)
        decode = None if self.raw else self.decode
        step = self.chunk
        for i in range(0, len(names), step):
            part = names[i:i + step]
            size = max(_LEAST_LIST, 1 << (len(part) - 1).bit_length())
            q = f"SELECT k, v FROM {self.name} WHERE k IN ({','.join('?' * size)})"
            found = dict(self.db.execute(q, part + [None] * (size - len(part))).fetchall())
            if want is None and decode is None:
                cache.update(dict.fromkeys(part, _ABSENT))
                cache.update(found)
                continue
            for sk in part:
                raw = found.get(sk)
                cache[sk if want is None else want[sk]] = (
                    _ABSENT if raw is None else raw if decode is None else decode(raw))

    def __getitem__(self, nkey: Any) -> Any:
        v = self.get(nkey, _ABSENT)
        if v is _ABSENT:
            raise KeyError(nkey)
        return v

    def __contains__(self, nkey: object) -> bool:
        return self.get(nkey, _ABSENT) is not _ABSENT

    def rows(self, nkeys: list[Any]) -> list[Any]:
        """The value of each key, None where it has no row (a stored value is never None: a null
        deletes); the keys are read from SQLite first where neither dirty nor cached."""
        asked = set(nkeys)
        asked.discard(None)
        if len(asked) >= _BULK and not self.mutable and {*map(type, asked)} == _STR:
            names = sorted(asked)
            if not _escaped(names):
                return self._bulk_rows(nkeys, asked, names)
        self.prefetch(asked)
        dirty_get, cache_get, load = self.dirty.get, self.cache.get, self._load
        if not self.dirty:  # a run of events after a checkpoint: every key is cached now
            got = list(map(cache_get, nkeys))
            if None not in got:
                return [None if v is _ABSENT else v for v in got]
        out: list[Any] = []
        for nk in nkeys:
            if nk is None:
                out.append(None)
                continue
            v = dirty_get(nk, _MISS)
            if v is _MISS:
                v = cache_get(nk, _MISS)
                if v is _MISS:
                    v = load(nk)  # evicted since the prefetch (a run with more keys than the cache)
            out.append(None if v is _ABSENT or v is _DELETED else v)
        return out

    def _bulk_rows(self, nkeys: list[Any], asked: set[str], names: list[str]) -> list[Any]:
        """rows() of a large run of common keys (each string its own TEXT key; `names` the distinct
        ones, sorted): read past the cache, which would only churn (a run of random keys over a
        large table finds few of them there, and costs more to keep up to date than the reads it
        saves)."""
        dirty = self.dirty
        found: dict[Any, Any] = {}
        mine = asked & dirty.keys() if dirty else None
        if mine:
            asked -= mine
            found.update({nk: dirty[nk] for nk in mine if dirty[nk] is not _DELETED})
            names = [nk for nk in names if nk in asked]
        step = self.chunk
        for i in range(0, len(names), step):
            part = names[i:i + step]
            size = max(_LEAST_LIST, 1 << (len(part) - 1).bit_length())
            q = f"SELECT k, v FROM {self.name} WHERE k IN ({','.join('?' * size)})"
            found.update(self.db.execute(q, part + [None] * (size - len(part))).fetchall())
        if not self.raw:
            decode = self.decode
            found = {nk: decode(v) if nk in asked else v for nk, v in found.items()}
        return list(map(found.get, nkeys))

    # -- writes --
    def apply(self, changes: dict[Any, Any]) -> None:
        """Set each key's value, or delete its row where the value is None (a delete of a key with no
        row deletes nothing)."""
        dirty = self.dirty
        if None not in changes.values():
            dirty.update(changes)  # a table's backlog: no deletes, and a C-level copy
            return
        for nk, v in changes.items():
            dirty[nk] = _DELETED if v is None else v

    def __setitem__(self, nkey: Any, value: Any) -> None:
        self.dirty[nkey] = value

    def __delitem__(self, nkey: Any) -> None:
        if self.pop(nkey, _ABSENT) is _ABSENT:
            raise KeyError(nkey)

    def pop(self, nkey: Any, default: Any = None) -> Any:
        v = self.get(nkey, _ABSENT)
        if v is _ABSENT:
            return default
        self.dirty[nkey] = _DELETED
        return v

    def flush(self) -> int:
        """Write the changes since the last flush (inside the caller's transaction); how many."""
        dirty = self.dirty
        if not dirty:
            return 0
        values = dirty.values()
        puts: list[tuple[Any, Any]] = []
        if _DELETED not in values and {*map(type, dirty)} == _STR:
            puts = sorted(dirty.items())  # B-tree inserts in key order touch each page once (keys are unique)
        if puts and not _escaped(puts):
            # the common case checked at C speed: no deletes, every key a string that is its own TEXT key
            dels = []
        else:
            puts = [(k if k.__class__ is str and not k.startswith("\x01") else sql_key(k), v)
                    for k, v in dirty.items() if v is not _DELETED]
            puts.sort(key=itemgetter(0))
            dels = [(sql_key(k),) for k, v in dirty.items() if v is _DELETED]
        if puts:
            self._insert(puts)
        if dels:
            self.db.executemany(f"DELETE FROM {self.name} WHERE k = ?", dels)
        cache = self.cache
        if len(cache) + len(dirty) > CACHE_ENTRIES:
            cache.clear()
        if len(dirty) <= CACHE_ENTRIES:
            cache.update({k: _ABSENT if v is _DELETED else v for k, v in dirty.items()} if dels else dirty)
        n = len(dirty)
        dirty.clear()
        return n

    def _insert(self, puts: list[tuple[str, Any]]) -> None:
        """INSERT OR REPLACE these (TEXT key, value) rows: a raw table's _ROWS_PER_JSON to a statement
        over a JSON object of them (_insert_json), else _ROWS_PER_INSERT to a statement."""
        if not self.raw:
            self._insert_bound(puts)
            return
        for i in range(0, len(puts), _ROWS_PER_JSON):
            part = puts[i:i + _ROWS_PER_JSON]
            if not self._insert_json(part):
                self._insert_bound(part)

    def _insert_json(self, puts: list[tuple[str, bytes]]) -> bool:
        """Insert a raw table's rows in one statement: SQLite's json_each reads them from one JSON
        object, key to value text, bound as one parameter (1M rows in batches of 50k: 1.5-1.8 s of
        CPU, 2.2-2.4 s in statements of 100 rows, where binding each value is most of the cost).
        False, having written nothing, where the rows cannot go that way: a value that is not
        UTF-8 (a raw value is orjson's text, always UTF-8), or a NUL in a key or value (escaped as
        \\u0000 in the object, where SQLite would cut the TEXT short)."""
        try:
            body = orjson.dumps({k: v.decode() for k, v in puts})
        except (UnicodeDecodeError, AttributeError, orjson.JSONEncodeError):
            return False
        if b"\\u0000" in body:
            return False
        # value is the JSON string's text; CAST keeps it a BLOB, as a bound bytes value is stored
        self.db.execute(f"INSERT OR REPLACE INTO {self.name} (k, v) SELECT key, CAST(value AS BLOB) "
                        "FROM json_each(?)", (body,))
        return True

    def _insert_bound(self, puts: list[tuple[str, Any]]) -> None:
        """INSERT OR REPLACE these rows, _ROWS_PER_INSERT to a statement, each value bound."""
        n = _ROWS_PER_INSERT
        full = len(puts) - len(puts) % n
        encode, raw, execute = self.encode, self.raw, self.db.execute
        if full:
            many = f"INSERT OR REPLACE INTO {self.name} (k, v) VALUES " + ",".join(["(?, ?)"] * n)
            for i in range(0, full, n):
                part = puts[i:i + n]
                # encoded a statement at a time: orjson's results keep 4 KiB each until freed
                execute(many, list(chain.from_iterable(part)) if raw else [x for k, v in part for x in (k, encode(v))])
        if full < len(puts):
            rest = puts[full:]
            self.db.executemany(f"INSERT OR REPLACE INTO {self.name} (k, v) VALUES (?, ?)",
                                rest if raw else ((k, encode(v)) for k, v in rest))

    # -- the rest of the mapping protocol (tests only: a count over the whole table) --
    def __len__(self) -> int:
        n = int(self.db.execute(f"SELECT count(*) FROM {self.name}").fetchone()[0])
        for k, v in self.dirty.items():
            stored = self.db.execute(self._select, (sql_key(k),)).fetchone() is not None
            n += (v is not _DELETED) - stored
        return n

    def __iter__(self) -> Iterator[Any]:
        raise TypeError("a DiskTable is not iterated: its keys are on disk")
