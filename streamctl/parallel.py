"""Run a function over a few chunks of work in forked processes, one core each.

For CPU-bound scans over files that are immutable while they run (closed
segments under the compaction lock): Python holds the GIL through `re` and
`bytes` methods, so threads would not help. The parent works on the first
chunk itself; each other chunk runs in a forked child that sends its result
back pickled through a pipe and exits. Children only read: if the parent is
killed, a child finishes its chunk, fails to write, and dies; nothing on disk
depends on them.
"""

from __future__ import annotations

import os
import pickle
import signal
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from streamctl import stopflag
from streamctl.errors import Interrupted, StorageError, StreamctlError

T = TypeVar("T")
R = TypeVar("R")


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def fork_map(func: Callable[[T], R], chunks: Sequence[T]) -> list[R]:
    """[func(c) for c in chunks], the chunks after the first in child processes."""
    if len(chunks) <= 1 or not hasattr(os, "fork"):
        return [func(c) for c in chunks]
    children: list[tuple[int, int]] = []
    try:
        for chunk in chunks[1:]:
            children.append(_spawn(func, chunk))
        results = [func(chunks[0])]
        while children:
            pid, fd = children.pop(0)
            results.append(_collect(pid, fd))
        return results
    finally:
        for pid, fd in children:  # only after an error: stop and reap the rest
            os.close(fd)
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass


def _spawn(func: Callable[[T], R], chunk: T) -> tuple[int, int]:
    r, w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(w)
        return pid, r
    code = 0
    try:
        os.close(r)
        # Ctrl-C reaches the whole process group: a child just stops, the parent decides.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        try:
            payload = pickle.dumps((True, func(chunk)), protocol=pickle.HIGHEST_PROTOCOL)
        except StreamctlError as e:
            payload = pickle.dumps((False, (type(e).__name__, str(e))))
        except Exception as e:  # noqa: BLE001 - reported by the parent as one clear error
            payload = pickle.dumps((False, ("StorageError", f"{type(e).__name__}: {e}")))
        with os.fdopen(w, "wb") as f:
            f.write(payload)
    except BaseException:  # noqa: BLE001 - a child never returns into the caller's code
        code = 1
    finally:
        os._exit(code)


def _collect(pid: int, fd: int) -> Any:
    with os.fdopen(fd, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        if stopflag.is_set():
            raise Interrupted("interrupted")
        how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
        raise StorageError(f"a worker process died ({how})")
    ok, value = pickle.loads(data)
    if ok:
        return value
    raise rebuilt_error(*value)


def rebuilt_error(name: str, message: str) -> StreamctlError:
    """A child's StreamctlError, from its class name and message (anything else: a StorageError)."""
    from streamctl import errors

    cls = getattr(errors, name, StorageError)
    return cls(message) if isinstance(cls, type) and issubclass(cls, StreamctlError) else StorageError(message)
