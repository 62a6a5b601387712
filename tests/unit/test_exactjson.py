"""exactjson: the digit-run check never misses an integer orjson cannot read exactly."""

from __future__ import annotations

import random

import orjson

from streamctl.processing import exactjson


def test_a_run_of_19_digits_is_found_wherever_it_is():
    rnd = random.Random(3)
    for _ in range(2000):
        head = bytes(rnd.choice(b'ab:", .-{}[]0123456789') for _ in range(rnd.randrange(0, 40)))
        head = head.rstrip(b"0123456789")
        run = bytes(rnd.choice(b"0123456789") for _ in range(rnd.randrange(19, 30)))
        tail = b"," + bytes(rnd.choice(b"ab12 ") for _ in range(rnd.randrange(0, 40)))
        text = b"x\n" + head + run + tail
        assert exactjson.may_hold_big_int(text), text
        assert exactjson._run_lines(text) == [1], text
    # the check over every other byte may be wrong the other way, the exact one is not
    assert exactjson._run_lines(b'{"ts":1763719200123,"at":"2025-11-21T00:00:00.008Z","x":0.12345678901234567}') is None


def test_loads_and_dumps_keep_big_integers_exact():
    line = b'{"a":[100000000000000000000,{"b":-9223372036854775809}],"c":1e20,"d":18446744073709551615}'
    value = exactjson.loads(line)
    assert value == {"a": [10**20, {"b": -(2**63) - 1}], "c": 1e20, "d": 2**64 - 1}
    assert type(value["c"]) is float
    assert exactjson.dumps(value) == line.replace(b"1e20", orjson.dumps(1e20))
    assert exactjson.exact_all([orjson.loads(line), 1], None, line + b"\n1") == [value, 1]
