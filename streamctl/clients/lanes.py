"""produce's batch lanes: a whole read batch validated and spliced in C-level steps.

Each input mode has a lane that takes a read batch (streamctl.clients.inputlines.Batch)
and returns what the appender splices into stored lines (`Spliced`), without building a
Python object per value and without Python code per record: msgspec decodes each line
(the value kept as `msgspec.Raw`, or only the key or envelope fields typed), UTF-8 and the
numbers are checked once over the batch's bytes, and keys and partitions come from caches
looked up by C-level maps. The per-line decoders (formats/inputs.py) are the reference: a
lane stores the same bytes, byte for byte (tests/props/test_produce_lanes.py compares them
on random input).

Which path a batch takes is this rule, and nothing else: a lane returns None, and the
batch goes line by line through the per-line decoder (which names a bad line in its error),
when the batch holds

- a line over --max-record-bytes;
- a line msgspec refuses: anything but one JSON value (for --envelope, one object with a
  "value") with only whitespace around it, a whitespace-only line, or nesting deeper than
  msgspec follows (Python's recursion limit, below orjson's 1024);
- a field of a type the lane does not take: a --key-field or envelope key that is not a
  string, an integer within 64 bits or null; a --key-field path through something other
  than objects (an array, a number); envelope headers that are not an object of strings;
  an envelope "source" that is an object;
- invalid UTF-8 anywhere in the batch (msgspec does not check it inside strings);
- a number the per-line decoder refuses (orjson overflows it: beyond a double's range): the
  lane hands every line with a run of 20 digits, or a number with an exponent of 3 or more
  digits, to the per-line decoder, and one it rejects sends the batch down the per-line path.

--fsync always and --exactly-once take the per-line path for every batch (producer.py).
ProduceStats counts the batches of each path.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import compress, count, repeat
from operator import add, attrgetter, gt, itemgetter, sub
from typing import Any

import msgspec
import orjson

from streamctl.clients.inputlines import Batch
from streamctl.storage import fieldpaths

Exact = Callable[[bytes], Any]  # the per-line decoder: raises ValueError for a line it rejects

_WS = b" \t\r"  # what the per-line decoders strip around a value
_CACHE_KEYS = 100_000  # key texts kept across batches (a log has far fewer keys than records)
_INT_MIN, _INT_END = -(2**63), 2**64  # orjson reads integers in this range exactly


@dataclass(slots=True)
class Spliced:
    """A batch's records as JSON texts, ready for Appender.append_texts."""

    values: list  # value JSON texts: bytes or msgspec.Raw
    key_texts: bytes | list[bytes]  # one key JSON text for all, or one per record
    # per record, the key that picks the partition; None: the key texts pick it (a list of them),
    # or every record has `key`
    keys: list[str | None] | None
    headers: list[bytes | None] | None = None  # headers JSON texts per record, or None for none
    key: str | None = None  # the key of every record when keys is None


# --- the checks msgspec leaves to the batch ----------------------------------------------
# Digits, the decimal point and plus signs as 0, e/E as e, what a number token can follow (`:`,
# `,`, `[`, whitespace, a minus, a line start) as `:`, everything else as x. A number with an
# exponent of 3 or more digits then holds `0e000` (`:00.0e+400` reads `:000e0000`) with a `:`
# before its digits; a hex id such as 07e7d3e129 holds it too, but after an x (its quote or a
# letter), which a look at the byte before the digits clears.
_CLASSES = bytes(
    48 if 48 <= b <= 57 or b in b".+" else 101 if b in b"eE" else 58 if b in b":,[ \t\r\n-" else 120
    for b in range(256)
)
_EXPONENT = re.compile(b"0e000")
_RUN = b"0" * 19  # -9223372036854775809, the shortest integer orjson reads as a float, has 19 digits


def suspect_lines(text: bytes) -> list[int]:
    """Indexes of the lines of text (split at `\n`) that may hold a number orjson refuses or reads as
    a float: one with an exponent of 3 or more digits, or a run of 19 digits."""
    c = b":" + text.translate(_CLASSES)  # the text's first byte starts a line too: a `:` before it
    at = list(map(_start, _EXPONENT.finditer(c)))  # the digit before each e
    if at:
        # the last byte before the run of digits that ends at each hit, found in C-level maps:
        # a number if the last `:` in the 21 bytes up to it comes after the last x and e
        lo = list(map(max, map(sub, at, repeat(21)), repeat(0)))
        hi = list(map(add, at, repeat(1)))
        colon = map(c.rfind, repeat(b":"), lo, hi)
        other = map(max, map(c.rfind, repeat(b"x"), lo, hi), map(c.rfind, repeat(b"e"), lo, hi))
        at = list(compress(at, map(gt, colon, other)))
    if b"000" in c[::5]:  # a run of 19 covers 3 consecutive bytes of every 5th byte
        p = c.find(_RUN)
        while p >= 0:
            at.append(p)
            p = c.find(_RUN, p + 19)
    lines = []
    line = last = 0
    for p in sorted(at):
        p = max(p - 1, 0)  # c has one byte more than text
        line += text.count(b"\n", last, p)
        last = p
        lines.append(line)
    return lines


def checked(text: bytes, lines: list, exact: Exact) -> bool:
    """True when the batch is valid UTF-8 and every line that may hold a number orjson refuses
    passes the per-line decoder. lines are the batch's lines, text the bytes they came from."""
    if not text.isascii():
        try:
            text.decode()
        except UnicodeDecodeError:
            return False
    try:
        for i in suspect_lines(text):
            exact(lines[i])
    except ValueError:
        return False
    return True


class KeyTexts:
    """Key JSON texts (as orjson writes the key string) per key, cached across batches.

    Keys are strings, None, or integers within 64 bits (their decimal text is the key, as
    the per-line decoder has it).
    """

    def __init__(self) -> None:
        self.texts: dict[Any, bytes] = {None: b"null"}
        self.ints = False  # an integer key was seen: partition keys need converting

    def __call__(self, keys: list) -> list[bytes] | None:
        """The texts of keys, or None if an integer key is beyond 64 bits."""
        texts = self.texts
        try:
            return list(map(texts.__getitem__, keys))
        except KeyError:
            pass
        missing = set(keys).difference(texts)
        if len(texts) + len(missing) > _CACHE_KEYS:  # bounded: start over rather than grow
            texts.clear()
            texts[None] = b"null"
            missing = set(keys).difference(texts)
        dumps = orjson.dumps
        for k in missing:
            if type(k) is int:
                if not _INT_MIN <= k < _INT_END:
                    return None
                self.ints = True
                texts[k] = dumps(str(k))
            else:
                texts[k] = dumps(k)
        return list(map(texts.__getitem__, keys))

    def partition_keys(self, keys: list) -> list[str | None]:
        if not self.ints:
            return keys
        return [str(k) if type(k) is int else k for k in keys]


def _nonblank(batch: Batch) -> list[bytes]:
    lines: list = batch.lines
    return lines if all(lines) else list(filter(None, lines))  # blank lines carry no record


_start = re.Match.start
_raw_value = msgspec.json.Decoder(msgspec.Raw).decode
_DECODE_ERRORS = (msgspec.DecodeError, RecursionError, UnicodeDecodeError)  # (a ValidationError is a DecodeError)


# --- the lanes ------------------------------------------------------------------------------

def validate_values(batch: Batch, exact: Exact) -> list | None:
    """The plain lane: a batch's value texts (msgspec.Raw, whitespace around them left out)."""
    if batch.text is None:
        return None
    try:
        values = list(map(_raw_value, _nonblank(batch)))
    except _DECODE_ERRORS:
        return None
    if not checked(batch.text, batch.lines, exact):
        return None
    return values


class KeyedLane:
    """The --key-field lane: msgspec decodes only the key path of each value (nested structs). From
    a segment that indexes arrays on (fieldpaths.is_index), that part of the value is decoded whole
    and walked by the one path rule."""

    def __init__(self, kpath: tuple[str, ...]) -> None:
        cut = next((i for i, name in enumerate(kpath) if fieldpaths.is_index(name)), len(kpath))
        self.rest = kpath[cut:]
        leaf: Any = str | int | None if not self.rest else Any
        for name in reversed(kpath[:cut]):
            leaf = msgspec.defstruct("KeyPath", [("v", leaf | None, None)], rename={"v": name}, gc=False)
        self.decode = msgspec.json.Decoder(leaf).decode
        self.depth = cut
        self.texts = KeyTexts()

    def __call__(self, batch: Batch, exact: Exact) -> Spliced | None:
        if batch.text is None:
            return None
        lines = _nonblank(batch)
        try:
            got: Any = map(self.decode, lines)
            for _ in range(self.depth):
                got = map(getattr, got, repeat("v"), repeat(None))  # a null on the way: no key
            keys = list(got)
        except _DECODE_ERRORS:
            return None
        if self.rest:
            keys = fieldpaths.column(keys, self.rest)
            if not {*map(type, keys)} <= _KEY_TYPES:
                return None  # a key that is not a string or an integer: the reference says why
        texts = self.texts(keys)
        if texts is None or not checked(batch.text, batch.lines, exact):
            return None
        values = list(map(bytes.strip, lines, repeat(_WS)))
        return Spliced(values, texts, self.texts.partition_keys(keys))


_KEY_TYPES = {str, int, type(None)}


class _Envelope(msgspec.Struct, gc=False):
    value: msgspec.Raw
    key: msgspec.Raw = msgspec.Raw(b"null")
    headers: dict[str, str] | None = None
    source: msgspec.Raw = msgspec.Raw()


class _EnvelopeAnyKey(msgspec.Struct, gc=False):
    """With --key the envelope's key is ignored, whatever it holds."""

    value: msgspec.Raw
    key: msgspec.Raw = msgspec.Raw()
    headers: dict[str, str] | None = None
    source: msgspec.Raw = msgspec.Raw()


_key_value = msgspec.json.Decoder(str | int | None).decode
_value = attrgetter("value")
_key = attrgetter("key")
_headers = attrgetter("headers")
_source = attrgetter("source")
# byte for byte what orjson.dumps writes for a string or an object of strings (tested for every
# code point), at a fraction of its cost per call here
_encode = msgspec.json.Encoder().encode


class EnvelopeLane:
    """The --envelope lane: key and headers typed, the value kept as written (msgspec.Raw)."""

    def __init__(self, const_key: str | None) -> None:
        self.const_key = const_key
        self.decode: Callable[[bytes], Any] = msgspec.json.Decoder(
            _Envelope if const_key is None else _EnvelopeAnyKey).decode
        self.texts = KeyTexts()

    def __call__(self, batch: Batch, exact: Exact) -> Spliced | None:
        if batch.text is None:
            return None
        try:
            envs = list(map(self.decode, _nonblank(batch)))
        except _DECODE_ERRORS:
            return None
        if any(map(len, map(_source, envs))) and any(bytes(s)[:1] == b"{" for s in map(_source, envs)):
            return None  # a source object: the per-line decoder checks it
        hs = list(map(_headers, envs))
        headers: list[bytes | None] | None = None
        if any(hs):  # none, null or {}: no headers field
            headers = [None] * len(hs)
            deque(map(headers.__setitem__, compress(count(), hs), map(_encode, filter(None, hs))), maxlen=0)
        values = list(map(_value, envs))
        if self.const_key is not None:
            if not checked(batch.text, batch.lines, exact):
                return None
            return Spliced(values, orjson.dumps(self.const_key), None, headers, self.const_key)
        raws = list(map(_key, envs))
        framed = b"\n" + b"\n\n".join(raws) + b"\n"
        if b"\\" not in framed and framed.count(b'\n"') + framed.count(b"\nnull\n") == len(raws):
            # strings without escapes and nulls: the texts as written are what orjson writes
            if not checked(batch.text, batch.lines, exact):
                return None
            return Spliced(values, raws, None, headers)
        try:
            keys = list(map(_key_value, raws))
        except (msgspec.ValidationError, UnicodeDecodeError):  # a key that is not a string, a 64-bit integer or null (or not UTF-8)
            return None
        texts = self.texts(keys)
        if texts is None or not checked(batch.text, batch.lines, exact):
            return None
        return Spliced(values, texts, self.texts.partition_keys(keys), headers)


class RawLane:
    """The --raw lane: each line's text becomes a JSON string (one encode per batch)."""

    def __init__(self, key_delimiter: str | None, const_key: str | None) -> None:
        self.delim = key_delimiter.encode("utf-8", "surrogateescape") if key_delimiter else None
        self.const_key = const_key
        self.const_text = orjson.dumps(const_key)
        self.texts = KeyTexts()

    def __call__(self, batch: Batch, exact: Exact) -> Spliced | None:
        text = batch.text
        if text is None:
            return None
        lines: list = batch.lines
        if not all(map(bytes.strip, lines)):  # blank lines carry no record
            lines = list(compress(lines, map(bytes.strip, lines)))
            text = None
        if text is None or b"\r" in text:
            # what read_batches left of a CR before the newline goes too, as in the per-line decoder
            lines = [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]
            text = b"\n".join(lines)
        if not lines:
            return Spliced([], self.const_text, None, None, self.const_key)
        try:  # every byte is decoded as UTF-8 on the way, as the per-line decoder requires
            return self._spliced(text)
        except UnicodeDecodeError:
            return None

    def _spliced(self, text: bytes) -> Spliced:
        if self.delim is None:
            return Spliced(_json_strings(text), self.const_text, None, None, self.const_key)
        parts = list(map(bytes.partition, text.split(b"\n"), repeat(self.delim)))
        if all(map(itemgetter(1), parts)):
            keys: list = list(map(bytes.decode, map(itemgetter(0), parts)))
            strs = list(map(itemgetter(2), parts))
        else:  # lines without the delimiter keep the --key key (or none) and their whole text
            keys = [k.decode() if sep else self.const_key for k, sep, _ in parts]
            strs = [v if sep else k for k, sep, v in parts]
        texts = self.texts(keys)
        assert texts is not None  # string keys only
        return Spliced(_json_strings(b"\n".join(strs)), texts, keys)


def _json_strings(lines: bytes) -> list[bytes]:
    """The JSON string of each line of lines (valid UTF-8, split at \n), as orjson.dumps writes it.

    One encode of the whole: the line breaks become DEL, which JSON strings hold unescaped,
    and then the closing and opening quotes of neighbouring strings. Input that holds a DEL
    itself is encoded line by line.
    """
    if b"\x7f" in lines:
        return list(map(_encode, lines.decode().split("\n")))
    return _encode(lines.replace(b"\n", b"\x7f").decode()).replace(b"\x7f", b'"\n"').split(b"\n")
