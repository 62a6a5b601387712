"""Competing consumers: the members of a group split its partitions with flock, no coordinator.

Files, all in `LOG/groups/` (G: the group's stem, groups/files.py), created and
opened through an fd on that folder that never follows a symlink:

    .G.m<N>.member   a member's slot: locked (LOCK_EX) by the live member that
                     holds it, containing the partitions it wants as JSON
    .G.p<N>.claim    partition N's claim: locked by the member reading it

Locks die with their process (kill -9 included), so a dead member's partitions
become free without any clean-up. Every member computes the same assignment
from the live slots (partitions wanted by the fewest members first, then in
order, each to the eligible member with the fewest so far, ties to the lower
slot), releases what is assigned elsewhere
(after committing it) and claims what is assigned to it once free. A partition
left free for a few checks is claimed by anyone who wants it, so no partition
is ever left unread because of a stale view.
"""

from __future__ import annotations

import errno
import fcntl
import os
from dataclasses import dataclass, field

import orjson

from streamctl.groups import files
from streamctl.storage.fsutil import NOFOLLOW, open_lock
from streamctl.storage.log import Log

# Checks a partition must be seen free before anyone who wants it takes it.
FREE_GRACE = 3


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise


@dataclass
class Change:
    claimed: list[int] = field(default_factory=list)
    to_release: list[int] = field(default_factory=list)


class Membership:
    def __init__(self, log: Log, group: str, wanted: list[int], register: bool = True) -> None:
        self.log = log
        self.group = group
        self.wanted = sorted(wanted)
        # every file below is opened in this folder, never through a symlink
        self.dir_fd = files.open_dir(log)
        self.held: dict[int, int] = {}  # partition -> claim fd
        self._free_seen: dict[int, int] = {}
        self._slot_fd = -1
        # A run that does not follow takes only free partitions and takes no part in
        # balancing: registering would make followers hand it partitions it never reads.
        try:
            self.slot, self._slot_fd = self._take_slot() if register else (-1, -1)
        except BaseException:
            os.close(self.dir_fd)
            raise

    def _slot_path(self, n: int) -> str:
        return files.path(self.log, self.group, f"m{n}.member")

    def _claim_path(self, p: int) -> str:
        return files.path(self.log, self.group, f"p{p}.claim")

    def _take_slot(self) -> tuple[int, int]:
        n = 0
        while True:
            fd = open_lock(self._slot_path(n), dir_fd=self.dir_fd)
            if _try_lock(fd):
                data = orjson.dumps({"pid": os.getpid(), "partitions": self.wanted})
                os.ftruncate(fd, 0)
                os.pwrite(fd, data, 0)
                return n, fd
            os.close(fd)
            n += 1

    def _members(self) -> list[tuple[int, list[int]]]:
        """(slot, wanted partitions) of every live member, ours included."""
        prefix, suffix = f".{files.stem(self.group)}.m", ".member"
        out = []
        for name in os.listdir(self.dir_fd):
            if not (name.startswith(prefix) and name.endswith(suffix)):
                continue
            num = name[len(prefix):-len(suffix)]
            if not num.isdecimal():
                continue
            n = int(num)
            if n == self.slot:
                out.append((n, self.wanted))
                continue
            try:
                fd = os.open(name, os.O_RDWR | NOFOLLOW, dir_fd=self.dir_fd)
            except OSError:
                continue
            try:
                if _try_lock(fd):
                    continue  # nobody holds it: a member that ended (the lock goes with the close)
                try:
                    wants = orjson.loads(os.pread(fd, 1 << 20, 0))["partitions"]
                    wants = [p for p in wants if isinstance(p, int)]
                except (orjson.JSONDecodeError, KeyError, TypeError):
                    wants = list(range(self.log.partitions))  # still being written: assume all
                out.append((n, wants))
            finally:
                os.close(fd)
        out.sort()
        return out

    def assignment(self) -> dict[int, int]:
        """partition -> slot of the member that should read it."""
        members = self._members()
        counts = {slot: 0 for slot, _ in members}
        wants = {slot: set(w) for slot, w in members}
        out: dict[int, int] = {}
        every = set().union(*wants.values()) if wants else set()
        eligible_of = {p: [s for s in counts if p in wants[s]] for p in every}
        # Partitions fewer members can take go first, so a member limited to
        # --partition P gets P rather than standing by forever.
        for p in sorted(every, key=lambda p: (len(eligible_of[p]), p)):
            eligible = eligible_of[p]
            best = min(eligible, key=lambda s: (counts[s], s))
            out[p] = best
            counts[best] += 1
        return out

    def _try_claim(self, p: int) -> bool:
        fd = open_lock(self._claim_path(p), dir_fd=self.dir_fd)
        if _try_lock(fd):
            self.held[p] = fd
            self._free_seen.pop(p, None)
            return True
        os.close(fd)
        return False

    def _is_free(self, p: int) -> bool:
        fd = open_lock(self._claim_path(p), dir_fd=self.dir_fd)
        try:
            if _try_lock(fd):
                return True  # closing the fd drops the probe's lock
            return False
        finally:
            os.close(fd)

    def rebalance(self) -> Change:
        """Claim what is ours and free, say what to release (the caller commits, then release())."""
        assign = self.assignment()
        change = Change()
        for p in self.wanted:
            if p in self.held:
                if assign.get(p, self.slot) != self.slot:
                    change.to_release.append(p)
                continue
            if assign.get(p) == self.slot:
                if self._try_claim(p):
                    change.claimed.append(p)
            elif self._is_free(p):
                seen = self._free_seen.get(p, 0) + 1
                self._free_seen[p] = seen
                if seen >= FREE_GRACE and self._try_claim(p):
                    change.claimed.append(p)
            else:
                self._free_seen.pop(p, None)
        return change

    def claim_free(self) -> list[int]:
        """Claim every wanted partition that is free now (a run that does not follow)."""
        return [p for p in self.wanted if p not in self.held and self._try_claim(p)]

    def release(self, partitions: list[int]) -> None:
        for p in partitions:
            fd = self.held.pop(p, None)
            if fd is not None:
                os.close(fd)  # closing drops the flock

    def close(self) -> None:
        self.release(list(self.held))
        if self._slot_fd >= 0:
            os.close(self._slot_fd)
            self._slot_fd = -1
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1
