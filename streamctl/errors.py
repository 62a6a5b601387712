"""Exceptions the core raises; the CLI turns them into `streamctl: ...` and an exit code."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILURE = 1
    USAGE = 2
    THRESHOLD = 3
    DATA = 65
    INTERRUPTED = 130
    PIPE = 141


class StreamctlError(Exception):
    """Base of every error meant for a user: the message is printed as is."""

    exit_code: int = ExitCode.FAILURE

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(StreamctlError):
    exit_code = ExitCode.USAGE


class DataError(StreamctlError):
    """Bad input data (exit 65, EX_DATAERR)."""

    exit_code = ExitCode.DATA


class StorageError(StreamctlError):
    """The log on disk is damaged or cannot be written."""

    exit_code = ExitCode.FAILURE


class ThresholdError(StreamctlError):
    exit_code = ExitCode.THRESHOLD


class Interrupted(StreamctlError):
    exit_code = ExitCode.INTERRUPTED


class BrokenPipe(StreamctlError):
    exit_code = ExitCode.PIPE
