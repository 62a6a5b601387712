"""Waiting for a log to change: inotify through watchfiles, polling where that is unavailable.

Callers re-read the files after every wake-up, so a spurious wake-up costs one
stat; a missed event costs at most `max_wait` (the watcher's own timeout),
never a lost record. watchfiles' default debounce (1.6 s, ~90 ms in practice)
is far too slow for `tail -f`; debounce and step of 1 ms give a few ms.
Set STREAMCTL_FORCE_POLLING=1 to force polling (network file systems).
"""

from __future__ import annotations

import os
import time

from streamctl import stopflag

POLL_INTERVAL = 0.01


class Waiter:
    def __init__(self, path: str | list[str], max_wait: float = 0.2, recursive: bool = True) -> None:
        paths = [path] if isinstance(path, str) else path
        self.max_wait = max_wait
        self._gen = None
        self.polling = os.environ.get("STREAMCTL_FORCE_POLLING") == "1"
        if not self.polling:
            try:
                import watchfiles

                self._gen = watchfiles.watch(
                    *paths, watch_filter=None, debounce=1, step=1, stop_event=stopflag.event(),
                    rust_timeout=int(max_wait * 1000), yield_on_timeout=True, raise_interrupt=False,
                    recursive=recursive, ignore_permission_denied=True,
                )
            except Exception:
                self._gen = None
                self.polling = True

    def wait(self, timeout: float | None = None) -> None:
        """Return when the log may have changed, `timeout` passed, or a stop was requested."""
        if stopflag.is_set():
            return
        if self._gen is not None:
            try:
                next(self._gen)
                return
            except StopIteration:
                self._gen = None
                return
            except Exception:
                # inotify limits reached or the folder vanished: fall back to polling
                self._gen = None
                self.polling = True
        delay = POLL_INTERVAL if timeout is None else min(POLL_INTERVAL, max(timeout, 0))
        stopflag.wait(delay) if delay > 0 else time.sleep(0)

    def close(self) -> None:
        if self._gen is not None:
            self._gen.close()
            self._gen = None
