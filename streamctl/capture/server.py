"""The PostgreSQL side of capture: connections, the setup checks, the slot, the snapshot and the stream.

psycopg2 is used for its replication protocol support (psycopg 3 has none); it is
imported only here and by dsn.py, so only capture (and stat of a captured log) need it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from streamctl.capture import dsn as dsnmod
from streamctl.capture.values import INT_VECTORS, SESSION_OPTIONS, Converter, converter
from streamctl.errors import StreamctlError, UsageError


class SetupError(StreamctlError):
    """A misconfiguration found before anything was written (exit 1)."""


@dataclass
class TableInfo:
    schema: str
    name: str
    oid: int
    columns: list[str]
    types: list[int]
    key: list[str]  # primary key columns, in the key's order
    convs: list[Converter] = field(default_factory=list)

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"


def _import_psycopg2() -> Any:
    try:
        import psycopg2
        import psycopg2.extras  # noqa: F401  (the replication connection class)
    except ImportError:
        raise SetupError("capture needs psycopg2: pip install 'streamctl[capture]' (or psycopg2-binary)") from None
    return psycopg2


class ConnectionLost(StreamctlError):
    """The server could not be reached, or a connection to it ended: `transient` when another try may
    work (the server restarting, a network cut), False for a misconfiguration (a refused login, a
    missing slot or database), which no retry mends."""

    def __init__(self, message: str, reason: str, transient: bool) -> None:
        super().__init__(message)
        self.reason = reason
        self.transient = transient


# SQLSTATE classes and codes that a retry can outlast: 08 connection exception, 57 operator
# intervention (admin shutdown, crash shutdown, "the database system is starting up"), 53
# insufficient resources (too many connections), 55006 object in use (the slot still held by the
# server side of a connection that was cut: it ends at wal_sender_timeout)
_TRANSIENT_CLASSES = ("08", "57", "53")
_TRANSIENT_CODES = ("55006",)
# a connection refused for one of these reasons stays refused: the login, pg_hba.conf, a name
_FATAL_WORDS = ("authentication", "password", "pg_hba.conf", "does not exist", "permission denied",
                "must be superuser", "replication slot", "wal_level", "invalid connection option")


def is_transient(e: Exception) -> bool:
    """Whether a psycopg2 error is a lost connection or a server restarting (reconnect), not a
    misconfiguration (exit with its one line)."""
    code = getattr(e, "pgcode", None)
    if code:
        return code[:2] in _TRANSIENT_CLASSES or code in _TRANSIENT_CODES
    text = str(e).lower()
    return not any(w in text for w in _FATAL_WORDS)


def _reason(e: Exception) -> str:
    text = str(e).strip() or type(e).__name__
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return dsnmod.redact("; ".join(lines[:2]))


class Server:
    def __init__(self, dsn: str) -> None:
        self.params = dsnmod.parse(dsn)
        self.shown = dsnmod.shown(self.params)
        self.pg = _import_psycopg2()

    def _kwargs(self, replication: bool = False) -> dict[str, str]:
        kw = dict(self.params)
        kw["options"] = (kw.get("options", "") + " " + SESSION_OPTIONS).strip()
        kw.setdefault("application_name", "streamctl capture")
        if replication:
            kw["replication"] = "database"
        return kw

    def connect(self, timeout: int | None = None) -> Any:
        kw = self._kwargs()
        if timeout is not None:
            kw["connect_timeout"] = str(timeout)
        try:
            conn = self.pg.connect(**kw)
        except self.pg.Error as e:
            raise ConnectionLost(f"cannot connect to {self.shown}: {_reason(e)}", _reason(e), is_transient(e)) from None
        conn.autocommit = True
        return conn

    def connect_replication(self) -> Any:
        from psycopg2.extras import LogicalReplicationConnection

        try:
            return self.pg.connect(connection_factory=LogicalReplicationConnection, **self._kwargs(True))
        except self.pg.Error as e:
            msg = _reason(e)
            if "replication" in msg and ("pg_hba" in msg or "permission" in msg or "privilege" in msg):
                raise SetupError(f"{self.shown}: the server refused a replication connection: {msg}") from None
            raise ConnectionLost(f"cannot open a replication connection to {self.shown}: {msg}", msg,
                                 is_transient(e)) from None


def ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def query(conn: Any, sql: str, args: tuple | None = None) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchall() if cur.description is not None else []


def check_server(conn: Any, shown: str) -> None:
    """wal_level and the replication privilege: the two settings every capture needs."""
    (version,) = query(conn, "select current_setting('server_version_num')::int")[0]
    if version < 120000:
        raise SetupError(f"{shown}: PostgreSQL {version // 10000} is too old: capture needs PostgreSQL 12 or later")
    (level,) = query(conn, "show wal_level")[0]
    if level != "logical":
        raise SetupError(f"{shown}: wal_level is {level!r}, capture needs wal_level = logical "
                         "(set it in postgresql.conf and restart the server)")
    (can,) = query(conn, "select rolreplication or rolsuper from pg_roles where rolname = current_user")[0]
    if not can:
        (user,) = query(conn, "select current_user")[0]
        raise SetupError(f"{shown}: role {user!r} lacks the REPLICATION privilege "
                         f"(ALTER ROLE {user} REPLICATION)")
    (slots,) = query(conn, "select current_setting('max_replication_slots')::int")[0]
    if slots == 0:
        raise SetupError(f"{shown}: max_replication_slots is 0, capture needs a replication slot "
                         "(set it in postgresql.conf and restart the server)")


def split_table(name: str) -> tuple[str, str]:
    """`[SCHEMA.]TABLE` -> (schema, table), each as given: a double-quoted part keeps its quotes (and
    any dot in it: `"dot.ted"`, `"my.s"."t"`), an unquoted one is folded by _folded."""
    parts: list[str] = []
    i, n = 0, len(name)
    while True:
        start = i
        if i < n and name[i] == '"':
            i += 1
            while i < n and not (name[i] == '"' and name[i + 1:i + 2] != '"'):
                i += 2 if name[i] == '"' else 1  # "" is a quote inside the name
            if i >= n:
                raise UsageError(f"--table {name!r}: a quoted name has no closing quote")
            i += 1
        else:
            while i < n and name[i] not in '."':
                i += 1
        parts.append(name[start:i])
        if i >= n:
            break
        if name[i] != ".":
            raise UsageError(f"--table {name!r}: expected [SCHEMA.]TABLE")
        i += 1
    if len(parts) > 2 or any(not p or p == '""' for p in parts):
        raise UsageError(f"--table {name!r}: expected [SCHEMA.]TABLE")
    return ("public", parts[0]) if len(parts) == 1 else (parts[0], parts[1])


def _folded(ident: str) -> str:
    if len(ident) >= 2 and ident[0] == '"' and ident[-1] == '"':
        return ident[1:-1].replace('""', '"')
    return ident.lower()


def table_info(conn: Any, name: str, shown: str) -> TableInfo:
    schema, table = split_table(name)
    schema, table = _folded(schema), _folded(table)
    rows = query(conn, "select c.oid, c.relkind from pg_class c join pg_namespace n on n.oid = c.relnamespace "
                       "where n.nspname = %s and c.relname = %s", (schema, table))
    if not rows or rows[0][1] not in ("r", "p"):
        what = "no such table" if not rows else "not a table"
        raise SetupError(f"{shown}: table {schema}.{table}: {what}")
    oid, kind = rows[0]
    if kind == "p":
        (version,) = query(conn, "select current_setting('server_version_num')::int")[0]
        if version < 130000:
            # pgoutput names a partitioned table's changes by its leaf partitions before 13
            # (publish_via_partition_root): they could not be told as the table's
            raise SetupError(f"{shown}: table {schema}.{table} is partitioned: capturing it needs PostgreSQL 13 "
                             "or later (publish_via_partition_root)")
    # generated columns left out: logical replication never sends them, so a snapshot row holding
    # them would differ from the same row's changes
    cols = query(conn, "select attname, atttypid from pg_attribute where attrelid = %s and attnum > 0 "
                       "and not attisdropped and attgenerated = '' order by attnum", (oid,))
    key = [r[0] for r in query(
        conn, "select a.attname from pg_index i join pg_attribute a on a.attrelid = i.indrelid "
              "and a.attnum = any(i.indkey) where i.indrelid = %s and i.indisprimary "
              "order by array_position(i.indkey::int2[], a.attnum)", (oid,))]
    if not key:
        raise SetupError(f"{shown}: table {schema}.{table} has no primary key "
                         "(capture keys each record by the primary key; add one)")
    generated = [k for k in key if k not in [c[0] for c in cols]]
    if generated:
        raise SetupError(f"{shown}: table {schema}.{table}: primary key column {generated[0]} is generated "
                         "(logical replication does not send generated columns)")
    for rel in [oid] + ([r[0] for r in query(conn, "select relid::oid from pg_partition_tree(%s) where isleaf",
                                             (oid,))] if kind == "p" else []):
        setting = _replica_identity_problem(conn, rel)
        if setting is not None:
            part = "" if rel == oid else f" (its partition {query(conn, 'select %s::regclass::text', (rel,))[0][0]})"
            raise SetupError(f"{shown}: table {schema}.{table}{part} has REPLICA IDENTITY {setting}: capture keys "
                             "each update and delete by the old row's primary key "
                             "(ALTER TABLE ... REPLICA IDENTITY DEFAULT)")
    (readable,) = query(conn, "select has_table_privilege(%s, 'SELECT')", (oid,))[0]
    if not readable:
        raise SetupError(f"{shown}: table {schema}.{table}: the role lacks the SELECT privilege")
    info = TableInfo(schema, table, oid, [c[0] for c in cols], [c[1] for c in cols], key)
    info.convs = converters(conn, info.types)
    return info


def _replica_identity_problem(conn: Any, oid: int) -> str | None:
    """The table's replica identity when it does not give the old primary key of an update or delete
    (USING INDEX on another index, NOTHING); None for DEFAULT (the primary key) or FULL."""
    (ident_kind,) = query(conn, "select relreplident from pg_class where oid = %s", (oid,))[0]
    if ident_kind == "n":
        return "NOTHING"
    if ident_kind == "i":
        rows = query(conn, "select i.indexrelid::regclass::text, i.indisprimary from pg_index i "
                           "where i.indrelid = %s and i.indisreplident", (oid,))
        if rows and not rows[0][1]:
            return f"USING INDEX {rows[0][0]}"
    return None


_type_cache: dict[int, tuple[int, int, str]] = {}  # type oid -> (base type, array element's base type or 0, delimiter)

# each type -> its base type (through domains over domains), the base's category, element type and
# the element's delimiter
_BASES = """with recursive r(oid, cur) as (
    select t.oid, t.oid from pg_type t where t.oid = any(%s)
    union all
    select r.oid, t.typbasetype from r join pg_type t on t.oid = r.cur where t.typtype = 'd')
select r.oid, b.oid, b.typcategory, b.typelem, coalesce(e.typdelim, ',') from r
join pg_type b on b.oid = r.cur and b.typtype <> 'd' left join pg_type e on e.oid = b.typelem"""


def converters(conn: Any, types: list[int]) -> list[Converter]:
    """Each column's converter: a domain converts as its base type, an array type element by element
    (an element of a domain type as the domain's base type)."""
    missing = [t for t in set(types) if t not in _type_cache]
    if missing:
        found = {r[0]: r[1:] for r in query(conn, _BASES, (missing,))}
        # int2vector and oidvector have an element type but no array literal (values.to_int_vector)
        elems = {elem for base, category, elem, _ in found.values() if category == "A" and base not in INT_VECTORS}
        elem_bases = {r[0]: r[1] for r in query(conn, _BASES, (list(elems),))} if elems else {}
        for oid, (base, category, elem, delim) in found.items():
            array = category == "A" and base not in INT_VECTORS
            _type_cache[oid] = (base, elem_bases.get(elem, elem) if array else 0, delim)
    out = []
    for t in types:
        base, elem, delim = _type_cache.get(t, (t, 0, ","))
        out.append(converter(base, elem or None, delim))
    return out


def current_wal_lsn(conn: Any) -> int:
    """Where the WAL ends now: every commit made before is at or before it. The insert position,
    not pg_current_wal_lsn() (the write position), which an asynchronous commit may still be past."""
    from streamctl.capture.pgoutput import parse_lsn

    return parse_lsn(query(conn, "select pg_current_wal_insert_lsn()::text")[0][0])


def slot_exists(conn: Any, slot: str) -> dict | None:
    rows = query(conn, "select plugin, database, active_pid, confirmed_flush_lsn::text from pg_replication_slots "
                       "where slot_name = %s", (slot,))
    if not rows:
        return None
    plugin, database, pid, confirmed = rows[0]
    return {"plugin": plugin, "database": database, "active_pid": pid, "confirmed": confirmed}


def drop_slot(conn: Any, slot: str, shown: str) -> bool:
    """Drop the slot (and its publication); False when there was none."""
    info = slot_exists(conn, slot)
    if info is not None:
        if info["active_pid"] is not None:
            raise StreamctlError(f"{shown}: slot {slot} is in use by process {info['active_pid']} "
                                 "(stop the capture that reads it first)")
        try:
            query(conn, "select pg_drop_replication_slot(%s)", (slot,))
        except Exception as e:
            raise StreamctlError(f"{shown}: cannot drop slot {slot}: {_reason(e)}") from None
    query(conn, f'drop publication if exists "{slot}"')
    return info is not None


def publication_tables(conn: Any, pub: str) -> dict[int, str] | None:
    """The tables the publication names (oid -> SCHEMA.TABLE), or None when there is no such publication."""
    if not query(conn, "select 1 from pg_publication where pubname = %s", (pub,)):
        return None
    rows = query(conn, "select c.oid, n.nspname || '.' || c.relname from pg_publication p "
                       "join pg_publication_rel r on r.prpubid = p.oid join pg_class c on c.oid = r.prrelid "
                       "join pg_namespace n on n.oid = c.relnamespace where p.pubname = %s", (pub,))
    return {int(oid): name for oid, name in rows}


def ensure_publication(conn: Any, pub: str, tables: list[TableInfo], shown: str) -> bool:
    """The publication pgoutput reads (one per slot, named like it), holding exactly the captured tables;
    True when this call created it."""
    names = ", ".join(f"{ident(t.schema)}.{ident(t.name)}" for t in tables)
    try:
        # a partitioned table's changes under its own name and key, not its partitions' (13 and later;
        # table_info refuses a partitioned table on 12)
        (version,) = query(conn, "select current_setting('server_version_num')::int")[0]
        via_root = version >= 130000
        exists = query(conn, "select 1 from pg_publication where pubname = %s", (pub,))
        if exists:
            query(conn, f'alter publication "{pub}" set table {names}')
            if via_root:
                query(conn, f'alter publication "{pub}" set (publish_via_partition_root = true)')
            return False
        query(conn, f'create publication "{pub}" for table {names}'
                    + (" with (publish_via_partition_root = true)" if via_root else ""))
        return True
    except Exception as e:
        raise SetupError(f"{shown}: cannot create publication {pub} for the captured tables: {_reason(e)} "
                         "(the role must own the tables, or be a superuser)") from None


@dataclass
class NewSlot:
    conn: Any  # the replication connection, kept open while the snapshot is read
    consistent_point: int
    snapshot_name: str


def create_slot(server: Server, slot: str) -> NewSlot:
    from streamctl.capture.pgoutput import parse_lsn

    conn = server.connect_replication()
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE_REPLICATION_SLOT {slot} LOGICAL pgoutput EXPORT_SNAPSHOT")
            _, point, snap, _ = cur.fetchone()
    except server.pg.Error as e:
        conn.close()
        raise StreamctlError(f"{server.shown}: cannot create replication slot {slot}: {_reason(e)}") from None
    return NewSlot(conn, parse_lsn(point), snap)


class FastPlan(NamedTuple):
    sql: str  # the SELECT giving each row's key column texts and its JSON
    kinds: list[str]  # each key column's kind (values.fast_key_kind)
    mend: Callable[[bytes], bytes] | None  # the row JSON's json columns as the converters write them


def fast_plan(table: TableInfo) -> FastPlan | None:
    """The snapshot's fast lane for this table (values.fast_expr); None when a column has no fast form."""
    from streamctl.capture.values import JSON, JSONB, _ident, fast_expr, fast_key_kind, row_mender

    bases = [_type_cache.get(t, (t, 0, ","))[0] for t in table.types]
    exprs = [fast_expr(t, c) for t, c in zip(bases, table.columns, strict=True)]
    kinds = [fast_key_kind(bases[table.columns.index(k)]) for k in table.key]
    if any(e is None for e in exprs) or any(k is None for k in kinds):
        return None
    inner = ", ".join(f"{e} as {_ident(c)}" for e, c in zip(exprs, table.columns, strict=True))
    # the row's alias must not name a column (row_to_json(x) would take the column x)
    alias = "_streamctl_row_"
    while alias in table.columns:
        alias += "_"
    keys = ", ".join(_key_text(f"{alias}.{_ident(k)}", bases[table.columns.index(k)]) for k in table.key)
    sql = (f'select {keys}, row_to_json({alias})::text from (select {inner} from {ident(table.schema)}.{ident(table.name)}) '
           f"{alias}")
    json_columns = {c: b for c, b in zip(table.columns, bases, strict=True) if b in (JSON, JSONB)}
    return FastPlan(sql, [k for k in kinds if k is not None], row_mender(json_columns))


def _key_text(column: str, base: int) -> str:
    """The SQL giving a key column's text as the stream sends it (its type's output)."""
    from streamctl.capture.values import BPCHAR, NUMERIC

    if base == NUMERIC:  # to_json's value in the row (fast_expr): its scalar's text, a string's unquoted
        return f"{column} #>> '{{}}'"
    if base == BPCHAR:  # ::text drops char(n)'s padding, which its output (and the value) keeps
        return f"concat({column})"
    return f"{column}::text"


def read_snapshot(server: Server, snapshot_name: str, table: TableInfo, start: Callable[[int], None],
                  rows: Callable[[list], None], select: str | None = None, batch: int = 20_000) -> int:
    """Every row of the table as of the exported snapshot, handed over in batches.

    Without `select`: COPY text lines of every column as the table has it (the converters' lane).
    With `select` (the fast lane's query): tuples of its columns as bytes, read through a
    server-side cursor, many rows a round trip (no COPY escapes, no per-row callback).
    """
    conn = server.connect()
    conn.autocommit = False
    got = 0
    try:
        with conn.cursor() as cur:
            cur.execute("set transaction isolation level repeatable read, read only")
            cur.execute("set transaction snapshot %s", (snapshot_name,))
            # the snapshot rows' txid: this reading transaction's own, so it is never the txid of a
            # change (the snapshot's xmin is the id the next writing transaction gets, when none runs)
            cur.execute("select txid_current()")
            start(int(cur.fetchone()[0]))
        if select is not None:
            from psycopg2.extensions import BYTES, register_type

            with conn.cursor(name="streamctl_snapshot") as named:
                register_type(BYTES, named)
                named.itersize = batch
                named.execute(select)
                while True:
                    chunk = named.fetchmany(batch)
                    if not chunk:
                        break
                    got += len(chunk)
                    rows(chunk)
        else:
            cols = ", ".join('"' + c.replace('"', '""') + '"' for c in table.columns)
            pending: list[bytes] = []

            class Sink:
                def write(self, data: bytes | str) -> int:
                    nonlocal got
                    if isinstance(data, str):
                        data = data.encode()
                    pending.append(data)
                    if len(pending) >= batch:
                        got += len(pending)
                        rows(pending[:])
                        pending.clear()
                    return len(data)

            with conn.cursor() as cur:
                cur.copy_expert(f"copy (select {cols} from {ident(table.schema)}.{ident(table.name)}) to stdout", Sink(),
                                size=1 << 18)
            if pending:
                got += len(pending)
                rows(pending[:])
        conn.commit()
    except server.pg.Error as e:
        raise StreamctlError(f"{server.shown}: reading the snapshot of {table.qualified} failed: {_reason(e)}") from None
    finally:
        conn.close()
    return got
