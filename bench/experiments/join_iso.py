"""Experiment: the two join workloads on the realistic data shape, streamctl beside DuckDB in one run.

    python -m bench.experiments.join_iso DIR [--runs N] [--only ss|enrich] [--check] [--base TREE]

DIR holds bench/datagen.py's files: searches.jsonl and clicks.jsonl (write_searches_clicks_iso),
events.jsonl (write_events_iso) and profiles.jsonl (write_profiles_iso). Each run times every
contestant once, interleaved (the machine is shared: compare within a round), as wall seconds
and CPU seconds (user+system of the process and its children). `--check` also has DuckDB compute
streamctl's exact rows in streamctl's order (an interval join ordered by the later event's input
position, then the earlier's; an enrichment with the table as of the end, all profiles coming
first in time) and compares them line for line with streamctl's output. `--base TREE` adds a
second streamctl, imported from TREE (a checkout whose streamctl/ holds the commands/ and
formats/ packages too, e.g. `git archive REV streamctl commands formats`), as "before".
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HOUR = 3_600_000

SS_FLAGS = ["--within", "1h", "--on", "value.value.session", "--time-field", "value.ts"]
EN_FLAGS = ["--table", "--how", "left", "--on", "value.key", "--time-field", "value.ts"]


def _lines_sql(path: Path) -> str:
    """A file's lines as (n, line): the line number from 0 and its text."""
    return (f"(SELECT row_number() OVER () - 1 AS n, line FROM read_csv('{path}', columns={{'line': 'VARCHAR'}}, "
            "delim='\\x01', quote='', escape='', header=false, auto_detect=false))")


def duck_ss(left: Path, right: Path, out: Path) -> str:
    """The interval join as one would write it in DuckDB (the timed reference)."""
    return f"""COPY (SELECT s.value.session AS "key", s AS "left", c AS "right"
      FROM read_json('{left}', format='newline_delimited') s
      JOIN read_json('{right}', format='newline_delimited') c
        ON s.value.session = c.value.session
       AND c.ts BETWEEN s.ts - INTERVAL 1 HOUR AND s.ts + INTERVAL 1 HOUR) TO '{out}' (FORMAT json)"""


def duck_enrich(events: Path, profiles: Path, out: Path) -> str:
    """The enrichment (latest profile per key) in DuckDB (the timed reference; rows in no particular
    order, which is DuckDB's cheapest: ordering them by event costs it another ~30%)."""
    return f"""COPY (WITH lp AS (SELECT * FROM read_json('{profiles}', format='newline_delimited')
                       QUALIFY row_number() OVER (PARTITION BY "key" ORDER BY ts DESC) = 1)
      SELECT e."key" AS "key", e AS "left", lp AS "right"
      FROM read_json('{events}', format='newline_delimited') e LEFT JOIN lp ON e."key" = lp."key") TO '{out}' (FORMAT json)"""


def exact_ss(con, left: Path, right: Path) -> list[str]:  # noqa: ANN001
    """streamctl's rows for the searches x clicks join, in its order (both files in time order, so
    each line's merge key is its time and the watermark at an event is its own time)."""
    q = f"""
      WITH s AS (SELECT n, line, json_extract_string(line, '$.value.session') AS k,
                        epoch_ms(CAST(json_extract_string(line, '$.ts') AS TIMESTAMP)) AS t FROM {_lines_sql(left)}),
           c AS (SELECT n, line, json_extract_string(line, '$.value.session') AS k,
                        epoch_ms(CAST(json_extract_string(line, '$.ts') AS TIMESTAMP)) AS t FROM {_lines_sql(right)})
      SELECT '{{"key":' || to_json(s.k) || ',"left":' || s.line || ',"right":' || c.line || '}}'
      FROM s JOIN c ON s.k = c.k AND abs(s.t - c.t) <= {HOUR}
      ORDER BY CASE WHEN (s.t, 0, s.n) > (c.t, 1, c.n) THEN (s.t, 0, s.n) ELSE (c.t, 1, c.n) END,
               CASE WHEN (s.t, 0, s.n) > (c.t, 1, c.n) THEN (c.t, 1, c.n) ELSE (s.t, 0, s.n) END"""
    return [r[0] for r in con.execute(q).fetchall()]


def exact_enrich(con, events: Path, profiles: Path) -> list[str]:  # noqa: ANN001
    q = f"""
      WITH p AS (SELECT n, line, json_extract_string(line, '$.key') AS k FROM {_lines_sql(profiles)}),
           lp AS (SELECT * FROM p QUALIFY row_number() OVER (PARTITION BY k ORDER BY n DESC) = 1),
           e AS (SELECT n, line, json_extract_string(line, '$.key') AS k FROM {_lines_sql(events)})
      SELECT '{{"key":' || coalesce(to_json(e.k), 'null') || ',"left":' || e.line || ',"right":'
             || coalesce(lp.line, 'null') || '}}'
      FROM e LEFT JOIN lp ON e.k = lp.k ORDER BY e.n"""
    return [r[0] for r in con.execute(q).fetchall()]


def timed(argv: list[str], stdout: Path | None, env: dict | None = None) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with open(stdout if stdout else os.devnull, "wb") as f:
        subprocess.run(argv, stdout=f, check=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", choices=["ss", "enrich"])
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--base", help="a source tree to run as the 'before' streamctl")
    args = ap.parse_args()
    d: Path = args.dir
    py = sys.executable
    work = d / "out"
    work.mkdir(exist_ok=True)
    rows = []
    if args.only != "enrich":
        rows.append(("ss", ["join", str(d / "searches.jsonl"), str(d / "clicks.jsonl"), *SS_FLAGS],
                     duck_ss(d / "searches.jsonl", d / "clicks.jsonl", work / "duck.json")))
    if args.only != "ss":
        rows.append(("enrich", ["join", str(d / "events.jsonl"), str(d / "profiles.jsonl"), *EN_FLAGS],
                     duck_enrich(d / "events.jsonl", d / "profiles.jsonl", work / "duck.json")))
    for name, sc, sql in rows:
        duck = [py, "-c", f"import duckdb; duckdb.connect().execute({sql!r})"]
        for r in range(args.runs):
            sw, sc_cpu = timed([py, "-m", "streamctl", *sc], work / f"{name}.out")
            line = f"{name} run {r}: streamctl wall {sw:.2f} cpu {sc_cpu:.2f}"
            if args.base:
                env = {**os.environ, "PYTHONPATH": args.base}
                bw, bc = timed([py, "-m", "streamctl", *sc], work / f"{name}.base.out", env)
                line += f" | before wall {bw:.2f} cpu {bc:.2f}"
            dw, dc = timed(duck, None)
            line += f" | duckdb wall {dw:.2f} cpu {dc:.2f} | streamctl/duckdb wall {sw / dw:.2f} cpu {sc_cpu / dc:.2f}"
            if args.base:
                line += f" | before/duckdb wall {bw / dw:.2f} cpu {bc / dc:.2f}"
            print(line, flush=True)
        if args.check:
            import duckdb

            con = duckdb.connect()
            want = (exact_ss(con, d / "searches.jsonl", d / "clicks.jsonl") if name == "ss"
                    else exact_enrich(con, d / "events.jsonl", d / "profiles.jsonl"))
            import orjson

            got = (work / f"{name}.out").read_bytes().decode().splitlines()
            # streamctl writes values as orjson.dumps writes them (0.540 -> 0.54): compare parsed
            same = len(got) == len(want) and all(map(lambda a, b: a == b or orjson.loads(a) == orjson.loads(b),
                                                     got, want))
            print(f"{name} check: streamctl {len(got)} rows, duckdb {len(want)} rows, "
                  f"{'identical (content and order)' if same else 'DIFFERENT'}", flush=True)
            if not same:
                for i, (a, b) in enumerate(zip(got, want, strict=False)):
                    if a != b and orjson.loads(a) != orjson.loads(b):
                        print(f"  first difference at row {i}:\n  streamctl {a}\n  duckdb    {b}")
                        break
                sys.exit(1)


if __name__ == "__main__":
    main()
