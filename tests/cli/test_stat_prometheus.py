"""stat --output prometheus: the text exposition format, checked against its grammar and the official parser."""

from __future__ import annotations

import json
import re

import pytest

from conftest import run_cli
from streamctl.groups import offsets, stats
from streamctl.storage.log import open_log

from test_replay import make_log

T0 = 1_763_719_200_000

PARTITION_METRICS = {"streamctl_partition_first_offset": "first_offset",
                     "streamctl_partition_next_offset": "next_offset",
                     "streamctl_partition_records": "records",
                     "streamctl_partition_bytes": "bytes"}
GROUP_METRICS = {"streamctl_group_committed_offset": "committed",
                 "streamctl_group_lag": "lag",
                 "streamctl_group_lag_age_seconds": "lag_age_ms"}

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(rf"({_NAME})\{{({_LABEL}(?:,{_LABEL})*)\}} (-?[0-9]+(?:\.[0-9]+)?)")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')


def _unescape(v: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "\\": "\\", '"': '"'}[m.group(1)], v)


def grammar(text: str) -> dict[str, dict[tuple, float]]:
    """Check the exposition grammar by hand: HELP then TYPE gauge once per metric, before its samples,
    samples of a metric together, no series twice. Returns {metric: {sorted label items: value}}."""
    assert text.endswith("\n") and "\n\n" not in text
    metrics: dict[str, dict[tuple, float]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split(" ")[2]
            assert name not in metrics, f"{name} documented twice"
            metrics[name], current, typed = {}, name, False
            continue
        if line.startswith("# TYPE "):
            assert line == f"# TYPE {current} gauge" and not typed
            typed = True
            continue
        m = SAMPLE.fullmatch(line)
        assert m, f"not a sample line: {line!r}"
        assert m.group(1) == current and typed, f"{line!r} outside its metric's block"
        labels = tuple(sorted((k, _unescape(v)) for k, v in LABEL.findall(m.group(2))))
        assert labels not in metrics[current], f"series twice: {line!r}"
        metrics[current][labels] = float(m.group(3))
    return metrics


def expected(sts: list[stats.LogStat]) -> dict[str, dict[tuple, float]]:
    want: dict[str, dict[tuple, float]] = {m: {} for m in [*PARTITION_METRICS, *GROUP_METRICS]}
    for st in sts:
        for p in st.partitions:
            for m, field in PARTITION_METRICS.items():
                want[m][(("log", st.log), ("partition", str(p.partition)))] = getattr(p, field)
        for g in st.groups:
            labels = (("group", g.group), ("log", st.log), ("partition", str(g.partition)))
            for m, field in GROUP_METRICS.items():
                v = getattr(g, field)
                if v is not None:
                    want[m][labels] = v / 1000 if field == "lag_age_ms" else v
    return want


@pytest.fixture
def two_logs(tmp_path) -> list[str]:
    """A 3-partition log with two groups (one never committed partition 2) and a log whose path needs
    escaping in a label value (a quote, a backslash and a newline)."""
    a = str(tmp_path / "orders")
    b = str(tmp_path / 'we"ird\\na\nme')
    make_log(a, partitions=3, per_partition=15, seed=11, t0=T0)
    make_log(b, partitions=1, per_partition=6, seed=12, t0=T0 + 5000)
    offsets.commit(open_log(a), "billing", {0: 3, 1: 40})
    offsets.commit(open_log(a), "audit", {0: 0, 1: 0, 2: 0})
    offsets.commit(open_log(b), "g", {0: 2})
    return [a, b]


def test_exposition_matches_the_stats(two_logs):
    now = T0 + 3_600_000
    sts = [stats.stat(open_log(p), now) for p in two_logs]
    text = stats.prometheus(sts)
    assert grammar(text) == expected(sts)
    # the group that never committed partition 2 has lag and age there, but no committed offset
    billing2 = (("group", "billing"), ("log", two_logs[0]), ("partition", "2"))
    got = grammar(text)
    assert billing2 not in got["streamctl_group_committed_offset"]
    assert got["streamctl_group_lag"][billing2] > 0 and got["streamctl_group_lag_age_seconds"][billing2] > 0


def test_official_parser_reads_it(two_logs):
    from prometheus_client import parser  # a test dependency: missing is a failure, never a skip

    now = T0 + 3_600_000
    sts = [stats.stat(open_log(p), now) for p in two_logs]
    families = {f.name: f for f in parser.text_string_to_metric_families(stats.prometheus(sts))}
    want = expected(sts)
    assert set(families) == set(want)
    helps = {name: help_ for name, help_, _ in (*stats.PROM_PARTITION, *stats.PROM_GROUP)}
    for name, fam in families.items():
        assert fam.type == "gauge" and fam.documentation == helps[name]
        got = {tuple(sorted(s.labels.items())): s.value for s in fam.samples}
        assert all(s.name == name for s in fam.samples)
        assert got == pytest.approx(want[name]), name
    assert any(s.labels["log"] == two_logs[1] for s in families["streamctl_group_lag"].samples)


def test_from_the_shell_with_several_logs(two_logs):
    out = run_cli("stat", *two_logs, "--output", "prometheus", check=True).stdout.decode()
    got = grammar(out)
    js = json.loads(run_cli("stat", *two_logs, "--json", check=True).stdout)
    for st in js:
        for p in st["partitions"]:
            for m, field in PARTITION_METRICS.items():
                assert got[m][(("log", st["log"]), ("partition", str(p["partition"])))] == p[field]
        for g in st["groups"]:
            labels = (("group", g["group"]), ("log", st["log"]), ("partition", str(g["partition"])))
            assert got["streamctl_group_lag"][labels] == g["lag"]
            # two runs, two clocks: the ages agree to within the time between them
            assert got["streamctl_group_lag_age_seconds"][labels] == pytest.approx(g["lag_age_ms"] / 1000, abs=60)
            assert got["streamctl_group_committed_offset"].get(labels) == g["committed"]
    # what the textfile collector needs from a cron job: data on stdout, exit 0, nothing on stderr
    p = run_cli("stat", *two_logs, "-o", "prometheus")
    assert p.returncode == 0 and p.stderr == b""


def test_a_threshold_still_writes_the_metrics(two_logs):
    p = run_cli("stat", two_logs[0], "--output", "prometheus", "--fail-lag-age", "1m")
    assert p.returncode == 3 and b"streamctl_group_lag_age_seconds{" in p.stdout
    assert b"group billing" in p.stderr


def test_log_without_groups_has_no_group_samples(tmp_path):
    path = str(tmp_path / "log")
    run_cli("produce", path, input="1\n2\n", check=True)
    got = grammar(run_cli("stat", path, "--output", "prometheus", check=True).stdout.decode())
    assert got["streamctl_partition_records"] == {(("log", path), ("partition", "0")): 2}
    assert got["streamctl_group_lag"] == {}
