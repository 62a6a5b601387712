"""Helpers shared by the subcommand modules (kept tiny: imported at --help time)."""

from __future__ import annotations

import sys


def info(msg: str) -> None:
    """A diagnostic on stderr; never fails the command if stderr is gone."""
    try:
        sys.stderr.write(f"streamctl: {msg}\n")
        sys.stderr.flush()
    except OSError:
        pass


def write_job(text: str, target: str) -> None:
    """--emit-job: the generated PySpark job to stdout (`-`) or to an executable file, replaced atomically."""
    if target == "-":
        from streamctl.formats.writer import Output

        w = Output()
        w.write(text.encode())
        w.flush()
        return
    from streamctl.storage.fsutil import atomic_write

    atomic_write(target, text.encode(), 0o755)
    info(f"wrote the Spark job to {target}; run it with: spark-submit {target}  (or: python {target})")


def example(*lines: str) -> str:
    """An epilog block that click prints verbatim (\\b stops re-wrapping)."""
    return "\b\nExamples:\n" + "\n".join(f"  {ln}" for ln in lines)


def parse_size(text: str) -> int:
    from streamctl.errors import UsageError

    s = text.strip().upper().removesuffix("B")
    mult = 1
    for suffix, m in (("KI", 1 << 10), ("MI", 1 << 20), ("GI", 1 << 30), ("K", 1000), ("M", 10**6), ("G", 10**9)):
        if s.endswith(suffix):
            s, mult = s[: -len(suffix)], m
            break
    try:
        n = int(float(s) * mult)
    except ValueError:
        raise UsageError(f"invalid size {text!r} (use bytes, or 64KiB, 1MiB, 2GB)") from None
    if n < 0:
        raise UsageError(f"invalid size {text!r}: must not be negative")
    return n
