"""A log's lines read for a few fields only, as columns.

window and join need three or four fields of each record (its ts or a value's
time field, the key, an amount), but orjson builds every string and number of
every line: on the bench's 275-byte events that full parse is most of a
tumbling window's run. msgspec decodes each line against a schema of the
envelope plus the value fields a run asks for: the whole line is still checked
as JSON (a damaged line fails here exactly where orjson fails), but Python
objects are made only for the fields in the schema.

The fast read is all or nothing for a piece of a segment. Whenever a line is
not what the schema expects (a value that is not an object, a ts that is not
a non-negative integer, invalid UTF-8, which msgspec does not check inside
skipped strings) or a column holds something orjson would read differently
(integers beyond 64 bits, which orjson turns into floats) or that the columns'
users would need in full (objects and arrays), `read_piece` returns None and
the caller reads the piece as full records, the one reference path, which also
names a corrupt line's file and byte.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from operator import attrgetter
from typing import Annotated, Any

import msgspec

from streamctl.storage import fieldpaths

FieldPath = tuple[str, ...]

_U64 = (1 << 64) - 1
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
# orjson reads integers in [-2**63, 2**64 - 1] as int and anything larger as a float, while msgspec
# reads any integer as int: the envelope's ints are bounded to int64 (all msgspec can bound), and a
# line beyond that goes to the full read
_Offset = Annotated[int, msgspec.Meta(ge=0, le=_I64_MAX)]
_Int = Annotated[int, msgspec.Meta(ge=_I64_MIN, le=_I64_MAX)]
_SCALARS = frozenset({str, int, float, bool, type(None)})
# a leaf field: what orjson reads as such a scalar; anything else (an array, an object, an int
# beyond int64, a number beyond a float) fails the piece's decoding, and the piece is read in full
_Scalar = _Int | float | str | bool | None
_ENVELOPE = (("ts",), ("key",))
_VALUE = attrgetter("value")


def readable(paths: Sequence[FieldPath], plain: bool = False) -> bool:
    """Whether every path is one the fast read can give as a column: a field of the value at any
    depth (`value.a`, `value.a.b`), or in a log (not `plain`) the envelope's ts or key."""
    return all((p in _ENVELOPE and not plain) or (len(p) >= 2 and p[0] == "value" and all(map(_name_ok, p[1:])))
               for p in paths)


def _name_ok(name: str) -> bool:
    # msgspec refuses field names with a quote, a backslash or a control character; a segment that
    # indexes arrays (fieldpaths.is_index) is read by the full read, where the one rule walks it
    return not any(c in '"\\' or c < " " for c in name) and not fieldpaths.is_index(name)


class FieldReader:
    """Decodes pieces of a log segment (each line a record), or with `plain` of a plain JSON-lines
    file (each line a record's value), into columns of the given paths (see `readable`)."""

    def __init__(self, paths: Sequence[FieldPath], plain: bool = False) -> None:
        if not readable(paths, plain):
            raise ValueError(f"not readable as columns: {paths}")
        self.paths = list(dict.fromkeys(paths))
        self.plain = plain
        tree: dict = {}  # the value paths (without their leading "value") as a tree {name: subtree}
        for p in self.paths:
            node = tree
            for name in p[1:]:
                node = node.setdefault(name, {})
        line: Any = _struct("Line" if plain else "Value", tree)
        if plain:
            self._decode_lines = msgspec.json.Decoder(line).decode_lines
        else:
            # the value must be an object (a tombstone or a scalar value goes to the full read); a
            # field with fields of its own must be an object or null
            line = msgspec.defstruct(
                "Envelope", [("offset", _Offset), ("partition", _Int), ("ts", _Offset), ("value", line),
                             ("key", str | None, None)], gc=False)
        self._decode_all = msgspec.json.Decoder(list[line]).decode
        self._getters = {p: _column_getter(tree, p) for p in self.paths}
        # the value paths that lead to fields with fields of their own (`value.a` beside `value.a.b`):
        # their columns hold structs where the line has an object, and are checked by _plain (a
        # leaf's column holds only _Scalar values, which the decoder checked)
        self._inner = frozenset(p for p in self.paths if p[0] == "value" and _subtree(tree, p[1:]))

    def read_piece(self, piece: bytes, base: int = 0) -> FieldBatch | None:
        """The piece's lines (whole lines; the last may lack its newline) as a column per path, the
        first line of a plain file's piece being line `base` (from 0, its offset); None when the piece
        must be read in full."""
        if not piece.isascii():
            try:
                piece.decode()
            except UnicodeDecodeError:
                return None
        if b"\r" in piece and not self.plain:
            return None  # a log's full read cuts lines at a \r too (bytes.splitlines), and rejects them
        end = len(piece) - 1 if piece.endswith(b"\n") else len(piece)
        n = newlines(piece) - (len(piece) - end) + 1  # the lines, the last one's newline aside
        try:
            if self.plain and piece.startswith(b"{") and piece[end - 1:end] == b"}" and piece.count(b"}\n{") == n - 1:
                # Every line starts with { and ends with }: no value can run over a line's end (inside
                # one value a } and a { are never separated by whitespace alone), so the values are
                # one a line at least, and exactly one when there are n of them. decode_lines reads
                # them in place (a third less time than the array below: no copy of the piece, not
                # even without its last newline).
                objs = self._decode_lines(memoryview(piece)[:end])
            else:
                # the lines as one JSON array, one decoder call (a quarter less time than one a line);
                # a blank line makes it invalid, a line holding two values one element too many
                objs = self._decode_all(b"[" + piece[:end].replace(b"\n", b",") + b"]")
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
        if len(objs) != n:
            return None
        values = objs if self.plain else None  # a log's values: their column made once, if needed
        cols: dict[FieldPath, list] = {}
        for p, column in self._getters.items():
            if p[0] != "value":
                col = column(objs)
            else:
                if values is None:
                    values = list(map(_VALUE, objs))
                col = column(values)
            if p in self._inner and not _plain(col):
                return None
            cols[p] = col
        return FieldBatch(piece, cols, n, base=base if self.plain else None)


def _subtree(tree: dict, names: tuple[str, ...]) -> dict:
    for name in names:
        tree = tree[name]
    return tree


def _plain(col: list) -> bool:
    """Scalars that orjson would have read the same (no int outside its 64-bit range)."""
    types = {*map(type, col)}
    if not types <= _SCALARS:
        return False
    if int in types:
        ints = col if len(types) == 1 else [x for x in col if type(x) is int]
        return min(ints) >= _I64_MIN and max(ints) <= _U64
    return True


def newlines(text: bytes) -> int:
    """text.count(b"\\n") in less than half its time: count walks the bytes one at a time, while a
    replace finds them with memchr (measured over pieces of 1 MiB not in the cache: 0.3 ms against 0.7-1)."""
    return len(text) - len(text.replace(b"\n", b""))


def _struct(name: str, tree: dict) -> Any:
    """A msgspec struct of the fields in `tree` ({name: subtree}; a leaf is a _Scalar), each
    optional; a field with a subtree must be an object (or null, or missing)."""
    fields = []
    for i, (n, sub) in enumerate(tree.items()):
        typ: Any = _Scalar if not sub else _struct(f"{name}_{i}", sub) | None
        fields.append((f"f{i}", typ, msgspec.field(default=None, name=n)))
    return msgspec.defstruct(name, fields, gc=False)


def _column_getter(tree: dict, path: FieldPath) -> Any:
    """objs -> the column of `path` in the structs FieldReader decodes: an envelope field of a
    log's lines, or a value field from the values (structs _struct made of `tree`; None where a
    level is missing or null)."""
    attrs = [path[0]] if path[0] != "value" else []
    node = tree
    for n in path[1:]:
        attrs.append(f"f{list(node).index(n)}")
        node = node[n]
    dotted = attrgetter(".".join(attrs))  # one C call a row, when no level on the way is null

    def one(obj: Any) -> Any:
        for a in attrs:
            if obj is None:
                return None
            obj = getattr(obj, a)
        return obj

    def column(objs: list) -> list:
        try:
            return list(map(dotted, objs))
        except AttributeError:  # a null (or missing) object on the way: that row's value is null
            return list(map(one, objs))
    return column


class FieldBatch:
    """A piece read as columns. len() is its number of records; batch[i] parses record i in full
    (late events written to --late-out are few), and iterating parses them all. A piece of a
    plain file has a `base`: its records are {"offset", "partition": 0, "key": None, "value":
    line}, offsets counting from `base` (line numbers: a piece read as columns has no blank line)."""

    __slots__ = ("piece", "cols", "n", "pre", "base", "_lines")

    def __init__(self, piece: bytes | None, cols: dict[FieldPath, list] | None, n: int, pre: Any = None,
                 base: int | None = None) -> None:
        self.piece = piece  # None: the reading process kept it (decoder.py: nobody needs the records)
        self.cols = cols
        self.n = n
        self.pre = pre  # what its consumer made of the columns, when the reading process made it
        self.base = base
        self._lines: list[bytes] | None = None

    def lines(self) -> list[bytes]:
        if self._lines is None:
            if self.piece is None:
                raise RuntimeError("this batch's records were not kept")
            if self.base is None:
                self._lines = self.piece.splitlines()
            else:  # a plain file's lines are cut at \n only: a lone \r inside a line is JSON whitespace
                self._lines = (self.piece[:-1] if self.piece.endswith(b"\n") else self.piece).split(b"\n")
        return self._lines

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        from streamctl.processing import exactjson

        value = exactjson.loads(self.lines()[i])
        if self.base is None:
            return value
        return {"offset": self.base + i, "partition": 0, "key": None, "value": value}

    def __iter__(self) -> Iterator[dict]:
        from streamctl.processing import exactjson

        if self.base is None:
            return map(exactjson.loads, self.lines())
        return map(self.__getitem__, range(self.n))
