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
- a number the per-line decoder refuses (orjson overflows it, or it is an integer beyond
  64 bits): the lane hands every line with a run of 20 digits, or a number with an exponent
  of 3 or more digits, to the per-line decoder, and one it rejects sends the batch down
  the per-line path.

--fsync always and --exactly-once take the per-line path for every batch (producer.py).
ProduceStats counts the batches of each path.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import compress, count, repeat
from operator import attrgetter, itemgetter
from typing import Any

import msgspec
import orjson

from streamctl.clients.inputlines import Batch

Exact = Callable[[bytes], Any]  # the per-line decoder: raises ValueError for a line it rejects

_WS = b" \t\r"  # what the per-line decoders strip around a value
_CACHE_KEYS = 100_000  # key texts kept across batches (a log has far fewer keys than records)
_INT_MIN, _INT_END = -(2**63), 2**64  # orjson reads integers in this range exactly


@dataclass(slots=True)
class Spliced:
    """A batch's records as JSON texts, ready for Appender.append_texts."""

    values: list  # value JSON texts: bytes or msgspec.Raw
    key_texts: bytes | list[bytes]  # one key JSON text for all, or one per record
    keys: list[str | None] | None  # per record, the key that picks the partition; None: all have `key`
    headers: list[bytes | None] | None = None  # headers JSON texts per record, or None for none
    key: str | None = None  # the key of every record when keys is None


# --- the checks msgspec leaves to the batch ----------------------------------------------
# Digits and the decimal point as 0, e/E as e, what a number can follow (`:`, `,`, `[`,
# whitespace, a minus) as `:`, newlines kept, everything else as x; plus signs are deleted. A
# number with an exponent of 3 or more digits then reads `:0e000`, `:00.0e0000`, ...; a hex
# id such as 07e7d3e129 reads `x0e000`, which the look at the byte before the digits clears.
_CLASSES = bytes(
    48 if 48 <= b <= 57 or b == 46 else 101 if b in b"eE" else 10 if b == 10 else 58 if b in b":,[ \t\r-"
    else 120
    for b in range(256)
)
_EXPONENT = b"0e000"
_RUN = b"0" * 20


def suspect_lines(text: bytes) -> set[int]:
    """Indexes of the lines of text (split at `\n`) that may hold a number orjson refuses or reads as a float:
    a run of 20 digits, or a number token with an exponent of 3 or more digits."""
    c = text.translate(_CLASSES, b"+")
    at = []
    find = c.find
    p = find(_EXPONENT)
    while p >= 0:
        before = c[max(0, p - 20):p + 1].rstrip(b"0")  # what the digits before the e follow
        if not before or before[-1] in (58, 10):
            at.append(p)
        p = find(_EXPONENT, p + 1)
    if b"0000" in c[::5]:  # a run of 20 covers 4 consecutive bytes of every 5th byte
        p = find(_RUN)
        while p >= 0:
            at.append(p)
            p = find(_RUN, p + 20)
    lines: set[int] = set()
    line = last = 0
    for p in sorted(at):
        line += c.count(b"\n", last, p)
        last = p
        lines.add(line)
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


_raw_value = msgspec.json.Decoder(msgspec.Raw).decode
_DECODE_ERRORS = (msgspec.DecodeError, RecursionError)  # (a ValidationError is a DecodeError)


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
    """The --key-field lane: msgspec decodes only the key path of each value (nested structs)."""

    def __init__(self, kpath: tuple[str, ...]) -> None:
        leaf: Any = str | int | None
        for name in reversed(kpath):
            leaf = msgspec.defstruct("KeyPath", [("v", leaf | None, None)], rename={"v": name}, gc=False)
        self.decode = msgspec.json.Decoder(leaf).decode
        self.depth = len(kpath)
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
        texts = self.texts(keys)
        if texts is None or not checked(batch.text, batch.lines, exact):
            return None
        values = list(map(bytes.strip, lines, repeat(_WS)))
        return Spliced(values, texts, self.texts.partition_keys(keys))


class _Envelope(msgspec.Struct, gc=False):
    value: msgspec.Raw
    key: str | int | None = None
    headers: dict[str, str] | None = None
    source: msgspec.Raw = msgspec.Raw()


class _EnvelopeAnyKey(msgspec.Struct, gc=False):
    """With --key the envelope's key is ignored, whatever it holds."""

    value: msgspec.Raw
    key: msgspec.Raw = msgspec.Raw()
    headers: dict[str, str] | None = None
    source: msgspec.Raw = msgspec.Raw()


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
        keys = list(map(_key, envs))
        texts = self.texts(keys)
        if texts is None or not checked(batch.text, batch.lines, exact):
            return None
        return Spliced(values, texts, self.texts.partition_keys(keys), headers)


class RawLane:
    """The --raw lane: each line's text becomes a JSON string (orjson.dumps, one C call per line)."""

    def __init__(self, key_delimiter: str | None, const_key: str | None) -> None:
        self.delim = key_delimiter or None
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
        try:
            whole = text.decode()
        except UnicodeDecodeError:
            return None
        if self.delim is None:
            return Spliced(_json_strings(whole), self.const_text, None, None, self.const_key)
        parts = list(map(str.partition, whole.split("\n"), repeat(self.delim)))
        if all(map(itemgetter(1), parts)):
            keys: list = list(map(itemgetter(0), parts))
            strs = list(map(itemgetter(2), parts))
        else:  # lines without the delimiter keep the --key key (or none) and their whole text
            keys = [k if sep else self.const_key for k, sep, _ in parts]
            strs = [v if sep else k for k, sep, v in parts]
        texts = self.texts(keys)
        assert texts is not None  # string keys only
        return Spliced(_json_strings("\n".join(strs)), texts, keys)


def _json_strings(lines: str) -> list[bytes]:
    """orjson.dumps of each line of lines (split at \n), from one orjson.dumps of the whole.

    In the encoded text every backslash starts an escape, so replacing escaped backslashes
    first (with a NUL byte, which orjson always escapes) leaves the \n escapes as exactly the
    line breaks; they become the closing and opening quotes of neighbouring strings.
    """
    enc = orjson.dumps(lines).replace(b"\\\\", b"\0").replace(b"\\n", b'"\n"').replace(b"\0", b"\\\\")
    return enc.split(b"\n")
