"""Kafka's default partitioner: murmur2 of the UTF-8 key, masked positive, modulo N."""

from __future__ import annotations

import itertools
from collections import deque
from itertools import compress, count, cycle, islice, repeat
from operator import eq, is_

import orjson

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
_CACHE_KEYS = 100_000  # partitions remembered per key string (a log has far fewer keys than records)


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2` (seed 0x9747b28c), returned as a signed 32-bit int."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    end = length - (length & 3)
    for i in range(0, end, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length & 3
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def partition_for_key(key: str, partitions: int) -> int:
    return (murmur2(key.encode("utf-8", "surrogatepass")) & 0x7FFFFFFF) % partitions


class Partitioner:
    """Keys go where Kafka would put them; null keys are spread round-robin."""

    def __init__(self, partitions: int, start: int = 0) -> None:
        self.partitions = partitions
        self._cycle = itertools.cycle(range(partitions))
        for _ in range(start % partitions):
            next(self._cycle)
        self._cache: dict[str | None, int] = {}  # None is never stored: it has no fixed partition
        self._text_cache: dict[bytes, int] = {}  # the same per key JSON text (b"null" never stored)

    def spread(self, count: int) -> int:
        """Start partition for `count` null-key records spread round-robin; advances the cycle."""
        start = next(self._cycle)
        for _ in range((count - 1) % self.partitions):
            next(self._cycle)
        return start

    def __call__(self, key: str | None) -> int:
        if key is None:
            return next(self._cycle)
        p = self._cache.get(key)
        if p is None:
            p = partition_for_key(key, self.partitions)
            if len(self._cache) < _CACHE_KEYS:
                self._cache[key] = p
        return p

    def many(self, keys: list[str | None]) -> list[int]:
        """The partition of each key in order: the same as calling self on each, in C-level steps.

        Keys repeat, so a batch is mostly cache hits looked up by a C-level map; murmur2
        runs once per new key. Null keys take the next places in the round-robin, in order.
        """
        cache = self._cache
        try:
            return list(map(cache.__getitem__, keys))
        except KeyError:
            pass
        missing = set(keys).difference(cache)
        missing.discard(None)
        if len(cache) + len(missing) > _CACHE_KEYS:
            cache.clear()  # bounded: start over rather than grow with a stream of new keys
            missing = set(keys)
            missing.discard(None)
        n = self.partitions
        for k in missing:
            cache[k] = partition_for_key(k, n)  # type: ignore[arg-type]  # None discarded above
        got: list = list(map(cache.get, keys))
        nulls = list(compress(count(), map(is_, keys, repeat(None))))
        if nulls:
            start = self.spread(len(nulls))
            deque(map(got.__setitem__, nulls, islice(cycle(range(n)), start, start + len(nulls))), maxlen=0)
        return got

    def many_texts(self, texts: list) -> list[int]:
        """many() for keys given as JSON texts as orjson writes them (bytes or buffers; null for no key)."""
        texts = list(map(bytes, texts))
        cache = self._text_cache
        got: list = list(map(cache.get, texts))
        if None not in got:
            return got
        missing = set(compress(texts, map(is_, got, repeat(None))))
        missing.discard(b"null")
        if missing:
            if len(cache) + len(missing) > _CACHE_KEYS:
                cache.clear()
                missing = set(texts)
                missing.discard(b"null")
            for t in missing:
                cache[t] = self(orjson.loads(t))  # a string key: no place in the round-robin taken
            got = list(map(cache.get, texts))
        nulls = list(compress(count(), map(eq, texts, repeat(b"null"))))
        if nulls:
            n = self.partitions
            start = self.spread(len(nulls))
            deque(map(got.__setitem__, nulls, islice(cycle(range(n)), start, start + len(nulls))), maxlen=0)
        return got
