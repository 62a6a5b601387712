"""A stop flag set by SIGINT/SIGTERM; loops check it, commit, and return (kcat's way)."""

from __future__ import annotations

import signal
import threading

_event = threading.Event()
_signal: list[int] = []


def is_set() -> bool:
    return _event.is_set()


def signum() -> int | None:
    return _signal[0] if _signal else None


def wait(timeout: float) -> bool:
    return _event.wait(timeout)


def event() -> threading.Event:
    """The flag itself, for a library that takes a stop event (watchfiles)."""
    return _event


def _handler(sig: int, frame: object) -> None:
    if _event.is_set() and sig == signal.SIGINT:
        # a second Ctrl-C: the user means it
        raise KeyboardInterrupt
    _signal.append(sig)
    _event.set()


def end(message: str = "interrupted") -> None:
    """How a command ends after a stop: SIGINT is Interrupted (exit 130), SIGTERM a clean stop."""
    if signum() == signal.SIGINT:
        from streamctl.errors import Interrupted

        raise Interrupted(message)


def install() -> None:
    """Only long-running commands install this; others keep Python's defaults."""
    signal.signal(signal.SIGINT, _handler)
    signal.signal(signal.SIGTERM, _handler)


def reset() -> None:
    _event.clear()
    _signal.clear()
