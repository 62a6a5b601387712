"""pgoutput's logical replication messages (protocol version 1), decoded.

Reference: PostgreSQL's "Logical Replication Message Formats". Only what capture uses is
kept: transaction bounds, relations (the column list and types, sent before a relation's
first change and again after its schema changed), row changes and TRUNCATE.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from streamctl.errors import StreamctlError

UNCHANGED = object()  # 'u': a TOASTed column an update did not change (its value is not sent)

_I16 = struct.Struct("!h")
_I32 = struct.Struct("!i")
_U32 = struct.Struct("!I")
_U64 = struct.Struct("!Q")


@dataclass
class Column:
    name: str
    type_oid: int
    key: bool


@dataclass
class Relation:
    relid: int
    schema: str
    name: str
    columns: list[Column]


@dataclass
class Change:
    op: str  # c u d
    relid: int
    new: list | None  # column texts (None = NULL, UNCHANGED) of the new row
    old: list | None  # the old key ('K') or old row ('O'), when sent


@dataclass
class Truncate:
    relids: list[int]


Message = Relation | Change | Truncate | None


def lsn_text(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    hi, _, lo = text.partition("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def _string(buf: bytes, pos: int) -> tuple[str, int]:
    end = buf.index(b"\0", pos)
    return buf[pos:end].decode(), end + 1


def _tuple(buf: bytes, pos: int) -> tuple[list, int]:
    # runs per change: bound methods in locals, the column count (an Int16 below 1600) read directly
    n = (buf[pos] << 8) | buf[pos + 1]
    pos += 2
    cols: list = []
    add = cols.append
    i32 = _I32.unpack_from
    for _ in range(n):
        kind = buf[pos]
        if kind == 0x74:  # 't'
            ln = i32(buf, pos + 1)[0]
            pos += 5
            add(buf[pos:pos + ln].decode())
            pos += ln
        elif kind == 0x6E:  # 'n'
            add(None)
            pos += 1
        elif kind == 0x75:  # 'u'
            add(UNCHANGED)
            pos += 1
        else:
            raise StreamctlError(f"pgoutput: unexpected tuple column kind {chr(kind)!r}")
    return cols, pos


# The three messages of a small transaction, read without building a message object (the
# stream's loop calls these by the kind byte; decode() below reads every other kind).

def begin(buf: bytes) -> tuple[int, int]:
    """'B' -> (final LSN, xid)."""
    return _U64.unpack_from(buf, 1)[0], _U32.unpack_from(buf, 17)[0]


def commit(buf: bytes) -> tuple[int, int]:
    """'C' -> (commit LSN, end LSN)."""
    return _U64.unpack_from(buf, 2)[0], _U64.unpack_from(buf, 10)[0]


def insert(buf: bytes) -> tuple[int, list]:
    """'I' -> (relation id, the new row's column texts)."""
    return _U32.unpack_from(buf, 1)[0], _tuple(buf, 6)[0]  # after the 'N'


def decode(buf: bytes) -> Message:
    """A message other than B, I's fast read and C (begin(), insert(), commit() read those)."""
    kind = buf[0]
    if kind in (0x42, 0x43):  # B, C
        raise StreamctlError(f"pgoutput: {chr(kind)!r} is read by begin()/commit(), not decode()")
    if kind == 0x52:  # R
        (relid,) = _U32.unpack_from(buf, 1)
        schema, pos = _string(buf, 5)
        name, pos = _string(buf, pos)
        pos += 1  # replica identity setting
        (ncols,) = _I16.unpack_from(buf, pos)
        pos += 2
        cols = []
        for _ in range(ncols):
            flags = buf[pos]
            cname, pos = _string(buf, pos + 1)
            (typ,) = _U32.unpack_from(buf, pos)
            pos += 8  # type oid, type modifier
            cols.append(Column(cname, typ, bool(flags & 1)))
        return Relation(relid, schema, name, cols)
    if kind == 0x49:  # I
        relid, new = insert(buf)
        return Change("c", relid, new, None)
    if kind == 0x55:  # U
        (relid,) = _U32.unpack_from(buf, 1)
        pos = 5
        old = None
        if buf[pos] in (0x4B, 0x4F):  # K, O
            old, pos = _tuple(buf, pos + 1)
        new, _ = _tuple(buf, pos + 1)
        return Change("u", relid, new, old)
    if kind == 0x44:  # D
        (relid,) = _U32.unpack_from(buf, 1)
        old, _ = _tuple(buf, 6)
        return Change("d", relid, None, old)
    if kind == 0x54:  # T
        (n,) = _I32.unpack_from(buf, 1)
        return Truncate([_U32.unpack_from(buf, 6 + 4 * i)[0] for i in range(n)])
    return None  # Origin, Type, Message: nothing capture writes
