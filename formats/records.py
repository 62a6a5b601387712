"""Renderings of a stored line for consume/tail: the line itself, its value, or a template."""

from __future__ import annotations

from collections.abc import Callable

from streamctl.storage import record


def value_line(line: bytes) -> bytes:
    return record.value_bytes(line) + b"\n"


def renderer(value: bool, template: str | None, name: str = "") -> Callable[[bytes], bytes] | None:
    """None means "the stored line unchanged" (zero-copy passthrough). `name` is the log's name
    that a template's %t prints."""
    if template is not None:
        from streamctl.formats.template import compile_template

        return compile_template(template, name)
    if value:
        return value_line
    return None
