"""consume --sqlite: records into a SQLite table, exactly once.

Each batch's rows and the group's next offsets (table `streamctl_offsets`) are
written in one SQLite transaction, so a crash at any moment leaves either both
or neither; a rerun resumes from the offsets in the database. The group file
in LOG/groups/ is a mirror written after each commit (for `stat` and
`--fail-lag`), and may lag the database by one batch after a crash: rows below
the database's next offset are dropped inside the transaction, so a reader
that starts from an older position never applies a record twice.

Tables:

    TABLE              key, value (JSON text), headers (JSON text or NULL), ts, partition, offset
                       append: primary key (partition, offset); upsert: primary key key
    streamctl_offsets  log (the log folder's real path), group, partition, next_offset

The connection runs in WAL mode (readers such as `sqlite3 FILE` never block
the writer and see only committed batches), and every write transaction is
`BEGIN IMMEDIATE`, so two writers serialize instead of failing half-way. A
database another process holds locked is waited for.

synchronous=NORMAL: a commit is not fsynced (checkpoints are). Exactly-once
needs the rows and offsets to be atomic, not each commit to be durable: after
a power loss the database is at an earlier commit, rows and offsets alike,
and the records after it are read from the log again. An fsync per commit
cost 5-15 ms on a busy disk here (a 1M-record load went from 61 s to 12 s).

What a power cut must not do is leave the group file ahead of the database:
retention keeps segments only until every group file has passed them, and a
database without offsets (a first run whose commits were all lost) takes its
start from the group file. So:
- the offsets `establish` stores (and the tables, and the database file's own
  entry in its folder) are made durable before the group file is written;
- every mirror write of the group file comes after an fsync of the database's
  WAL (and its folder) taken once the commits it names were done; mirror
  writes happen at most once a second (and at the end), so this costs at most
  three fsyncs a second;
- every run resumes from the database's offsets (the group file is never read
  for a partition the database has).
"""

from __future__ import annotations

import os
import queue
import re
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from streamctl import stopflag
from streamctl.clients.consumer import Committer, plan
from streamctl.errors import StorageError, UsageError
from streamctl.groups import offsets
from streamctl.storage import reader, record
from streamctl.storage.log import Log

OFFSETS_TABLE = "streamctl_offsets"
COLUMNS = ("key", "value", "headers", "ts", "partition", "offset")
MODES = ("append", "upsert")
# How long one attempt waits for a lock held elsewhere before we say so and wait on.
BUSY_SLICE = 0.5
PAGE_SIZE = 16384
# Batches handed to the writer thread and not yet applied, at most: memory is bounded by
# batches in flight, not by the input.
IN_FLIGHT = 2

Row = tuple[str | None, str, str | None, int, int, int]  # key, value, headers, ts, partition, offset

# Stored lines in the canonical layout, found in a whole decoded block by one regex call: the
# envelope and the key from the prefix, the value as the text up to the closing brace (with a
# record's headers, which close the line, still on it). ~2x faster than orjson per line here.
_LINES = re.compile(r'^\{"offset":(\d++),"partition":(\d++),"ts":(\d++),"key":(null|"[^"\\\n]*+(?:\\.[^"\\\n]*+)*+"),'
                    r'"value":(.*)\}$', re.MULTILINE)


def _key(text: str) -> str | None:
    if text == "null":
        return None
    if "\\" not in text:
        return text[1:-1]
    return orjson.loads(text)


def _split_headers(rest: str) -> tuple[str, str | None]:
    """(value JSON text, headers JSON text or None) of the text after `"value":` of a line that
    holds `"headers"` somewhere. The value is sliced out as stored, not re-encoded, when the
    headers are the line's last field in the layout streamctl writes (orjson's); else both are
    re-encoded from a parse."""
    try:
        obj = orjson.loads('{"value":' + rest + "}")
    except orjson.JSONDecodeError as e:
        raise record.BadRecord(f"invalid JSON: {e}") from None
    if len(obj) == 1:  # "headers" is inside the value
        return rest, None
    headers = obj.get("headers")
    htext = None if headers is None else orjson.dumps(headers).decode()
    if len(obj) == 2 and htext is not None:
        tail = ',"headers":' + htext
        if rest.endswith(tail):
            return rest[:-len(tail)], htext
    return orjson.dumps(obj["value"]).decode(), htext


def parse_rows(data: bytes) -> list[Row]:
    """Rows of a block of whole stored lines; raises record.BadRecord on a line that is not a record.

    Values (and headers) keep their JSON text as stored: a line is never re-encoded unless it is
    not in streamctl's own layout. 1M lines of ~280 bytes, 20% with headers: 4.0-6.5 s of CPU
    when a block with any headers went through orjson line by line, 2.4 s here."""
    try:
        found = _LINES.findall(data.decode())
    except UnicodeDecodeError:
        found = []
    if len(found) == data.count(b"\n"):
        if b'"headers"' not in data:
            return [(_key(k), v, None, int(ts), int(p), int(o)) for o, p, ts, k, v in found]
        rows: list[Row] = []
        for o, p, ts, k, v in found:
            h = None
            if '"headers"' in v:
                v, h = _split_headers(v)
            rows.append((_key(k), v, h, int(ts), int(p), int(o)))
        return rows
    rows = []
    for line in data.splitlines(keepends=True):
        obj = record.parse(line)
        headers = obj.get("headers")
        rows.append((obj.get("key"), orjson.dumps(obj["value"]).decode(),
                     None if headers is None else orjson.dumps(headers).decode(),
                     obj["ts"], obj["partition"], obj["offset"]))
    return rows


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def check_table_name(name: str) -> None:
    if not name or "\x00" in name:
        raise UsageError(f"--table {name!r}: not a table name")
    if name.lower().startswith("sqlite_") or name.lower() == OFFSETS_TABLE:
        raise UsageError(f"--table {name}: the name is reserved (sqlite_*, {OFFSETS_TABLE})")


@dataclass(frozen=True)
class SqliteTarget:
    """--sqlite FILE [--table NAME] [--mode append|upsert] as given on the command line."""

    path: str
    table: str | None = None
    mode: str = "append"


@dataclass
class ApplyStats:
    rows: int = 0  # rows inserted, replaced or deleted
    duplicates: int = 0  # records already in the database (a reread after a crash), dropped
    null_keys: int = 0  # upsert: records without a key, skipped
    batches: int = 0


class SqliteTable:
    """One table of a SQLite file, written in transactions together with a group's offsets."""

    def __init__(self, path: str, table: str, mode: str, log_id: str, group: str,
                 say: Callable[[str], None] | None = None) -> None:
        if mode not in MODES:
            raise UsageError(f"--mode {mode}: use append or upsert")
        check_table_name(table)
        self.path = path
        self.table = table
        self.mode = mode
        self.log_id = log_id
        self.group = group
        self.say = say
        self.stats = ApplyStats()
        self._told_busy = False
        self._queue: queue.Queue[tuple[list[Row], dict[int, int]] | None] | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stored: list[dict[int, int]] = []
        self._failed: BaseException | None = None
        if os.path.isdir(path):
            raise StorageError(f"{path}: is a folder, not a SQLite database")
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise StorageError(f"{path}: cannot create the database: no such folder {parent}")
        try:
            # isolation_level=None: no implicit transactions; every write is an explicit BEGIN IMMEDIATE
            self.db = sqlite3.connect(path, timeout=BUSY_SLICE, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            raise self._error(e, "cannot open") from None
        try:
            self._setup()
        except BaseException:
            self.db.close()
            raise
        t = _q(table)
        self._sql_insert = f"INSERT INTO {t} (key, value, headers, ts, \"partition\", \"offset\") VALUES (?,?,?,?,?,?)"
        self._sql_upsert = (self._sql_insert + " ON CONFLICT(key) DO UPDATE SET value=excluded.value, "
                            "headers=excluded.headers, ts=excluded.ts, \"partition\"=excluded.\"partition\", "
                            "\"offset\"=excluded.\"offset\"")
        self._sql_delete = f"DELETE FROM {t} WHERE key=?"

    # -- errors and locking ------------------------------------------------------------------

    def _error(self, e: BaseException, doing: str) -> StorageError:
        msg = str(e)
        low = msg.lower()
        if "not a database" in low:
            why = "not a SQLite database"
        elif "readonly" in low or "read-only" in low:
            why = "the database (or its folder, which holds the -wal and -shm files) is read-only"
        elif "unable to open" in low:
            why = "cannot open the database file (missing folder or no permission)"
        elif "disk is full" in low or "database or disk is full" in low:
            why = "database or disk is full"
        elif "disk i/o error" in low:
            why = "disk I/O error (a failed write or fsync, or the file-size limit)"
        elif "malformed" in low:
            why = "the database is corrupt (database disk image is malformed)"
        else:
            why = msg
        return StorageError(f"{self.path}: {doing}: {why}")

    def _busy(self, e: sqlite3.OperationalError) -> bool:
        code = getattr(e, "sqlite_errorcode", None)
        if code is not None:
            return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
        return "locked" in str(e) or "busy" in str(e)

    def _wait_busy(self, e: sqlite3.OperationalError, doing: str) -> None:
        """A lock held by another process: wait (saying so once), unless we are told to stop."""
        if stopflag.is_set():
            from streamctl.errors import Interrupted

            raise Interrupted(f"{self.path}: {doing}: interrupted while waiting for a lock another process "
                              "holds; what it was to write was not committed and will be read again next run")
        if not self._told_busy and self.say is not None:
            self.say(f"{self.path}: locked by another process; waiting for it")
        self._told_busy = True
        del e

    def _begin(self, doing: str) -> None:
        while True:
            try:
                self.db.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as e:
                if not self._busy(e):
                    raise self._error(e, doing) from None
                self._wait_busy(e, doing)
            except sqlite3.Error as e:
                raise self._error(e, doing) from None

    def _rollback(self) -> None:
        try:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # the connection is closed next; SQLite rolls back an open transaction then

    def sync_files(self) -> None:
        """Make every commit done so far durable: fsync the WAL (where synchronous=NORMAL leaves
        commits unsynced) and the folder holding the files (a new file's entry). `PRAGMA
        wal_checkpoint` would not do: it copies only what it can and syncs the database, not
        the WAL frames it leaves. Linux fsyncs the file, whichever descriptor names it, so the
        WAL SQLite appends to through its own descriptor is synced by ours.

        The database file itself is never opened here: closing any descriptor of a file drops
        every POSIX lock this process holds on it, SQLite's included. SQLite syncs that file
        whenever it writes it (the header when it is made, checkpoints); the WAL holds no lock."""
        real = os.path.realpath(self.path)  # SQLite names the WAL after the file a symlink points to
        for path in (real + "-wal", os.path.dirname(real)):
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                continue  # no WAL: everything is in the database file (checkpointed and synced)
            except OSError as e:
                raise StorageError(f"{path}: cannot open to sync it: {e.strerror}") from None
            try:
                os.fsync(fd)
            except OSError as e:
                raise StorageError(f"{path}: fsync failed: {e.strerror}; the group file was not updated "
                                   "(the database's offsets are where the next run resumes)") from None
            finally:
                os.close(fd)

    # -- schema ------------------------------------------------------------------------------

    def _setup(self) -> None:
        while True:
            try:
                # A new file only (SQLite ignores it once the file has pages): rows of a few hundred
                # bytes fit 4x more to a page; 1M appends took 8-9 s of SQLite instead of 11-15 s,
                # and an upsert rewrites fewer page headers per commit (CPU 7.8 s instead of 12 s).
                self.db.execute(f"PRAGMA page_size={PAGE_SIZE}")
                mode = self.db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                break
            except sqlite3.OperationalError as e:
                if not self._busy(e):
                    raise self._error(e, "cannot open") from None
                self._wait_busy(e, "cannot open")
            except sqlite3.Error as e:
                raise self._error(e, "cannot open") from None
        if str(mode).lower() != "wal":
            raise StorageError(f"{self.path}: cannot switch to WAL mode (journal mode stays {mode})")
        try:
            self.db.execute("PRAGMA synchronous=NORMAL")
            # upserts touch pages all over the table; the default 2 MiB cache rereads them
            self.db.execute("PRAGMA cache_size=-65536")
            # A checkpoint copies each page once however often the WAL holds it, and costs two
            # fdatasyncs (~27 ms each here): every 64 MiB instead of every 16 MiB made a 1M-record
            # append 0.84x the wall time (median of 3, interleaved).
            self.db.execute("PRAGMA wal_autocheckpoint=4096")
        except sqlite3.Error as e:
            raise self._error(e, "cannot open") from None
        self._begin("cannot create the tables")
        try:
            self._ensure_offsets_table()
            self._ensure_table()
            self.db.execute("COMMIT")
        except sqlite3.Error as e:
            self._rollback()
            raise self._error(e, "cannot create the tables") from None
        except BaseException:
            self._rollback()
            raise

    def _columns(self, table: str) -> list[tuple[str, int]]:
        """(name, position in the primary key) of the table's stored columns; [] when it does not exist."""
        return [(r[1], r[5]) for r in self.db.execute(f"PRAGMA table_info({_q(table)})")]

    def _ensure_offsets_table(self) -> None:
        cols = self._columns(OFFSETS_TABLE)
        if not cols:
            self.db.execute(f'CREATE TABLE {OFFSETS_TABLE} (log TEXT NOT NULL, "group" TEXT NOT NULL, '
                            '"partition" INTEGER NOT NULL, next_offset INTEGER NOT NULL, '
                            'PRIMARY KEY (log, "group", "partition"))')
            return
        want = ["log", "group", "partition", "next_offset"]
        if sorted(n.lower() for n, _ in cols) != sorted(want):
            raise StorageError(f"{self.path}: table {OFFSETS_TABLE} has columns ({', '.join(n for n, _ in cols)}), "
                               f"not ({', '.join(want)}); it is not streamctl's")

    def _ensure_table(self) -> None:
        t = _q(self.table)
        cols = self._columns(self.table)
        if not cols:
            if self.db.execute("SELECT 1 FROM sqlite_schema WHERE name=? COLLATE NOCASE",
                               (self.table,)).fetchone():
                raise StorageError(f"{self.path}: {self.table} is a view or an index, not a table; "
                                   "name another table with --table")
            if self.mode == "append":
                self.db.execute(f'CREATE TABLE {t} (key TEXT, value TEXT, headers TEXT, ts INTEGER, '
                                '"partition" INTEGER NOT NULL, "offset" INTEGER NOT NULL, '
                                'PRIMARY KEY ("partition", "offset")) WITHOUT ROWID')
            else:
                self.db.execute(f'CREATE TABLE {t} (key TEXT PRIMARY KEY NOT NULL, value TEXT, headers TEXT, '
                                'ts INTEGER, "partition" INTEGER, "offset" INTEGER) WITHOUT ROWID')
            return
        names = sorted(n.lower() for n, _ in cols)
        if names != sorted(COLUMNS):
            raise StorageError(
                f"{self.path}: table {self.table} has columns ({', '.join(n for n, _ in cols)}), but "
                f"--sqlite writes ({', '.join(COLUMNS)}); name another table with --table "
                "(generated columns may be added)")
        pk = [n.lower() for n, k in sorted((c for c in cols if c[1]), key=lambda c: c[1])]
        made_for = "append" if pk == ["partition", "offset"] else "upsert" if pk == ["key"] else None
        if made_for != self.mode:
            have = f"was made for --mode {made_for}" if made_for else \
                f"has primary key ({', '.join(pk) or 'none'})"
            need = "(partition, offset)" if self.mode == "append" else "(key)"
            raise StorageError(f"{self.path}: table {self.table} {have}; --mode {self.mode} needs the primary key "
                               f"{need}; use the table's mode or another --table")

    # -- offsets and batches -----------------------------------------------------------------

    def _stored_offsets(self) -> dict[int, int]:
        return {p: o for p, o in self.db.execute(
            f'SELECT "partition", next_offset FROM {OFFSETS_TABLE} WHERE log=? AND "group"=?',
            (self.log_id, self.group))}

    def _store_offsets(self, nexts: dict[int, int]) -> None:
        self.db.executemany(
            f'INSERT INTO {OFFSETS_TABLE} (log, "group", "partition", next_offset) VALUES (?,?,?,?) '
            'ON CONFLICT (log, "group", "partition") DO UPDATE SET next_offset=max(next_offset, excluded.next_offset)',
            [(self.log_id, self.group, p, o) for p, o in nexts.items()])

    def establish(self, log: Log, partitions: list[int], from_spec: str | None,
                  say: Callable[[str], None]) -> dict[int, int]:
        """Where each partition resumes: the database's next offset; for a partition the database
        has none of yet, the group's committed offset or --from (a first run), stored now so a
        rerun starts at the same place. That commit is made durable (sync_files) before the
        group file is set to the result: a power cut can lose the rows committed later, never
        these offsets once the group file names them, so the group file never leads the database."""
        self._begin("cannot read the offsets")
        try:
            stored = self._stored_offsets()
            missing = [p for p in partitions if p not in stored]
            for p in partitions:
                if p in stored:
                    end = reader.partition_info(log, p).next_offset
                    if stored[p] > end:
                        raise StorageError(
                            f"{self.path}: {OFFSETS_TABLE} says group {self.group} is at offset {stored[p]} of "
                            f"partition {p}, past the end of {log.path} ({end}): the log was truncated or "
                            f"replaced. To load it again, delete its rows: DELETE FROM {OFFSETS_TABLE} WHERE "
                            f"log='{self.log_id}' AND \"group\"='{self.group}'")
            if missing:
                pl = plan(log, missing, from_spec, self.group)
                for note in pl.notices:
                    say(note)
                start = {p: pl.positions[p].start for p in missing}
                self._store_offsets(start)
                stored.update(start)
            want = {p: stored[p] for p in partitions}
            self.db.execute("COMMIT")
        except sqlite3.Error as e:
            self._rollback()
            raise self._error(e, "cannot store the start offsets") from None
        except BaseException:
            self._rollback()
            raise
        self.sync_files()
        current = offsets.load(log, self.group)
        todo = {p: o for p, o in want.items() if current.get(p) != o}
        if todo:
            offsets.commit(log, self.group, todo)
        return want

    def apply(self, rows: list[Row], nexts: dict[int, int]) -> dict[int, int]:
        """Write `rows` (in consume order) and the next offsets in one transaction. Rows the
        database already holds (below its next offset of their partition) are dropped.
        Returns the next offsets now stored for the partitions in `nexts`."""
        self._begin(f"cannot write a batch of {len(rows)} record(s)")
        try:
            stored = self._stored_offsets()
            fresh = [r for r in rows if r[5] >= stored.get(r[4], 0)]
            self.stats.duplicates += len(rows) - len(fresh)
            if self.mode == "append":
                try:
                    self.db.executemany(self._sql_insert, fresh)
                except sqlite3.IntegrityError as e:
                    raise self._conflict(fresh, e) from None
                self.stats.rows += len(fresh)
            else:
                latest: dict[str, Row] = {}
                nulls = 0
                for r in fresh:
                    if r[0] is None:
                        nulls += 1
                    else:
                        latest.pop(r[0], None)  # keep the order of the last write of each key
                        latest[r[0]] = r
                self.stats.null_keys += nulls
                deletes = [(k,) for k, r in latest.items() if r[1] == "null"]
                if deletes:
                    self.db.executemany(self._sql_delete, deletes)
                self.db.executemany(self._sql_upsert, [r for r in latest.values() if r[1] != "null"])
                self.stats.rows += len(latest)
            result = {p: max(o, stored.get(p, 0)) for p, o in nexts.items()}
            self._store_offsets(result)
            self.db.execute("COMMIT")
            self.stats.batches += 1
            return result
        except sqlite3.Error as e:
            self._rollback()
            raise self._error(e, f"cannot write a batch of {len(rows)} record(s){_span(rows)}; it was not "
                                 "committed and will be read again next run") from None
        except BaseException:
            self._rollback()
            raise

    # -- the writer thread ----------------------------------------------------------------------
    #
    # While a backlog loads, parsing the next batch (Python, holding the GIL) and writing this
    # one (SQLite, which runs with the GIL released) overlap: apply_async hands a batch to a
    # thread that applies batches one at a time, in order, each in its own transaction exactly
    # as apply does. The connection is used by that thread only while batches are in flight;
    # wait() returns once they are all committed and raises the first error.

    def apply_async(self, rows: list[Row], nexts: dict[int, int]) -> None:
        if self._queue is None:
            self._queue = queue.Queue(maxsize=IN_FLIGHT)
            self._thread = threading.Thread(target=self._write, name="sqlite-writer", daemon=True)
            self._thread.start()
        self._raise()
        self._queue.put((rows, nexts))

    def _write(self) -> None:
        assert self._queue is not None
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                if self._failed is None:  # after an error nothing more is applied
                    stored = self.apply(*item)
                    with self._lock:
                        self._stored.append(stored)
            except BaseException as e:  # handed to the caller's thread by wait()
                self._failed = e
            finally:
                self._queue.task_done()

    def _raise(self) -> None:
        if self._failed is not None:
            raise self._failed

    def in_flight(self) -> bool:
        return self._queue is not None and self._queue.unfinished_tasks > 0

    def wait(self) -> None:
        if self._queue is not None:
            self._queue.join()
        self._raise()

    def take_stored(self) -> dict[int, int]:
        """The next offsets committed by the batches applied since the last call (raises their error)."""
        with self._lock:
            done, self._stored = self._stored, []
        out: dict[int, int] = {}
        for d in done:
            out.update(d)
        self._raise()
        return out

    def _conflict(self, rows: list[Row], e: sqlite3.IntegrityError) -> StorageError:
        self._rollback()
        for r in rows:
            hit = self.db.execute(f'SELECT 1 FROM {_q(self.table)} WHERE "partition"=? AND "offset"=?',
                                  (r[4], r[5])).fetchone()
            if hit:
                return StorageError(
                    f"{self.path}: table {self.table} already has partition {r[4]} offset {r[5]} although "
                    f"{OFFSETS_TABLE} says group {self.group} has not read it: the table or the offsets were "
                    "changed outside streamctl, or the table is filled from another log; nothing was committed")
        return StorageError(f"{self.path}: table {self.table}: {e}; nothing was committed")

    def stored_offsets(self) -> dict[int, int]:
        try:
            return self._stored_offsets()
        except sqlite3.Error as e:
            raise self._error(e, "cannot read the offsets") from None

    def close(self) -> None:
        """Stop the writer thread (batches already handed to it are committed first), then close."""
        if self._queue is not None and self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._queue = None
        try:
            self.db.close()
        except sqlite3.Error:
            pass


def _span(rows: list[Row]) -> str:
    parts: dict[int, list[int]] = {}
    for r in rows:
        span = parts.setdefault(r[4], [r[5], r[5]])
        span[1] = r[5]
    if not parts:
        return ""
    return " (" + ", ".join(f"p{p} {lo}..{hi}" for p, (lo, hi) in sorted(parts.items())) + ")"


class SqliteCommitter(Committer):
    """A Committer whose commit is the SQLite transaction: the rows gathered so far and the
    delivered offsets together; the group file is written after it, as a mirror."""

    def __init__(self, log: Log, group: str, table: SqliteTable, interval: float = 1.0) -> None:
        super().__init__(log, group, interval=interval)
        self.sink_group = group  # always a group here (Committer's may be None)
        self.table = table
        self.rows: list[Row] = []
        self.mirror: dict[int, int] = {}  # offsets committed to the database, not yet to the group file
        self._mirrored = time.monotonic()

    def commit(self, mirror: bool = True, final: bool = False) -> None:
        """The transaction, then the group file. With `mirror`, the transaction is done (with
        every one before it) when this returns; else (a full batch while catching up) the batch
        goes to the writer thread. The group file follows what the database has committed at
        most every `interval` seconds (and now, when `final`), each time after an fsync of the
        WAL that holds those commits (sync_files)."""
        nexts = {**self.delivered, **self.pending}
        todo = {p: o for p, o in nexts.items() if self.committed.get(p) != o}
        if todo or self.rows:
            if mirror and not self.table.in_flight():
                # the writer thread's finished batches first: they are older than this one, and
                # taken after it their offsets would set the mirror back behind the database
                self.mirror.update(self.table.take_stored())
                self.mirror.update(self.table.apply(self.rows, todo))
            else:
                self.table.apply_async(self.rows, todo)
            self.rows = []
            self.delivered.update(self.pending)
            self.committed.update(todo)
        if mirror:
            self.table.wait()
        self.mirror.update(self.table.take_stored())
        now = time.monotonic()
        if self.mirror and (final or now - self._mirrored >= self.interval):
            # self.mirror holds only offsets of commits that are done: synced by this fsync
            self.table.sync_files()
            offsets.commit(self.log, self.sink_group, self.mirror)
            self.mirror = {}
            self._mirrored = now
        self._last = now

    def finish(self) -> None:
        self.commit(final=True)

    def mirror_due(self) -> bool:
        return bool(self.mirror) and time.monotonic() - self._mirrored >= self.interval

    def resume_offsets(self) -> dict[int, int]:
        """The database's offsets (consume_live's starts): every batch in flight committed first."""
        self.table.wait()
        self.mirror.update(self.table.take_stored())
        return self.table.stored_offsets()


@dataclass
class SqliteSink:
    """A live.Sink that gathers rows and commits them in batches of `batch` records.

    `timeout` (--batch-timeout) lets a partial batch wait that long for more records while
    following; without it a partial batch is committed as soon as consume has caught up.
    On a stop (Ctrl-C, SIGTERM) the batch at hand is committed: its rows are complete."""

    committer: SqliteCommitter
    batch: int
    timeout: float | None = None
    per_line: bool = False
    started: float = 0.0
    records: int = 0
    _first: dict[int, int] = field(default_factory=dict)

    def put(self, p: int, next_offset: int, data: bytes) -> int:
        c = self.committer
        try:
            rows = parse_rows(data)
        except record.BadRecord as e:
            raise reader.locate_corrupt(c.log, p, c.pending.get(p, 0), e) from None
        if not rows:
            return 0
        i = 0
        while i < len(rows):
            if not c.rows:
                self.started = time.monotonic()
            take = rows[i: i + self.batch - len(c.rows)]
            i += len(take)
            c.rows.extend(take)
            c.queued(p, next_offset if i == len(rows) else take[-1][5] + 1)
            if len(c.rows) >= self.batch:
                c.commit(mirror=False)
        self.records += len(rows)
        return len(rows)

    def sync(self) -> None:
        c = self.committer
        if not c.rows or self.timeout is None or time.monotonic() - self.started >= self.timeout:
            c.commit()

    def tick(self) -> None:
        c = self.committer
        if c.rows and self.timeout is not None and time.monotonic() - self.started >= self.timeout:
            c.commit()
        elif c.mirror_due() and not c.table.in_flight():
            c.commit()  # a mirror held back by the once-a-second limit, written once due

    def idle(self) -> bool:
        return not self.committer.rows and not self.committer.table.in_flight()

    def finish(self, normal: bool) -> None:
        self.committer.finish()


def log_identity(log: Log) -> str:
    """The log's name in streamctl_offsets: its folder's real path (the same from any cwd)."""
    return os.path.realpath(log.path)


def open_sink(log: Log, group: str, partitions: list[int], from_spec: str | None, path: str, table: str | None,
              mode: str, batch: int, timeout: float | None, say: Callable[[str], None],
              interval: float = 1.0) -> SqliteSink:
    """Open (or create) the database and table, fix where each partition resumes, and return the
    sink (its committer is sink.committer) for consume_live (which must then plan from the group file, not --from)."""
    from streamctl.storage.log import log_name

    name = table if table is not None else log_name(log.path)
    store = SqliteTable(path, name, mode, log_identity(log), group, say)
    try:
        store.establish(log, partitions, from_spec, say)
    except BaseException:
        store.close()
        raise
    committer = SqliteCommitter(log, group, store, interval=interval)
    return SqliteSink(committer, batch, timeout)


def report(sink: SqliteSink) -> list[str]:
    """What a user should hear about at the end (stderr); nothing when all went in as expected."""
    t = sink.committer.table
    out = []
    if t.stats.null_keys:
        out.append(f"{t.path}: {t.stats.null_keys} record(s) with a null key skipped (--mode upsert needs a key)")
    if t.stats.duplicates:
        out.append(f"{t.path}: {t.stats.duplicates} record(s) read again after an interrupted run were already "
                   "in the database and were not applied twice")
    return out
