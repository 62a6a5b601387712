"""One field-path rule in every flag that takes a path: --key-field, --where, --by, --agg,
--time-field and --on read the same value (streamctl.storage.fieldpaths.get), on logs and plain
files: arrays at the top level and nested, negative indexes, keys that look like numbers, keys
with dots (`a\\.b`), missing fields and headers."""

from __future__ import annotations

import orjson
import pytest

from conftest import run_cli
from streamctl.storage import fieldpaths

T0 = 1_763_719_200_000

VALUES = [
    {"items": [{"sku": "A", "q": 1}, {"sku": "B", "q": 2}], "m": {"0": "x"}, "a.b": 5, "t": T0},
    {"items": [{"sku": "B", "q": 3}], "m": {"0": "y"}, "a.b": 7, "t": T0 + 1000},
    {"items": [], "m": {}, "t": T0 + 2000},
    {"items": [{"sku": "A", "q": 4}], "m": {"0": "x"}, "a.b": 1, "t": T0 + 3000},
    {"items": {"0": {"sku": "C", "q": 5}}, "m": [["x"]], "a.b": 2, "t": T0 + 4000},
]
ARRAYS = [["a", 1, T0], ["b", 2, T0 + 1000], ["a", 3, T0 + 2000], ["c", "x", T0 + 3000]]
PATHS = ["items.0.sku", "items.-1.q", "m.0", "a\\.b", "value.items.0.q", "nothing.here", "m.0.0"]


def _get(value, path: str):
    return fieldpaths.get({"value": value}, fieldpaths.record_path(path))


@pytest.fixture(params=["plain", "log"])
def source(request, tmp_path) -> tuple[str, list]:
    if request.param == "plain":
        f = tmp_path / "f.jsonl"
        f.write_bytes(b"".join(orjson.dumps(v) + b"\n" for v in VALUES))
        return str(f), VALUES
    log = str(tmp_path / "log")
    run_cli("produce", log, "--partitions", "2", input=b"".join(orjson.dumps(v) + b"\n" for v in VALUES), check=True)
    return log, VALUES


@pytest.mark.parametrize("path", PATHS)
def test_where_selects_by_the_rule(source, path):
    src, values = source
    want = [v for v in values if _get(v, path) is not None]
    got = run_cli("consume", src, "--value", "--where", f"{path} != null", check=True).stdout.splitlines()
    assert sorted(orjson.loads(x)["t"] for x in got) == sorted(v["t"] for v in want)


@pytest.mark.parametrize("path", PATHS)
def test_by_and_agg_read_the_rule(source, path):
    src, values = source
    out = run_cli("window", src, "--tumbling", "1h", "--time-field", "t", "--by", path, "--agg", "count",
                  "--agg", f"last=last:{path}", check=True).stdout.splitlines()
    got = {orjson.dumps(r["key"]): (r["count"], r["last"]) for r in map(orjson.loads, out)}
    want: dict[bytes, tuple[int, object]] = {}
    for v in values:
        k = orjson.dumps(_get(v, path))
        n = want.get(k, (0, None))[0]
        want[k] = (n + 1, _get(v, path))
    assert got == want


def test_numbers_in_arrays_aggregate(tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_bytes(b"".join(orjson.dumps(v) + b"\n" for v in ARRAYS))
    out = run_cli("window", str(f), "--tumbling", "1h", "--time-field", "2", "--by", "0", "--agg", "sum:1",
                  "--agg", "n=count", check=True).stdout.splitlines()
    got = {r["key"]: (r["sum_1"], r["n"]) for r in map(orjson.loads, out)}
    assert got == {"a": (4, 2), "b": (2, 1), "c": (None, 1)}
    assert b"1 value" in run_cli("window", str(f), "--tumbling", "1h", "--time-field", "-1", "--by", "0",
                                 "--agg", "sum:1").stderr  # "x" is not a number: counted, said


def test_join_on_an_array_index(tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_bytes(b"".join(orjson.dumps(v) + b"\n" for v in ARRAYS))
    rows = [orjson.loads(x) for x in run_cli("join", str(f), str(f), "--table", "--on", "0",
                                             check=True).stdout.splitlines()]
    assert [r["key"] for r in rows] == ["a", "b", "a", "c"]
    assert all(r["left"][0] == r["right"][0] for r in rows)
    within = [orjson.loads(x) for x in run_cli("join", str(f), str(f), "--within", "1h", "--on", "0",
                                               "--time-field", "2", check=True).stdout.splitlines()]
    assert sorted((ARRAYS.index(r["left"]), ARRAYS.index(r["right"])) for r in within) == sorted(
        (i, j) for i, a in enumerate(ARRAYS) for j, b in enumerate(ARRAYS) if a[0] == b[0])


def test_join_paths_on_logs(tmp_path):
    left, right = str(tmp_path / "l"), str(tmp_path / "r")
    data = b"".join(orjson.dumps(v) + b"\n" for v in VALUES)
    run_cli("produce", left, input=data, check=True)
    run_cli("produce", right, input=data, check=True)
    rows = [orjson.loads(x) for x in run_cli("join", left, right, "--within", "1h", "--time-field", "t",
                                             "--on", "items.0.sku", check=True).stdout.splitlines()]
    keys = [_get(v, "items.0.sku") for v in VALUES]
    want = sorted((a, b) for a in range(5) for b in range(5) if keys[a] is not None and keys[a] == keys[b])
    got = sorted((VALUES.index(r["left"]), VALUES.index(r["right"])) for r in rows)
    assert got == want and all(r["key"] == keys[VALUES.index(r["left"])] for r in rows)


@pytest.mark.parametrize("path", ["items.0.sku", "items.-1.sku", "m.0", "a\\.b"])
def test_key_field_reads_the_rule(tmp_path, path):
    log = str(tmp_path / "log")
    values = [v for v in VALUES if type(_get(v, path)) in (str, int)]
    run_cli("produce", log, "--key-field", path, input=b"".join(orjson.dumps(v) + b"\n" for v in values),
            check=True)
    got = [orjson.loads(x)["key"] for x in run_cli("consume", log, check=True).stdout.splitlines()]
    assert got == [str(_get(v, path)) for v in values]


def test_headers_and_missing_paths_are_null(tmp_path):
    log = str(tmp_path / "log")
    env = [{"key": "k", "value": v, "headers": {"h": "one"} if i % 2 else {}} for i, v in enumerate(VALUES)]
    run_cli("produce", log, "--envelope", input=b"".join(orjson.dumps(e) + b"\n" for e in env), check=True)
    out = run_cli("window", log, "--tumbling", "1h", "--time-field", "t", "--by", "headers.h",
                  check=True).stdout.splitlines()
    assert {orjson.dumps(r["key"]): r["count"] for r in map(orjson.loads, out)} == {b'"one"': 2, b"null": 3}
    assert len(run_cli("consume", log, "--where", "headers.h == one", check=True).stdout.splitlines()) == 2
    assert len(run_cli("consume", log, "--where", "headers.nope == null", check=True).stdout.splitlines()) == 5


def test_a_bad_path_is_a_usage_error(tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_text("{}\n")
    for args in (["consume", str(f), "--where", "a..b == 1"], ["window", str(f), "--tumbling", "1m", "--by", "a."]):
        p = run_cli(*args)
        assert p.returncode == 2 and b"invalid field path" in p.stderr and b"Traceback" not in p.stderr


@pytest.mark.parametrize("command", ["consume", "tail", "replay"])
@pytest.mark.parametrize("form", ["plain", "log"])
def test_where_over_objects_and_arrays_mixed(tmp_path, command, form):
    """A value of another JSON type (a top-level array among objects) is read by the same rule, on a
    plain file as on a log, and never stops the command."""
    mixed = [*VALUES[:2], ["A", 9], VALUES[3], ["B", 8]]
    data = b"".join(orjson.dumps(v) + b"\n" for v in mixed)
    src = str(tmp_path / "f.jsonl")
    if form == "plain":
        (tmp_path / "f.jsonl").write_bytes(data)
    else:
        src = str(tmp_path / "log")
        run_cli("produce", src, input=data, check=True)
    extra = ["-n", "100"] if command == "tail" else []
    for path, lit in (("items.0.sku", '"A"'), ("0", '"A"'), ("a\\.b", "7"), ("1", "8"), ("m.0", '"x"')):
        value = [] if command == "replay" else ["--value"]  # replay writes records
        out = run_cli(command, src, *extra, *value, "--where", f"{path} == {lit}", check=True).stdout
        got = [orjson.loads(x) for x in out.splitlines()]
        if command == "replay":
            got = [r["value"] for r in got]
        want = [v for v in mixed if orjson.dumps(_get(v, path)) == lit.encode()]
        assert got == want, (path, out)


PLAIN_KINDS = [["--within", "3s", "--how", "outer"], ["--table", "--how", "left"],
               ["--table", "--how", "left", "--as-of", "event-time"], ["--tables"]]


@pytest.mark.parametrize("kind", PLAIN_KINDS, ids=lambda k: " ".join(k))
@pytest.mark.parametrize("output", ["jsonl", "csv"])  # the batch kernels write JSON lines; CSV takes the record path
def test_join_reads_a_plain_files_offset_and_partition(tmp_path, kind, output):
    """A plain file's offset is its line number from 0 (a blank line counted) and its partition 0, in
    --on and --time-field as in consume --where and window --by."""
    left, right = tmp_path / "l.jsonl", tmp_path / "r.jsonl"
    left.write_text('{"a":"x"}\n{"a":"y"}\n{"a":"z"}\n{"a":"w"}\n')
    right.write_text('{"b":0}\n\n{"b":2}\n')
    assert [orjson.loads(x)["b"] for x in run_cli("consume", str(right), "--value", "--where", "offset == 2",
                                                    check=True).stdout.splitlines()] == [2]

    def joined(*args: str) -> list[tuple]:
        out = run_cli("join", str(left), str(right), *kind, *args, "--time-field", "offset", "-o", output,
                      check=True).stdout.decode()
        if output == "jsonl":
            rows = [orjson.loads(x) for x in out.splitlines()]
        else:
            import csv

            rows = [{c: orjson.loads(v) if v and c != "op" else None for c, v in r.items()}
                    for r in csv.DictReader(out.splitlines())]
        return sorted((r["key"], (r["left"] or {}).get("a"), (r["right"] or {}).get("b")) for r in rows)

    by_offset = joined("--on", "offset")
    assert (0, "x", 0) in by_offset and (2, "z", 2) in by_offset
    assert not [r for r in by_offset if r[1] and r[2] is not None and r[0] not in (0, 2)]
    by_partition = joined("--on", "partition")
    assert by_partition and all(r[0] == 0 for r in by_partition)
