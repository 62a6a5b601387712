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
  there), then SQLite. `prefetch` reads the keys a round needs in one statement
  per few thousand keys.
- A table of mutable values (a key's versions, stream_table._History) writes back
  every value read since the last flush, since the operator changes it in place.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from operator import itemgetter
from typing import Any

import orjson

CACHE_ENTRIES = 1 << 15  # decoded rows kept in memory per table
CACHE_KIB = 8192  # SQLite's page cache per connection
_ABSENT = object()  # in the cache: the key has no row
_DELETED = object()  # in dirty: the row is deleted at the next flush
_MISS = object()  # not in the cache
_CHUNK = 4000  # keys per prefetch statement (1M keys: 6.3 us a key; 500 a statement: 8.2)


def sql_key(nkey: Any) -> str:
    """The TEXT key of a normalized key: a string as is (one starting with \\x01 escaped), another
    key's JSON text after \\x01j."""
    if nkey.__class__ is str:
        return "\x01s" + nkey if nkey.startswith("\x01") else nkey
    return "\x01j" + nkey[1].decode()


def open_db(path: str) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are the caller's), WAL, fsync at each commit."""
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA page_size=16384")  # a new file's (1M rows written in key batches: 9 s at 16 KiB, 11 s at 4)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
    db.execute("PRAGMA mmap_size=0")  # mapped pages would count in memory as the table grows
    return db


class DiskTable(MutableMapping[Any, Any]):
    def __init__(self, db: sqlite3.Connection, name: str, encode: Callable[[Any], bytes] = orjson.dumps,
                 decode: Callable[[bytes], Any] = orjson.loads, mutable: bool = False) -> None:
        self.db = db
        self.name = name
        self.encode = encode
        self.decode = decode
        self.mutable = mutable
        self.cache: dict[Any, Any] = {}
        self.dirty: dict[Any, Any] = {}
        db.execute(f"CREATE TABLE IF NOT EXISTS {name} (k TEXT PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID")
        self._select = f"SELECT v FROM {name} WHERE k = ?"
        # keys per prefetch statement: as many as SQLite binds (32766 since 3.32, 999 before)
        self.chunk = min(_CHUNK, db.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER))

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
        """Read the rows of these keys that are neither dirty nor cached, a statement per few thousand."""
        dirty, cache = self.dirty, self.cache
        want: dict[str, Any] = {}
        for nk in nkeys:
            if nk not in dirty and nk not in cache:
                # sql_key, inlined for the common key: a string without a leading \x01 is itself
                want[nk if nk.__class__ is str and not nk.startswith("\x01") else sql_key(nk)] = nk
        if not want:
            return
        if len(want) + len(cache) > CACHE_ENTRIES:
            cache.clear()
        names = list(want)
        decode = self.decode
        step = self.chunk
        for i in range(0, len(names), step):
            part = names[i:i + step]
            q = f"SELECT k, v FROM {self.name} WHERE k IN ({','.join('?' * len(part))})"
            found = dict(self.db.execute(q, part).fetchall())
            for sk in part:
                raw = found.get(sk)
                cache[want[sk]] = _ABSENT if raw is None else decode(raw)

    def __getitem__(self, nkey: Any) -> Any:
        v = self.get(nkey, _ABSENT)
        if v is _ABSENT:
            raise KeyError(nkey)
        return v

    def __contains__(self, nkey: object) -> bool:
        return self.get(nkey, _ABSENT) is not _ABSENT

    # -- writes --
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
        encode = self.encode
        puts = [(k if k.__class__ is str and not k.startswith("\x01") else sql_key(k), v)
                for k, v in dirty.items() if v is not _DELETED]
        dels = [(sql_key(k),) for k, v in dirty.items() if v is _DELETED]
        if puts:
            puts.sort(key=itemgetter(0))  # B-tree inserts in key order touch each page once
            # encoded as SQLite takes them: orjson's results keep 4 KiB each until freed
            self.db.executemany(f"INSERT OR REPLACE INTO {self.name} (k, v) VALUES (?, ?)",
                                ((k, encode(v)) for k, v in puts))
        if dels:
            self.db.executemany(f"DELETE FROM {self.name} WHERE k = ?", dels)
        cache = self.cache
        for k, v in dirty.items():
            if len(cache) >= CACHE_ENTRIES:
                cache.clear()
            cache[k] = _ABSENT if v is _DELETED else v
        n = len(dirty)
        dirty.clear()
        return n

    # -- the rest of the mapping protocol (tests only: a count over the whole table) --
    def __len__(self) -> int:
        n = int(self.db.execute(f"SELECT count(*) FROM {self.name}").fetchone()[0])
        for k, v in self.dirty.items():
            stored = self.db.execute(self._select, (sql_key(k),)).fetchone() is not None
            n += (v is not _DELETED) - stored
        return n

    def __iter__(self) -> Iterator[Any]:
        raise TypeError("a DiskTable is not iterated: its keys are on disk")
