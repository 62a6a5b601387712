"""Connection strings: parsed by libpq's rules, and never printed with a password."""

from __future__ import annotations

import re

from streamctl.errors import UsageError

_URI_PASSWORD = re.compile(r"(postgres(?:ql)?://[^:/@?#]*:)([^@/?#]*)@")
# a quoted value runs to its closing quote, or to the end of a DSN that never closes it; an unquoted
# one to the first whitespace that no backslash escapes (libpq reads `TOP\ SECRET` as one value)
_KV_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*(?:'|$)|(?:\\.|\\$|[^\s\\])+)",
                          re.IGNORECASE | re.DOTALL)
_QUERY_PASSWORD = re.compile(r"([?&]password=)([^&#]*)", re.IGNORECASE)


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """Any password in text (a URI's user:password@, password=..., ?password=...) replaced by ***,
    and each of `secrets` wherever it stands (libpq's message about a DSN may quote a piece of it)."""
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    text = _URI_PASSWORD.sub(r"\1***@", text)
    text = _KV_PASSWORD.sub(r"\1***", text)
    return _QUERY_PASSWORD.sub(r"\1***", text)


def _passwords(dsn: str) -> tuple[str, ...]:
    """The password-like pieces of a DSN, as written and percent-decoded, quotes taken off."""
    from urllib.parse import unquote

    found = [m.group(2) for m in _URI_PASSWORD.finditer(dsn)] + [m.group(2) for m in _QUERY_PASSWORD.finditer(dsn)]
    found += [m.group(2).strip("'") for m in _KV_PASSWORD.finditer(dsn)]
    found += [re.sub(r"\\(.)", r"\1", s, flags=re.DOTALL) for s in found]  # as libpq reads the escapes
    return tuple({piece for s in found if s for piece in (s, unquote(s))})


def parse(dsn: str) -> dict[str, str]:
    """The DSN's parameters (libpq's parser); a DSN libpq refuses is a usage error (exit 2)."""
    from psycopg2.extensions import parse_dsn

    try:
        params = dict(parse_dsn(dsn))
    except Exception as e:  # psycopg2.ProgrammingError: libpq's own message, which may quote a piece of the DSN
        secrets = _passwords(dsn)
        reason = redact(str(e).strip().splitlines()[0] if str(e).strip() else "invalid", secrets)
        raise UsageError(f"bad DSN {redact(dsn, secrets)!r}: {reason}") from None
    # libpq checks these only when it connects; a typo in them is a usage error all the same
    for name in ("port", "connect_timeout", "keepalives", "keepalives_idle"):
        for part in params.get(name, "0").split(","):
            if part.strip() and not part.strip().isdecimal():
                raise UsageError(f"bad DSN {redact(dsn)!r}: {name} must be a number, not {part.strip()!r}")
    return params


def without_password(params: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in params.items() if k != "password"}


def shown(params: dict[str, str]) -> str:
    """A DSN for messages and for the log's metadata: key=value, without the password."""
    from psycopg2.extensions import make_dsn

    return make_dsn(**without_password(params))
