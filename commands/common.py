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


def example(*lines: str) -> str:
    """An epilog block that click prints verbatim (\\b stops re-wrapping)."""
    return "\b\nExamples:\n" + "\n".join(f"  {ln}" for ln in lines)


def parse_size(text: str, flag: str = "size") -> int:
    """A size in bytes (`64KiB`, `1MiB`, `2GB`): numbers.parse_size, the one definition."""
    from streamctl.commands.numbers import parse_size as parse

    return parse(text, flag)
