"""kcat-style output templates, with kcat's meanings, so a kcat `-f` template works unchanged.

    %t  the log's name (kcat's topic): the base name of the log's folder
        (`streamctl consume data/orders` prints `orders`, and so does
        `streamctl consume .` in that folder), or of a plain file
    %p  partition          %o  offset
    %T  timestamp, epoch milliseconds (-1 where there is none: plain files)
    %d  timestamp, ISO-8601 UTC with milliseconds (streamctl's addition)
    %k  key                %K  key length in bytes (-1 for a null key)
    %s  value              %S  value length in bytes (-1 for a null value)
    %R  value length in bytes (-1 for a null value) as kcat writes it: binary, a 32-bit
        signed big-endian integer (4 bytes, for framing values in a byte stream)
    %h  headers, `name=value` comma-separated
    %%  a literal %
    and kcat's escapes: \\t \\n \\r, \\xHH a byte in hex, \\NNN a byte in decimal (or
    octal with a leading 0, hex with 0x, as C's strtoul reads it), and a backslash before
    any other character stands for that character (\\\\ is a backslash)

A key or value that is a JSON string prints as its characters (kcat prints
the payload's bytes); any other value prints as its JSON text; null prints
nothing. %K, %S and %R are the byte lengths of what %k and %s print.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson

from streamctl.errors import UsageError
from streamctl.storage import record
from streamctl.timeparse import format_iso

TOKENS = {
    "t": "the log's name (its folder's base name)", "p": "partition", "o": "offset",
    "T": "timestamp (epoch ms)", "d": "timestamp (ISO-8601 UTC)",
    "k": "key", "K": "key length in bytes (-1: null)", "s": "value", "S": "value length in bytes (-1: null)",
    "R": "value length in bytes (-1: null) as a 4-byte big-endian signed integer",
    "h": "headers (n=v,n2=v2)", "%": "a literal %",
}
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r"}
_DIGITS = {8: "01234567", 10: "0123456789", 16: "0123456789abcdefABCDEF"}


def _byte(n: int) -> str:
    """A byte a template escape writes, as the character that encodes to exactly that byte
    (bytes above 127 as the surrogates "surrogateescape" turns back into them)."""
    n &= 0xFF  # kcat stores strtoul's value in a char
    return chr(n) if n < 128 else chr(0xDC00 + n)


def _number(text: str, i: int, base: int) -> tuple[int, int] | None:
    """C's strtoul(text[i:], base) for base 0 or 16: (value, index after it), or None when no digit."""
    if text[i:i + 2] in ("0x", "0X") and i + 2 < len(text) and text[i + 2] in _DIGITS[16]:
        base, i = 16, i + 2
    elif base == 0:
        base = 8 if text[i] == "0" else 10
    j = i
    while j < len(text) and text[j] in _DIGITS[base]:
        j += 1
    return (int(text[i:j], base), j) if j > i else None


def _escape(text: str, i: int) -> tuple[str, int]:
    """kcat's reading of the escape at text[i] (a backslash with a character after it):
    (what it writes, index after it). Like kcat's fmt_add: \\t \\n \\r; \\x then a digit
    reads hex; a digit reads a number (strtoul, base 0); any other character is itself."""
    c = text[i + 1]
    if c in _ESCAPES:
        return _ESCAPES[c], i + 2
    j, base = i + 1, 0
    if c == "x":
        j, base = i + 2, 16
        if j >= len(text):
            return "x", j
    if "0" <= text[j] <= "9":
        got = _number(text, j, base)
        if got is not None:
            return _byte(got[0]), got[1]
    return text[j], j + 1


def log_name(path: str) -> str:
    """What %t prints for the log or file at `path`, like kcat's topic name: the base name of the
    folder or file it really is (storage.log.log_name: `.` in the log's folder prints its name)."""
    from streamctl.storage.log import log_name as name_of

    return name_of(path)


def parse_template(text: str) -> list[tuple[str, str]]:
    """Template -> [("lit", text) | ("tok", letter)]. Raises UsageError on unknown tokens."""
    parts: list[tuple[str, str]] = []
    lit: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "%":
            if i + 1 >= len(text):
                raise UsageError("--format: a lone % at the end (write %% for a literal %)")
            t = text[i + 1]
            if t not in TOKENS:
                raise UsageError(f"--format: unknown token %{t} (known: " + " ".join("%" + k for k in TOKENS) + ")")
            if t == "%":
                lit.append("%")
            else:
                if lit:
                    parts.append(("lit", "".join(lit)))
                    lit = []
                parts.append(("tok", t))
            i += 2
        elif c == "\\" and i + 1 < len(text):
            ch, i = _escape(text, i)
            lit.append(ch)
        else:
            lit.append(c)
            i += 1
    if lit:
        parts.append(("lit", "".join(lit)))
    return parts


def _raw(json_text: bytes) -> bytes:
    """A JSON string prints as its raw characters (kcat prints payload bytes); else JSON text."""
    if json_text.startswith(b'"'):
        if b"\\" not in json_text:
            return json_text[1:-1]
        return orjson.loads(json_text).encode("utf-8", "surrogateescape")
    if json_text == b"null":
        return b""
    return json_text


def _length(json_text: bytes) -> bytes:
    """kcat's %K / %S: the byte length of what %k / %s prints, -1 for null."""
    if json_text == b"null":
        return b"-1"
    return b"%d" % len(_raw(json_text))


def _binary_length(json_text: bytes) -> bytes:
    """kcat's %R: the length %S gives, as 4 bytes of a big-endian signed 32-bit integer (kcat
    writes htonl of the length; a length of 2 GiB or more wraps as that C cast does)."""
    n = -1 if json_text == b"null" else len(_raw(json_text))
    return (n & 0xFFFF_FFFF).to_bytes(4, "big")


def _headers(line: bytes) -> bytes:
    if b'"headers"' not in line:
        return b""
    h = record.parse(line).get("headers") or {}
    if not isinstance(h, dict):
        return b""
    return ",".join(f"{k}={v if isinstance(v, str) else orjson.dumps(v).decode()}" for k, v in h.items()).encode()


_ENVELOPE_TOKENS = frozenset("opTd")


def compile_template(text: str, name: str = "") -> Callable[[bytes], bytes]:
    """A function from a stored line to its rendering; `name` is what %t prints."""
    parts = parse_template(text)
    # Each token reads only its part of the line; the envelope prefix is split once per line.
    pieces: list[bytes | str] = [v.encode("utf-8", "surrogateescape") if kind == "lit" else v for kind, v in parts]
    needs_env = any(p in _ENVELOPE_TOKENS for p in pieces if isinstance(p, str))
    topic = name.encode("utf-8", "surrogateescape")
    env = record.envelope

    def render(line: bytes) -> bytes:
        e = env(line) if needs_env else (0, 0, 0)
        out: list[bytes] = []
        for p in pieces:
            if isinstance(p, bytes):
                out.append(p)
            elif p == "o":
                out.append(b"%d" % e[0])
            elif p == "p":
                out.append(b"%d" % e[1])
            elif p == "T":
                out.append(b"%d" % e[2])
            elif p == "d":
                out.append(format_iso(e[2]).encode())
            elif p == "t":
                out.append(topic)
            elif p == "k":
                out.append(_raw(record.key_bytes(line)))
            elif p == "K":
                out.append(_length(record.key_bytes(line)))
            elif p == "s":
                out.append(_raw(record.value_bytes(line)))
            elif p == "S":
                out.append(_length(record.value_bytes(line)))
            elif p == "R":
                out.append(_binary_length(record.value_bytes(line)))
            elif p == "h":
                out.append(_headers(line))
        return b"".join(out)

    return render


def compile_plain_template(text: str, name: str = "") -> Callable[[int, bytes], bytes]:
    """Rendering for a plain .jsonl input: %o is the line number, %p 0, %T -1 and %d empty (no
    timestamps), the key null (%k empty, %K -1), no headers."""
    parts = parse_template(text)
    topic = name.encode("utf-8", "surrogateescape")
    fixed = {"p": b"0", "T": b"-1", "d": b"", "t": topic, "k": b"", "K": b"-1", "h": b""}

    def render(lineno: int, value: bytes) -> bytes:
        out = []
        for kind, v in parts:
            if kind == "lit":
                out.append(v.encode("utf-8", "surrogateescape"))
            elif v == "o":
                out.append(b"%d" % lineno)
            elif v == "s":
                out.append(_raw(value))
            elif v == "S":
                out.append(_length(value))
            elif v == "R":
                out.append(_binary_length(value))
            else:
                out.append(fixed[v])
        return b"".join(out)

    return render
