"""capture's run: checks, the slot, the snapshot, then the change stream, each commit appended once.

Order of a first run (each step safe to interrupt):
1. every check (DSN, wal_level, the replication privilege, each table and its primary key)
   before anything is created, so a misconfiguration leaves no log and no slot behind;
2. the publication (pgoutput reads the tables it names) and the slot, whose creation exports
   a snapshot: the state the change stream starts from;
3. the logs, marked "snapshot started" in their metadata, the rows read in that snapshot and
   appended, then marked "snapshot done";
4. the stream from the slot: each commit's records appended and fsynced, then the slot
   confirmed up to that commit (never further), so the server keeps what is not yet durable.
A run that finds a snapshot not marked done (killed during it), or no slot (dropped), makes a
new slot and reads the tables again as a resync: a row the log already holds unchanged is not
written again, and a key the log holds that the table no longer has gets a tombstone.
"""

from __future__ import annotations

import hashlib
import os
import re
import select
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from streamctl import stopflag
from streamctl.capture import pgoutput
from streamctl.capture import server as srv
from streamctl.capture.tablelog import TableLog, _headers
from streamctl.errors import StreamctlError, UsageError
from streamctl.storage import reader
from streamctl.storage.appender import Appender
from streamctl.storage.fsutil import atomic_write
from streamctl.storage.log import META, Log, LogMeta, is_log, open_log, open_or_create
from streamctl.timeparse import now_ms

STATE_KEY = "capture"
FLUSH_RECORDS = 20_000  # records queued before a write even inside a commit (memory stays bounded)
FLUSH_SECONDS = 0.25  # the longest a committed change waits before it is written, under a steady stream
RECONNECT_FIRST = 0.5  # seconds before the first reconnect after a lost connection (--follow)
RECONNECT_MAX = 30.0  # the longest wait between two tries
_SLOT_RE = re.compile(r"^[a-z0-9_]{1,63}$")


@dataclass
class CaptureOptions:
    dsn: str
    log: str
    tables: list[str]
    follow: bool = False
    slot: str | None = None
    snapshot: str = "initial"  # initial | never
    partitions: int | None = None
    drop_slot: bool = False
    fsync: str = "batch"


@dataclass
class CaptureStats:
    snapshot_rows: int = 0
    changes: int = 0
    records: int = 0
    skipped: int = 0
    commits: int = 0
    lsn: int = 0
    per_log: dict[str, int] = field(default_factory=dict)


def default_slot(log_pattern: str) -> str:
    """A slot name derived from LOG: readable, unique per LOG path, within PostgreSQL's 63 characters."""
    base = os.path.basename(os.path.normpath(log_pattern.replace("{table}", "")))
    readable = re.sub(r"[^a-z0-9_]+", "_", base.lower()).strip("_")[:40]
    digest = hashlib.sha1(os.path.abspath(log_pattern).encode()).hexdigest()[:8]
    return f"streamctl_{readable}_{digest}" if readable else f"streamctl_{digest}"


def log_paths(pattern: str, tables: list[srv.TableInfo]) -> list[str]:
    if "{table}" in pattern:
        return [pattern.replace("{table}", t.qualified) for t in tables]
    if len(tables) > 1:
        raise UsageError("several --table need {table} in LOG (e.g. cdc/{table}), one log per table")
    return [pattern]


def capture_state(log: Log) -> dict | None:
    st = log.meta.extra.get(STATE_KEY)
    return st if isinstance(st, dict) else None


def write_state(log: Log, state: dict) -> Log:
    meta = LogMeta(log.meta.partitions, log.meta.segment_bytes, log.meta.created, {**log.meta.extra, STATE_KEY: state})
    atomic_write(os.path.join(log.path, META), meta.to_json())
    return Log(log.path, meta)


def run(opts: CaptureOptions, say: Callable[[str], None]) -> CaptureStats:
    server = srv.Server(opts.dsn)  # a DSN libpq refuses: exit 2, before anything else
    slot = opts.slot or default_slot(opts.log)
    if not _SLOT_RE.match(slot):
        raise UsageError(f"--slot {slot!r}: a slot name is 1 to 63 lower-case letters, digits and underscores")
    if not opts.drop_slot and not opts.tables:
        raise UsageError("capture needs at least one --table [SCHEMA.]TABLE")
    conn = server.connect()
    try:
        if opts.drop_slot:
            dropped = srv.drop_slot(conn, slot, server.shown)
            say(f"dropped replication slot {slot}" if dropped else f"no replication slot {slot} (nothing to drop)")
            return CaptureStats()
        srv.check_server(conn, server.shown)
        tables = [srv.table_info(conn, t, server.shown) for t in opts.tables]
        paths = log_paths(opts.log, tables)
        if len(set(paths)) != len(paths):
            raise UsageError("a table is named twice (one log per table)")
        for path in paths:
            if os.path.exists(path) and not is_log(path):
                raise StreamctlError(f"{path}: exists and is not a streamctl log")
        for info, path in zip(tables, paths, strict=True):
            if is_log(path):
                existing = open_log(path)
                st = capture_state(existing)
                # a log capture did not make: a resync would write tombstones for its keys (an empty one
                # is taken: capture's own, killed between creating it and marking it, is one)
                if st is None and _holds_records(existing):
                    raise UsageError(f"{path} exists and is not a capture log (give another LOG)")
                if st is not None and st.get("slot") != slot:
                    raise UsageError(f"{path} is captured through slot {st.get('slot')}, not {slot} "
                                     "(give --slot, or another LOG)")
                if st is not None and st.get("table") != info.qualified:
                    raise UsageError(f"{path} is captured from table {st.get('table')}, not {info.qualified} "
                                     f"(give --table {st.get('table')}, or another LOG)")
        slot_info = srv.slot_exists(conn, slot)
        if slot_info is not None and slot_info["plugin"] != "pgoutput":
            raise StreamctlError(f"{server.shown}: slot {slot} exists with plugin {slot_info['plugin']}, "
                                 "not pgoutput (choose another --slot)")
        if slot_info is not None and slot_info["active_pid"] is not None:
            raise StreamctlError(f"{server.shown}: slot {slot} is in use by process {slot_info['active_pid']} "
                                 "(another capture is running)")
        if slot_info is not None:
            # the slot streams what its publication names: changing that set would lose for good the
            # changes of a table left out (the slot moves past them) and give a table added no snapshot
            published = srv.publication_tables(conn, slot)
            if published is not None and set(published) != {t.oid for t in tables}:
                raise UsageError(f"{opts.log}: slot {slot} captures {_table_set(published.values())}, not "
                                 f"{_table_set(t.qualified for t in tables)} (give the same --table set, "
                                 "or another --slot or LOG)")
        made_publication = srv.ensure_publication(conn, slot, tables, server.shown)
        states = [capture_state(open_log(p)) if is_log(p) else None for p in paths]
        resync = slot_info is None or any(s is None or s.get("snapshot") == "started" for s in states)
        new_slot = None
        if resync:
            if slot_info is not None:
                srv.drop_slot(conn, slot, server.shown)
                srv.ensure_publication(conn, slot, tables, server.shown)
            try:
                new_slot = srv.create_slot(server, slot)
            except StreamctlError:
                if made_publication:  # nothing of this run is left behind
                    srv.query(conn, f"drop publication if exists {srv.ident(slot)}")
                raise
        stats = CaptureStats()
        logs: list[TableLog] = []
        try:
            for info, path, state in zip(tables, paths, states, strict=True):
                log = open_or_create(path, opts.partitions, None, now_ms())
                mode = "started" if new_slot is not None and opts.snapshot != "never" else (
                    state.get("snapshot", "done") if state and new_slot is None else "never"
                    if opts.snapshot == "never" else "done")
                log = write_state(log, {"slot": slot, "dsn": server.shown, "table": info.qualified, "snapshot": mode})
                tl = TableLog(info, log, Appender(log, fsync=opts.fsync))
                tl.fetch = _fetcher(conn, tl)
                logs.append(tl)
            if new_slot is not None and opts.snapshot != "never":
                _snapshot(server, new_slot, logs, stats, say)
            stopflag.install()
            rconn = new_slot.conn if new_slot is not None else server.connect_replication()
            delay, since = RECONNECT_FIRST, float("-inf")
            try:
                while True:
                    try:
                        _stream(server, conn, rconn, slot, logs, opts.follow, stats)
                        break
                    except srv.ConnectionLost as lost:
                        # without --follow the next (cron) run continues; a misconfiguration ends either
                        if not opts.follow or not lost.transient:
                            raise
                        _close_quietly(rconn)
                        # lost again soon after reconnecting (a server that keeps failing): keep backing off
                        delay = min(delay * 2, RECONNECT_MAX) if time.monotonic() - since < RECONNECT_MAX \
                            else RECONNECT_FIRST
                        got = _reconnect(server, slot, lost.reason, say, delay)
                        if got is None:  # stopped while waiting: every change received is in the log
                            stopflag.end()
                            break
                        _close_quietly(conn)
                        conn, rconn, delay = got
                        since = time.monotonic()
                        for tl in logs:
                            tl.load_resume()  # the stream starts again at the slot: skip what the log holds
                            tl.fetch = _fetcher(conn, tl)
            finally:
                _close_quietly(rconn)
        finally:
            for tl in logs:
                tl.appender.close()
                stats.per_log[tl.log.path] = tl.appended
                stats.skipped += tl.skipped
        return stats
    finally:
        conn.close()


def _holds_records(log: Log) -> bool:
    return any(reader.partition_info(log, p).next_offset > 0 for p in range(log.partitions))


def _table_set(names: Any) -> str:
    return "the tables " + ", ".join(sorted(names))


def _close_quietly(conn: Any) -> None:
    try:
        conn.close()
    except Exception:  # a connection the server already dropped
        pass


def _reconnect(server: srv.Server, slot: str, reason: str, say: Callable[[str], None],
               delay: float = RECONNECT_FIRST) -> tuple[Any, Any, float] | None:
    """Connect again after a transient loss, waiting RECONNECT_FIRST, doubled after each failed try up
    to RECONNECT_MAX (as Debezium's connector retries): (connection, replication connection), or None
    when a stop signal came first; with the wait last used. Each try is reported on stderr. The checks of a first run are made
    again, so a server that comes back misconfigured (wal_level, the privilege, the slot dropped)
    ends capture with that one line."""
    tries = 0
    say(f"lost the connection to {server.shown}: {reason}; every change before it is in the log; "
        f"reconnecting in {delay:g}s")
    while True:
        if stopflag.wait(delay):
            return None
        tries += 1
        conn = rconn = None
        try:
            conn = server.connect(timeout=10)
            try:
                srv.check_server(conn, server.shown)
                info = srv.slot_exists(conn, slot)
            except server.pg.Error as e:  # the server went away again between two queries
                raise srv.ConnectionLost(f"{server.shown}: {srv._reason(e)}", srv._reason(e),
                                         srv.is_transient(e)) from None
            if info is None:
                raise StreamctlError(f"{server.shown}: replication slot {slot} is gone (dropped while capture was "
                                     "away): rerun capture to read the tables again")
            if info["active_pid"] is not None:
                # the server side of a cut connection holds the slot until it notices (wal_sender_timeout)
                held = f"slot {slot} still held by server process {info['active_pid']}"
                raise srv.ConnectionLost(f"{server.shown}: {held}", held, True)
            rconn = server.connect_replication()
        except srv.ConnectionLost as e:
            for c in (conn, rconn):
                if c is not None:
                    _close_quietly(c)
            if not e.transient:
                raise
            delay = min(delay * 2, RECONNECT_MAX)
            say(f"reconnect {tries} to {server.shown} failed: {e.reason}; next try in {delay:g}s")
            continue
        except Exception:
            if conn is not None:
                _close_quietly(conn)
            raise
        say(f"reconnected to {server.shown} (try {tries}); streaming from slot {slot} again")
        return conn, rconn, delay


def _fetcher(conn: Any, tl: TableLog) -> Callable[[list, list[str]], dict | None]:
    def fetch(key_texts: list, columns: list[str]) -> dict | None:
        t = tl.table
        ident = srv.ident
        # the key's texts as the server sent them, read back as the column's type (`= 'ab  '`: an
        # untyped literal), not compared as text (char(n)'s ::text drops the padding its output keeps)
        where = " and ".join(f"{ident(t.columns[i])} = %s" for i in tl.key_idx)
        rows = srv.query(conn, f"select {', '.join(ident(c) + '::text' for c in columns)} from "
                               f"{ident(t.schema)}.{ident(t.name)} where {where}", tuple(key_texts))
        if not rows:
            return None
        convs = {c: t.convs[t.columns.index(c)] for c in columns}
        return {c: None if v is None else convs[c](v) for c, v in zip(columns, rows[0], strict=True)}

    return fetch


def _snapshot(server: srv.Server, new_slot: srv.NewSlot, logs: list[TableLog], stats: CaptureStats,
              say: Callable[[str], None]) -> None:
    for tl in logs:
        stats.snapshot_rows += _snapshot_table(server, new_slot, tl)
        tl.log = write_state(tl.log, {**(capture_state(tl.log) or {}), "snapshot": "done"})
        say(f"{tl.log.path}: snapshot of {tl.table.qualified} as of "
            f"{pgoutput.lsn_text(new_slot.consistent_point)}: {tl.appended} records")


def _snapshot_table(server: srv.Server, new_slot: srv.NewSlot, tl: TableLog) -> int:
    """Every row of tl's table in the slot's snapshot; a log that already holds records is resynced."""
    has_records = _holds_records(tl.log)
    known = tl.live_keys(1 << 64) if has_records else None
    info = tl.table
    headers = [b""]
    snapshot_txid = [0]

    def start(txid: int) -> None:
        snapshot_txid[0] = txid
        headers[0] = _headers("r", new_slot.consistent_point, txid)

    plan = srv.fast_plan(info)

    def rows(lines: list) -> None:
        if plan is not None:
            tl.snapshot_fast(lines, headers[0], plan.kinds, known, plan.mend)
        else:
            tl.snapshot_rows(lines, headers[0], info.convs, info.columns, known)
        if tl.pending_count() >= FLUSH_RECORDS:
            tl.flush()

    n = srv.read_snapshot(server, new_slot.snapshot_name, info, start, rows, plan.sql if plan else None)
    if known:
        # keys the log holds that the table no longer has: deleted while no slot was kept; the deletes
        # themselves are not known, so the tombstone carries the snapshot's point and the id of the
        # transaction that read it and found the keys gone (as the snapshot's rows do)
        dh = _headers("d", new_slot.consistent_point, snapshot_txid[0])
        for key in sorted(known):
            tl.pending.setdefault(tl.part(key), []).append((orjson.dumps(key), b"null", dh))
            tl.queued += 1
    tl.flush()
    return n


def _stream(server: srv.Server, conn: Any, rconn: Any, slot: str, logs: list[TableLog], follow: bool,
            stats: CaptureStats) -> None:
    pg = server.pg
    by_name = {tl.table.qualified: tl for tl in logs}
    by_relid: dict[int, TableLog] = {}
    target = None if follow else srv.current_wal_lsn(conn)
    cur = rconn.cursor()
    try:
        cur.start_replication(slot_name=slot, decode=False, status_interval=5,
                              options={"proto_version": "1", "publication_names": slot})
    except pg.Error as e:
        raise srv.ConnectionLost(f"{server.shown}: cannot start streaming from slot {slot}: {srv._reason(e)}",
                                 srv._reason(e), srv.is_transient(e)) from None
    in_txn = False
    lsn = 0
    txid = 0
    hc: bytes | None = None  # the open commit's headers for an insert, made at its first
    changes, commits, commit_lsn = stats.changes, stats.commits, stats.lsn  # a reconnected stream adds to them
    done_lsn = 0  # end of the last commit whose records are all queued
    confirmed = 0
    last_ask = 0.0
    last_flush = time.monotonic()

    def flush_all() -> None:
        nonlocal last_flush
        for tl in logs:
            stats.records += tl.flush()
        stats.changes, stats.commits, stats.lsn = changes, commits, commit_lsn
        last_flush = time.monotonic()

    def confirm() -> None:
        nonlocal confirmed
        if done_lsn > confirmed:
            # force: psycopg2 otherwise holds feedback until its status interval
            cur.send_feedback(write_lsn=done_lsn, flush_lsn=done_lsn, apply_lsn=done_lsn, force=True)
            confirmed = done_lsn

    try:
        while True:
            msg = cur.read_message()
            if msg is None:
                # more on its way (a busy stream): keep reading, write in bigger batches
                if select.select([rconn], [], [], 0.002)[0]:
                    continue
                if not in_txn:
                    flush_all()
                    confirm()
                    if stopflag.is_set():
                        break
                    if target is not None and cur.wal_end >= target:
                        break
                now = time.monotonic()
                if target is not None and now - last_ask > 0.1:
                    cur.send_feedback(reply=True)  # a keepalive back tells how far the server has sent
                    last_ask = now
                select.select([rconn], [], [], 0.1)
                continue
            buf = msg.payload
            kind = buf[0]
            # the messages of small transactions (B, I..., C) are read by their kind byte, without a
            # message object; every other kind goes through pgoutput.decode below
            if kind == 0x49:  # Insert
                relid, new = pgoutput.insert(buf)
                tl = by_relid.get(relid)
                if tl is None:
                    continue
                if hc is None:
                    hc = _headers("c", lsn, txid)
                tl.insert(new, lsn, hc)
                changes += 1
                if tl.queued >= FLUSH_RECORDS:
                    tl.flush()
                continue
            if kind == 0x42:  # Begin
                lsn, txid = pgoutput.begin(buf)
                in_txn, hc = True, None
                for tl in logs:
                    tl.txn_keys.clear()
                continue
            if kind == 0x43:  # Commit
                commit_lsn, done_lsn = pgoutput.commit(buf)
                in_txn = False
                commits += 1
                ending = stopflag.is_set() or (target is not None and commit_lsn >= target)
                # under a steady stream the idle path above never runs: write (and confirm) at least
                # every FLUSH_SECONDS, so a change is in the log within a second
                if ending or time.monotonic() - last_flush >= FLUSH_SECONDS or \
                        sum(tl.queued for tl in logs) >= FLUSH_RECORDS:
                    flush_all()
                    confirm()
                if ending:
                    break
                continue
            m = pgoutput.decode(buf)
            if isinstance(m, pgoutput.Change):
                tl = by_relid.get(m.relid)
                if tl is None:
                    continue
                tl.change(m.op, m.new, m.old, lsn, txid, flush_all)
                changes += 1
                if tl.pending_count() >= FLUSH_RECORDS:
                    tl.flush()
            elif isinstance(m, pgoutput.Relation):
                tl = by_name.get(f"{m.schema}.{m.name}")
                if tl is None:
                    continue
                by_relid[m.relid] = tl
                names = [c.name for c in m.columns]
                key = tl.table.key if all(k in names for k in tl.table.key) else [c.name for c in m.columns if c.key]
                tl.table.columns, tl.table.types = names, [c.type_oid for c in m.columns]
                tl.table.convs = srv.converters(conn, tl.table.types)
                tl.set_columns(names, key)
            elif isinstance(m, pgoutput.Truncate):
                for relid in m.relids:
                    tl = by_relid.get(relid)
                    if tl is not None:
                        tl.truncate(lsn, txid, flush_all)
    except pg.Error as e:
        flush_all()  # a commit cut short is completed by the rerun (the log counts what it holds of it)
        reason = srv._reason(e)
        if "no COPY in progress" in reason:  # libpq's word for a stream whose connection the server closed
            reason = "the server closed the connection"
        raise srv.ConnectionLost(f"{server.shown}: lost the replication connection: {reason} (the log holds "
                                 "every change up to the last commit; rerun capture to continue)",
                                 reason, srv.is_transient(e)) from None
    flush_all()
    try:
        confirm()
        _confirmed(conn, slot, confirmed)
    except pg.Error as e:  # every change received is in the log; the next stream confirms it
        raise srv.ConnectionLost(f"{server.shown}: lost the connection while confirming the slot: {srv._reason(e)} "
                                 "(the log holds every change received)", srv._reason(e), srv.is_transient(e)) from None
    stopflag.end()


def _confirmed(conn: Any, slot: str, lsn: int, timeout: float = 5.0) -> None:
    """Wait (a little) until the server has taken the last confirmation, so the next run starts after it
    (the feedback message is asynchronous; a rerun would otherwise receive those commits again and
    skip them, which is correct but slow)."""
    if not lsn:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = srv.query(conn, "select confirmed_flush_lsn::text from pg_replication_slots where slot_name = %s",
                         (slot,))
        if not rows or rows[0][0] is None or pgoutput.parse_lsn(rows[0][0]) >= lsn:
            return
        time.sleep(0.01)
