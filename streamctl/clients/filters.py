"""Record filters of consume, tail and replay: `--key`, `--header NAME=VALUE`, `--where 'PATH OP VALUE'`.

Rules (the contract, also in each command's --help):

- `--key K` (repeatable): the record's key is one of them.
- `--header NAME=VALUE` (repeatable): every one holds: header NAME is VALUE.
- `--where 'PATH OP VALUE'` (repeatable): every one holds. PATH is a dotted
  path (`value.user.id`; `key`, `ts`, `offset`, `partition`, `headers.NAME`
  are envelope fields; a path that names none of them is under `value`). OP is
  `==`, `!=`, `<`, `<=`, `>`, `>=` or `~`. VALUE is JSON (`100`, `"JP"`,
  `true`, `null`, `[1,2]`); any text that is not JSON is a string (`JP`,
  `user-7`). For `~`, VALUE is a Python regular expression (a JSON string is
  unquoted first) searched for in the field (`re.search`).
- A missing field is null. `==` compares JSON values: the types must match
  (true is not 1; 1 and 1.0 are both numbers and equal), arrays and objects
  element by element. `!=` is the negation of `==`. `<`, `<=`, `>`, `>=`
  order numbers, strings (by code point) and booleans (false < true); between
  different types, or for null, arrays and objects, they are false. `~` on a
  field that is not a string is false.
- All filters combine with AND.

Evaluation reads as little as it can (it runs on every stored line). A block
of stored lines is first tested as bytes: a value a filter needs to see
(a key, a header, a string or boolean compared with `==`, a plain-word
pattern of `~`) is spelled as exactly its JSON text in any line without a
backslash, so a block, or a line, that lacks it is skipped unparsed. Only the
lines left are decoded, and only for the fields the filters name: msgspec
decodes each line against a schema of those fields and skips the rest (the
whole line is still checked as JSON). A line the schema does not fit (a value
that is not an object where a path goes into it) is parsed in full with
orjson. `--key` alone never decodes a value: the key is read from the line's
prefix.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson

from streamctl.errors import UsageError
from streamctl.storage import fieldpaths, plainfile, record

OPS = ("==", "!=", "<=", ">=", "<", ">", "~")
_WHERE = re.compile(r"^\s*(?P<path>[^\s=!<>~]+)\s*(?P<op>==|!=|<=|>=|<|>|~)\s*(?P<value>.*?)\s*$", re.S)
# A `~` pattern made only of these characters matches itself literally, so its bytes must be in the line.
_LITERAL = re.compile(r"[\w\-:/@=,# ]+")
_ENVELOPE_INTS = ("offset", "partition", "ts")


@dataclass(frozen=True)
class Where:
    """One parsed `--where` expression."""

    text: str
    path: tuple[str, ...]
    op: str
    value: Any
    regex: re.Pattern[str] | None = None


# a VALUE that is not JSON is taken as a string when it is one word: no whitespace, and not
# starting with a quote, a bracket or an operator's character (a regex after ~ is taken as it is)
_BARE_WORD = re.compile(r"""[^\s"'{\[=<>!~][^\s]*""")


def parse_where(text: str) -> Where:
    m = _WHERE.match(text)
    if m is None:
        raise UsageError(f"--where {text!r}: not an expression of the form 'PATH OP VALUE' "
                         f"(OP one of {' '.join(OPS)}; e.g. 'value.amount > 100')")
    path_text, op, raw = m.group("path"), m.group("op"), m.group("value")
    if raw == "":
        raise UsageError(f"--where {text!r}: no VALUE after {op} (JSON, or a bare word taken as a string)")
    try:
        path = fieldpaths.record_path(path_text)
    except UsageError as e:
        raise UsageError(f"--where {text!r}: {e}") from None
    try:
        # msgspec, as the records' side is read: an integer past 64 bits stays exact (orjson's
        # would be a float, equal to its neighbours)
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        if op != "~" and not _BARE_WORD.fullmatch(raw):  # `x === 1`, `x == 1 and y`, `x == "a`: a typo
            raise UsageError(f"--where {text!r}: VALUE {raw!r} is neither JSON nor a bare word (a string "
                             f"with spaces or quotes is written as JSON: '{path_text} {op} \"a b\"')") from None
        value = raw
    if op == "~":
        pattern = value if isinstance(value, str) else raw
        try:
            rx = re.compile(pattern)
        except re.error as e:
            raise UsageError(f"--where {text!r}: bad regular expression {pattern!r}: {e}") from None
        return Where(text, path, op, pattern, rx)
    return Where(text, path, op, value)


def parse_header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise UsageError(f"--header {text!r}: expected NAME=VALUE (e.g. trace-id=abc123)")
    return name, value


# --- comparisons --------------------------------------------------------------


def _kind(v: Any) -> str:
    t = type(v)
    if t is bool:
        return "bool"
    if t is int or t is float:
        return "num"
    if t is str:
        return "str"
    if v is None:
        return "null"
    if t is list:
        return "array"
    if t is dict:
        return "object"
    return "other"


def json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values: types must match (bool is not a number), containers element-wise."""
    ka = _kind(a)
    if ka != _kind(b):
        return False
    if ka == "array":
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if ka == "object":
        return a.keys() == b.keys() and all(json_equal(x, b[k]) for k, x in a.items())
    return a == b


_ORDERED = frozenset({"num", "str", "bool"})
_ORDER_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}


def _predicate(w: Where) -> Callable[[Any], bool]:
    """A test of one field value."""
    c = w.value
    if w.op == "~":
        search = w.regex.search  # type: ignore[union-attr]
        return lambda v: type(v) is str and search(v) is not None
    if w.op in ("==", "!="):
        k = _kind(c)
        if k in ("str", "null"):
            eq = (lambda v: v == c and type(v) is str) if k == "str" else (lambda v: v is None)
        elif k == "num":
            eq = lambda v: (type(v) is int or type(v) is float) and v == c  # noqa: E731
        elif k == "bool":
            eq = lambda v: v is c  # noqa: E731
        else:
            eq = lambda v: json_equal(v, c)  # noqa: E731
        return eq if w.op == "==" else (lambda v: not eq(v))
    kc = _kind(c)
    if kc not in _ORDERED:
        return lambda v: False
    cmp = _ORDER_OPS[w.op]
    if kc == "num":
        return lambda v: (type(v) is int or type(v) is float) and cmp(v, c)
    if kc == "str":
        return lambda v: type(v) is str and cmp(v, c)
    return lambda v: type(v) is bool and cmp(v, c)


_NUMS = (int, float)


def _narrower(w: Where, column: Callable[[list[Any]], list[Any]]) -> Callable[[list[Any], list[int]], list[int]]:
    """`_predicate(w)` over a column: the common tests inline (no call per record), the rest through it."""
    c = w.value
    k = _kind(c)
    if w.op in _ORDER_OPS and k == "num":
        cmp = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}[w.op]
        return lambda objs, idx: [i for i, v in zip(idx, column(objs), strict=True)
                                  if type(v) in _NUMS and cmp(v, c)]
    if w.op == "==" and k == "str":
        return lambda objs, idx: [i for i, v in zip(idx, column(objs), strict=True) if v == c and type(v) is str]
    if w.op == "==" and k == "num":
        return lambda objs, idx: [i for i, v in zip(idx, column(objs), strict=True)
                                  if v == c and type(v) in _NUMS]
    pred = _predicate(w)
    return lambda objs, idx: [i for i, v in zip(idx, column(objs), strict=True) if pred(v)]


def _needle(w: Where) -> bytes | None:
    """Bytes every line that satisfies w contains, when it has no backslash (no escaped spellings)."""
    if w.op == "==" and type(w.value) in (str, bool):
        return orjson.dumps(w.value)
    if w.op == "~" and isinstance(w.value, str) and _LITERAL.fullmatch(w.value):
        return w.value.encode()
    return None


# --- the schema of the named fields ----------------------------------------------

_LEAF: dict = {}


def _name_ok(name: str) -> bool:
    # msgspec refuses field names with a quote, a backslash or a control character
    return bool(name) and not any(c in '"\\' or c < " " for c in name)


class _Schema:
    """A msgspec type that decodes only the named fields, and a getter per path."""

    def __init__(self, field_paths: Iterable[tuple[str, ...]]) -> None:
        self._n = 0
        self._attrs: dict[int, dict[str, str]] = {}  # id(tree node) -> JSON name -> struct attribute
        tree: dict[str, Any] = {"offset": _LEAF}  # first, so it is attribute f0 (Filter finds lines by it)
        for p in field_paths:
            node = tree
            for i, part in enumerate(p):
                last = i == len(p) - 1
                if last:
                    node[part] = _LEAF  # a leaf decodes its whole subtree
                    break
                child = node.get(part)
                if child is _LEAF:
                    break  # an ancestor is decoded whole already
                if child is None:
                    child = node[part] = {}
                node = child
        self.tree = tree
        self.type = self._struct(tree, top=True)
        self.decoder = msgspec.json.Decoder(self.type)

    def _struct(self, node: dict, top: bool = False) -> Any:
        if node is _LEAF or not all(_name_ok(n) and not n.lstrip("-").isdecimal() for n in node):
            return Any  # decoded whole; the getter walks the rest with fieldpaths.get
        fields = []
        names = {}
        for name, child in node.items():
            attr = f"f{self._n}"
            self._n += 1
            names[name] = attr
            if top and name in _ENVELOPE_INTS:
                typ: Any = int
            elif top and name == "key":
                typ = str | None
            else:
                typ = self._struct(child)
                if typ is not Any:
                    typ = typ | None
            fields.append((attr, typ, msgspec.field(default=None, name=name)))
        self._attrs[id(node)] = names
        return msgspec.defstruct(f"S{self._n}", fields, gc=False)

    def column(self, path: tuple[str, ...]) -> Callable[[list[Any]], list[Any]]:
        """The values at `path` of a list of decoded objects, a column at a time (no call per record)."""
        steps, rest = self._steps(path)

        def col(objs: list[Any]) -> list[Any]:
            for a in steps:
                objs = [getattr(o, a, None) for o in objs]  # a struct, or None: missing stays None
            if rest:
                objs = [fieldpaths.get(o, rest) for o in objs]
            return objs

        return col

    def _steps(self, path: tuple[str, ...]) -> tuple[list[str], tuple[str, ...]]:
        steps: list[str] = []
        node: Any = self.tree
        i = 0
        while i < len(path) and node is not _LEAF and id(node) in self._attrs:
            steps.append(self._attrs[id(node)][path[i]])
            node = node[path[i]]
            i += 1
        return steps, path[i:]

    def getter(self, path: tuple[str, ...]) -> Callable[[Any], Any]:
        """value at `path` of a decoded object (None when missing)."""
        steps, rest = self._steps(path)

        def get(obj: Any) -> Any:
            for a in steps:
                if obj is None:
                    return None
                obj = getattr(obj, a)
            if rest:
                return fieldpaths.get(obj, rest)
            return obj

        return get


def _full_get(path: tuple[str, ...]) -> Callable[[dict], Any]:
    return lambda obj: fieldpaths.get(obj, path)


# --- the filter -----------------------------------------------------------------


class Filter:
    """The parsed filters of one command; `select` keeps the matching lines of a block."""

    def __init__(self, keys: Sequence[str] = (), headers: Sequence[tuple[str, str]] = (),
                 wheres: Sequence[Where] = ()) -> None:
        self.keys = list(dict.fromkeys(keys))
        self.headers = list(headers)
        self.wheres = list(wheres)
        self.key_texts = {record.key_json(k) for k in self.keys}
        # byte tests: each group lists alternatives, one of which every matching line contains
        self.needles: list[tuple[bytes, ...]] = []
        if self.keys:
            self.needles.append(tuple(sorted(self.key_texts)))
        for name, value in self.headers:
            self.needles.append((orjson.dumps(name),))
            self.needles.append((orjson.dumps(value),))
        for w in self.wheres:
            n = _needle(w)
            if n is not None:
                self.needles.append((n,))
        self.needles.sort(key=lambda g: -min(map(len, g)))  # the longest (rarest) first
        self.decodes = bool(self.headers or self.wheres)
        if self.decodes:
            fields = [w.path for w in self.wheres]
            if self.headers:
                fields.append(("headers",))
            if self.keys:
                fields.append(("key",))
            self.schema = _Schema(fields)
            self._test = self._compile(self.schema.getter)
            self._test_full = self._compile(_full_get)
            self._narrowers = self._compile_columns()

    @classmethod
    def from_options(cls, keys: Sequence[str] | None, headers: Sequence[str] | None,
                     wheres: Sequence[str] | None) -> Filter | None:
        """The Filter of the command-line options, or None when there are none; UsageError names a bad one."""
        if not (keys or headers or wheres):
            return None
        return cls(list(keys or ()), [parse_header(h) for h in headers or ()], [parse_where(w) for w in wheres or ()])

    def options(self) -> dict[str, list[str]]:
        """The options this filter was made of, as typed (from_options makes it again: the Spark
        replay job builds its own on each executor)."""
        return {"key": list(self.keys), "header": [f"{n}={v}" for n, v in self.headers],
                "where": [w.text for w in self.wheres]}

    def describe(self) -> str:
        parts = [f"--key {k}" for k in self.keys] + [f"--header {n}={v}" for n, v in self.headers]
        return " ".join(parts + [f"--where {w.text!r}" for w in self.wheres])

    def _compile(self, make_getter: Callable[[tuple[str, ...]], Callable[[Any], Any]]) -> Callable[[Any], bool]:
        tests: list[Callable[..., bool]] = []
        if self.keys:
            get_key = make_getter(("key",))
            keys = set(self.keys)
            tests.append(lambda o: get_key(o) in keys)
        if self.headers:
            get_h = make_getter(("headers",))
            want = self.headers

            def headers_ok(o: Any) -> bool:
                h = get_h(o)
                return type(h) is dict and all(h.get(n, _NO) == v for n, v in want)

            tests.append(headers_ok)
        for w in self.wheres:
            get, pred = make_getter(w.path), _predicate(w)
            tests.append(lambda o, get=get, pred=pred: pred(get(o)))
        if len(tests) == 1:
            return tests[0]
        return lambda o: all(t(o) for t in tests)

    def _compile_columns(self) -> list[Callable[[list[Any], list[int]], list[int]]]:
        """The same tests as `_compile`, each narrowing a list of record indexes a column at a time."""
        out: list[Callable[[list[Any], list[int]], list[int]]] = []
        schema = self.schema
        if self.keys:
            key_col, keys = schema.column(("key",)), set(self.keys)
            out.append(lambda objs, idx: [i for i, v in zip(idx, key_col(objs), strict=True) if v in keys])
        if self.headers:
            h_col, want = schema.column(("headers",)), self.headers

            def headers_ok(objs: list[Any], idx: list[int]) -> list[int]:
                return [i for i, h in zip(idx, h_col(objs), strict=True)
                        if type(h) is dict and all(h.get(n, _NO) == v for n, v in want)]

            out.append(headers_ok)
        for w in self.wheres:
            out.append(_narrower(w, schema.column(w.path)))
        return out

    def _select_indexes(self, objs: list[Any]) -> list[int]:
        idx = list(range(len(objs)))
        sub = objs
        for narrow in self._narrowers:
            idx = narrow(sub, idx)
            if not idx:
                break
            sub = [objs[i] for i in idx]
        return idx

    # -- selection ---------------------------------------------------------------

    def select(self, block: bytes) -> bytes:
        """The lines of `block` (whole stored lines) that match, in order, as one bytes object."""
        if not block:
            return block
        if self.needles:
            if b"\\" not in block:
                for group in self.needles:
                    if not any(n in block for n in group):
                        return b""
                lines = self._candidates(block)
            else:
                lines = [ln for ln in block.splitlines(keepends=True) if self._may_match(ln)]
            if not lines:
                return b""
            if not self.decodes:
                return b"".join(ln for ln in lines if self._key_ok(ln))
            return self._decode_select(b"".join(lines), lines)
        return self._decode_select(block, None)

    def matches(self, line: bytes) -> bool:
        return bool(self.select(line if line.endswith(b"\n") else line + b"\n"))

    def _may_match(self, line: bytes) -> bool:
        return b"\\" in line or all(any(n in line for n in g) for g in self.needles)

    def _key_ok(self, line: bytes) -> bool:
        kb = record.key_bytes(line)
        if b"\\" in kb:
            kb = orjson.dumps(orjson.loads(kb))
        return kb in self.key_texts

    def _candidates(self, block: bytes) -> list[bytes]:
        """Lines holding one of the first group's needles (found by byte search) and every other group's."""
        starts: set[int] = set()
        for n in self.needles[0]:
            i = block.find(n)
            while i >= 0:
                s = block.rfind(b"\n", 0, i) + 1
                e = block.find(b"\n", i)
                e = len(block) if e < 0 else e + 1
                starts.add(s)
                i = block.find(n, e)
        rest = self.needles[1:]
        out = []
        for s in sorted(starts):
            e = block.find(b"\n", s)
            ln = block[s: len(block) if e < 0 else e + 1]
            if all(any(n in ln for n in g) for g in rest):
                out.append(ln)
        return out

    def _decode_select(self, block: bytes, lines: list[bytes] | None) -> bytes:
        try:
            objs = self.schema.decoder.decode_lines(block)
        except (msgspec.DecodeError, msgspec.ValidationError):
            objs = None
        if objs is None or (lines is not None and len(objs) != len(lines)):
            # some line does not fit the schema (or is not a record): line by line
            if lines is None:
                lines = block.splitlines(keepends=True)
            return b"".join(ln for ln in lines if self._line_ok(ln))
        sel = self._select_indexes(objs)
        if not sel:
            return b""
        if lines is not None:
            return b"".join([lines[i] for i in sel])
        if len(sel) * 8 >= len(objs):
            all_lines = block.splitlines(keepends=True)
            return b"".join([all_lines[i] for i in sel])
        # few matches: find each by its offset instead of splitting the whole block
        out = []
        pos = 0
        for i in sel:
            head = b'{"offset":%d,' % objs[i].f0
            s = block.find(head, pos)
            while s > 0 and block[s - 1] != 10:
                s = block.find(head, s + 1)
            if s < 0:  # not in the canonical layout: split after all
                all_lines = block.splitlines(keepends=True)
                return b"".join([all_lines[i] for i in sel])
            e = block.find(b"\n", s)
            e = len(block) if e < 0 else e + 1
            out.append(block[s:e])
            pos = e
        return b"".join(out)

    def _line_ok(self, line: bytes) -> bool:
        try:
            obj = self.schema.decoder.decode(line)
        except (msgspec.DecodeError, msgspec.ValidationError):
            if plainfile.is_envelope_line(line):  # a plain file's line: any JSON value, no ts
                return self._test_full(orjson.loads(line))
            return self._test_full(record.parse(line))
        return self._test(obj)


_NO = object()
