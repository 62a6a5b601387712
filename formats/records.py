"""Renderings for consume/tail: of a stored line (the line itself, its value, or a template), and of
a plain file's line (as a record envelope, the value alone, or a template)."""

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


def _value_alone(offset: int, value: bytes) -> bytes:
    return value + b"\n"


def plain_renderer(value: bool, template: str | None, name: str = "") -> Callable[[int, bytes], bytes]:
    """How consume and tail print line `offset` of a plain file, whose text is `value`."""
    if template is not None:
        from streamctl.formats.template import compile_plain_template

        return compile_plain_template(template, name)
    if value:
        return _value_alone
    from streamctl.storage.plainfile import envelope_line

    return envelope_line
