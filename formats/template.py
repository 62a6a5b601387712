"""kcat-style output templates: `%o %p %t %T %k %s %h %%` and `\\t \\n \\r \\\\` escapes."""

from __future__ import annotations

from collections.abc import Callable

import orjson

from streamctl import record
from streamctl.errors import UsageError
from streamctl.timeparse import format_iso

TOKENS = {
    "o": "offset", "p": "partition", "t": "timestamp (epoch ms)", "T": "timestamp (ISO-8601 UTC)",
    "k": "key", "s": "value", "h": "headers (k=v,k2=v2)", "%": "a literal %",
}
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\", "0": "\0"}


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
        elif c == "\\" and i + 1 < len(text) and text[i + 1] in _ESCAPES:
            lit.append(_ESCAPES[text[i + 1]])
            i += 2
        else:
            lit.append(c)
            i += 1
    if lit:
        parts.append(("lit", "".join(lit)))
    return parts


def _raw(json_text: bytes) -> bytes:
    """A JSON string prints as its raw characters (kcat prints payload bytes); else JSON text."""
    if json_text.startswith(b'"'):
        return orjson.loads(json_text).encode("utf-8", "surrogateescape")
    if json_text == b"null":
        return b""
    return json_text


def _headers(line: bytes) -> bytes:
    if b'"headers"' not in line:
        return b""
    h = record.parse(line).get("headers") or {}
    if not isinstance(h, dict):
        return b""
    return ",".join(f"{k}={v if isinstance(v, str) else orjson.dumps(v).decode()}" for k, v in h.items()).encode()


def compile_template(text: str) -> Callable[[bytes], bytes]:
    """A function from a stored line to its rendering."""
    parts = parse_template(text)
    getters: list[Callable[[bytes], bytes] | bytes] = []
    for kind, v in parts:
        if kind == "lit":
            getters.append(v.encode())
        elif v == "o":
            getters.append(lambda ln: b"%d" % record.envelope(ln)[0])
        elif v == "p":
            getters.append(lambda ln: b"%d" % record.envelope(ln)[1])
        elif v == "t":
            getters.append(lambda ln: b"%d" % record.envelope(ln)[2])
        elif v == "T":
            getters.append(lambda ln: format_iso(record.envelope(ln)[2]).encode())
        elif v == "k":
            getters.append(lambda ln: _raw(record.key_bytes(ln)))
        elif v == "s":
            getters.append(lambda ln: _raw(record.value_bytes(ln)))
        elif v == "h":
            getters.append(_headers)

    def render(line: bytes) -> bytes:
        return b"".join(g if isinstance(g, bytes) else g(line) for g in getters)

    return render


def compile_plain_template(text: str) -> Callable[[int, bytes], bytes]:
    """Rendering for a plain .jsonl input: %o is the line number, %p 0, no ts/key/headers."""
    parts = parse_template(text)

    def render(lineno: int, value: bytes) -> bytes:
        out = []
        for kind, v in parts:
            if kind == "lit":
                out.append(v.encode())
            elif v == "o":
                out.append(b"%d" % lineno)
            elif v == "p":
                out.append(b"0")
            elif v == "s":
                out.append(_raw(value))
        return b"".join(out)

    return render
