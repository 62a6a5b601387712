"""The field-path rule on the Spark engine: window and join read array indexes, negative indexes,
keys that look like numbers and escaped dots as the local engine does (streamctl.storage.fieldpaths)."""

from __future__ import annotations

import orjson
import pytest

from conftest import run_cli
from streamctl.processing.joins import driver as joining
from streamctl.processing.windows.driver import WindowConfig
from streamctl.storage import fieldpaths

from test_join_spark import local_lines, spark_lines
from test_window_spark import local, on_spark, same_rows

T0 = 1_763_719_200_000
VALUES = [
    {"items": [{"sku": "A", "q": 1}, {"sku": "B", "q": 2}], "m": {"0": "x"}, "a.b": 5, "t": T0},
    {"items": [{"sku": "B", "q": 3}], "m": {"0": "y"}, "a.b": 7, "t": T0 + 1000},
    {"items": [], "m": {}, "t": T0 + 2000},
    {"items": [{"sku": "A", "q": 4}], "m": {"0": "x"}, "a.b": 1, "t": T0 + 3000},
    {"items": {"0": {"sku": "C", "q": 5}}, "m": [["x"]], "a.b": 2, "t": T0 + 4000},
]
ARRAYS = [["a", 1, T0], ["b", 2, T0 + 1000], ["a", 3, T0 + 2000], ["c", "x", T0 + 3000]]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("paths")
    data = b"".join(orjson.dumps(v) + b"\n" for v in VALUES)
    (d / "v.jsonl").write_bytes(data)
    (d / "a.jsonl").write_bytes(b"".join(orjson.dumps(v) + b"\n" for v in ARRAYS))
    run_cli("produce", str(d / "log"), "--partitions", "2", input=data, check=True)
    return {"plain": str(d / "v.jsonl"), "arrays": str(d / "a.jsonl"), "log": str(d / "log")}


@pytest.mark.spark
@pytest.mark.parametrize("src", ["plain", "log"])
@pytest.mark.parametrize("path", ["items.0.sku", "items.-1.q", "m.0", "a\\.b", "m.0.0"])
def test_window_paths_on_spark(spark, inputs, src, path):
    cfg = WindowConfig(kind="tumbling", size=3_600_000, time_field="t", by=[path],
                       aggs=["count", f"last:{path}", f"max:{path}"])
    rows, _ = local(inputs[src], cfg)
    assert rows, "the local engine gave no rows"
    assert sorted(orjson.loads(r)["key"] is None for r in rows) != [True] * len(rows) or path == "nothing"
    same_rows(on_spark(spark, inputs[src], cfg)[0], rows)


@pytest.mark.spark
def test_window_over_arrays_on_spark(spark, inputs):
    cfg = WindowConfig(kind="tumbling", size=3_600_000, time_field="2", by=["0"], aggs=["count", "sum:1"])
    rows, _ = local(inputs["arrays"], cfg)
    assert [orjson.loads(r)["key"] for r in rows] == ["a", "b", "c"]
    same_rows(on_spark(spark, inputs["arrays"], cfg)[0], rows)


@pytest.mark.spark
@pytest.mark.parametrize("kind", ["table", "stream"])
def test_join_on_an_index_on_spark(spark, inputs, kind):
    on = fieldpaths.record_path("0")
    spec = joining.JoinSpec(inputs["arrays"], inputs["arrays"], kind, on=(on, on),
                            time_field=((("value", "2"),) * 2) if kind == "stream" else (("ts",), ("ts",)),
                            within=3_600_000 if kind == "stream" else None)
    local = local_lines(spec)
    assert local
    assert spark_lines(spark, spec) == local


@pytest.mark.spark
def test_join_on_a_nested_index_on_spark(spark, inputs):
    on = fieldpaths.record_path("items.0.sku")
    spec = joining.JoinSpec(inputs["log"], inputs["log"], "stream", on=(on, on),
                            time_field=(("value", "t"), ("value", "t")), within=3_600_000)
    local = local_lines(spec)
    assert len(local) == 6  # A x2 -> 4 pairs, B 1, C 1
    assert spark_lines(spark, spec) == local
