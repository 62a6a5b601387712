# ruff: noqa: UP031  (printf-style formatting is the fast way to build bytes lines here)
"""consume --sqlite: N records into a SQLite table (append and upsert), exactly once, against
loading the same rows with the sqlite3 CLI's .import and with DuckDB's read_json.

The log: N records over 10k keys in 3 partitions, values nested objects with an ISO-8601
event time, a list of items (empty or one), 20% of records with headers, 1% tombstones and 2% null keys,
about 200 bytes a stored line (built once per size and seed, cached with the other data).

The references load what the sink loads, in one process each, with no offsets kept:

- `consume --format | sqlite3 FILE .import`: the columns key, value, ts, partition, offset,
  tab-separated, into a table with the sink's append schema (primary key (partition,
  offset), WITHOUT ROWID) in WAL mode with synchronous=NORMAL (as the sink), as one
  transaction. The sqlite3 CLI (3.40 here) cannot import JSON (`.mode json` is output
  only), and `consume --value` alone would load a single column with no primary key, so
  this is the like-for-like CLI load. `.mode ascii` with a tab/newline separator reads
  fields verbatim (CSV mode would unquote the JSON's quotes); a stored value's JSON text
  never holds a raw tab or newline. Headers are left
  out (an empty field): `--format`'s %h is name=value text, not JSON, and they are 20% of
  records' ~40 bytes; a null key or value arrives as an empty string, not NULL.
- the same sqlite3 .import from a file rendered beforehand (untimed): the CLI's own cost, since
  `consume --format` rendering is most of the pipeline's CPU.
- DuckDB `read_json` of the segment files into a table of a DuckDB file (key, value as
  JSON, headers, ts, partition, offset): a columnar engine's parallel bulk load.
"""

from __future__ import annotations

import random
import shlex
import shutil
import subprocess
import time
from pathlib import Path

from bench.datagen import BASE_MS, COUNTRIES, DEVICES, KEYS, TYPES, segments, size
from bench.runner import Bench, Contestant

CITIES = ["Berlin", "Paris", "New York", "London", "Tokyo", "São Paulo", "Mumbai", "Amsterdam", "Madrid", "Milano"]
OS = ["ios", "android", "windows", "macos", "linux"]
ENVELOPE = '{"key":%s,"value":%s%s}\n'
VALUE = ('{"user":"user-%05d","time":"%s.%03dZ","type":"%s","amount":%.2f,"geo":{"country":"%s","city":"%s"},'
         '"device":{"kind":"%s","os":"%s"},"items":[%s]}')

TABLE = "orders"
# The sink's append table, its columns in the order the CLI's fields come in (.import maps them by
# position, and an empty first field, a null key's, makes this CLI drop the row).
CLI_SCHEMA = (f'CREATE TABLE {TABLE} ("partition" INTEGER NOT NULL, "offset" INTEGER NOT NULL, ts INTEGER, key TEXT, '
              'headers TEXT, value TEXT, PRIMARY KEY ("partition", "offset")) WITHOUT ROWID')

DUCKDB_LOAD = """
import sys, duckdb
out, files = sys.argv[1], sys.argv[2:]
con = duckdb.connect(out)
con.execute('''CREATE TABLE orders AS SELECT * FROM read_json(?, format='newline_delimited',
    columns={'offset': 'BIGINT', 'partition': 'INTEGER', 'ts': 'BIGINT', 'key': 'VARCHAR',
             'value': 'JSON', 'headers': 'JSON'})''', [files])
con.close()
"""


def write_envelopes(path: Path, n: int, seed: int) -> None:
    """n `produce --envelope` input lines (see the module docstring for their shape)."""
    rnd = random.Random(seed + 5)
    ri, rr = rnd.randrange, rnd.random
    t = BASE_MS
    sec, iso = -1, ""
    with open(path, "wb", buffering=1 << 20) as f:
        for _ in range(n):
            t += ri(5)
            if t // 1000 != sec:
                sec = t // 1000
                iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
            u = ri(KEYS)
            key = "null" if rr() < 0.02 else '"user-%05d"' % u
            items = '{"sku":"sku-%04d","qty":%d}' % (ri(5000), 1 + ri(3)) if rr() < 0.5 else ""
            value = VALUE % (u, iso, t % 1000, TYPES[ri(6)], rr() * 200, COUNTRIES[u % 10], CITIES[u % 10],
                             DEVICES[ri(3)], OS[ri(5)], items)
            if rr() < 0.01:
                value = "null"
            headers = ',"headers":{"trace":"%016x","source":"web"}' % rnd.getrandbits(64) if rr() < 0.2 else ""
            f.write((ENVELOPE % (key, value, headers)).encode())


def orders_log(b: Bench, n: int) -> Path:
    d = b.data.folder(n)
    src, log, done = d / "orders.jsonl", d / "orders.log", d / ".done-orders.log"
    if not done.exists():
        from bench.runner import say

        say(f"generating {log.name} ({n} records, 3 partitions)")
        write_envelopes(src, n, b.args.seed)
        shutil.rmtree(log, ignore_errors=True)
        subprocess.run(b.sc("produce", str(log), str(src), "--envelope", "--partitions", "3", "--fsync", "never"),
                       check=True, stderr=subprocess.DEVNULL, env=b.env())
        src.unlink()
        done.touch()
    return log


def run(b: Bench) -> None:
    if not b.has_command("consume"):
        b.skip("sqlite", "`streamctl consume` is not built yet")
        return
    n = b.records
    log = orders_log(b, n)
    segs = segments(log)
    db = b.work / "sqlite-bench.db"

    def clean() -> None:
        for suffix in ("", "-wal", "-shm", "-journal", ".wal"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        for g in log.glob("groups/bench-sqlite*"):
            g.unlink()

    def sink(mode: str, *extra: str) -> list[str]:
        return b.sc("consume", str(log), "--group", "bench-sqlite", "--sqlite", str(db), "--table", TABLE,
                    "--mode", mode, *extra)

    append, upsert = "streamctl consume --sqlite (append)", "streamctl consume --sqlite --mode upsert"
    cli = "consume --format | sqlite3 .import"
    floor = "sqlite3 .import of a prepared file"
    group = f"load {n // 1000}k records into SQLite"
    cs = [Contestant(append, sink("append"), subject=True, setup=clean, teardown=clean),
          Contestant(upsert, sink("upsert"), subject=True, setup=clean, teardown=clean)]
    if shutil.which("sqlite3"):
        fmt = shlex.join(b.sc("consume", str(log), "--format", r"%p\t%o\t%T\t%k\t\t%s\n"))
        load = shlex.join(["sqlite3", str(db), "PRAGMA journal_mode=WAL;", "PRAGMA synchronous=NORMAL;",
                           CLI_SCHEMA + ";", ".mode ascii", r'.separator "\t" "\n"', f".import /dev/stdin {TABLE}"])
        cs.append(Contestant(cli, ["sh", "-c", f"{fmt} | {load}"], setup=clean, teardown=clean))
        # the import alone, from a file rendered once (untimed): the CLI's floor, for scale
        tsv = b.work / "sqlite-bench.tsv"
        with open(tsv, "wb") as out:
            subprocess.run(b.sc("consume", str(log), "--format", r"%p\t%o\t%T\t%k\t\t%s\n"), stdout=out,
                           check=True, env=b.env())
        cs.append(Contestant(floor, ["sh", "-c", load.replace("/dev/stdin", str(tsv))],
                             setup=clean, teardown=clean))
    else:
        b.skip(f"{group}: sqlite3 CLI", "no sqlite3 on PATH (apt-get install sqlite3)")
    if b.tools.get("duckdb"):
        out = b.work / "sqlite-bench.duckdb"
        cs.append(Contestant("duckdb read_json into a table", [b.py, "-c", DUCKDB_LOAD, str(out), *segs],
                             setup=lambda: out.unlink(missing_ok=True), teardown=lambda: out.unlink(missing_ok=True)))
    b.compare(group, cs, records=n, nbytes=size(segs), note="3 partitions, nested values, ISO-8601 times")
    for subject in (append, upsert):
        r = b.ratio(group, subject, cli)
        if r is not None:
            b.target(f"consume --sqlite ({'upsert' if subject == upsert else 'append'}) within 1.5x of "
                         "consume --format | sqlite3 .import", f"{1 / r:.2f}x its time", 1 / r <= 1.5)
    r = b.ratio(group, append, floor)
    if r is not None:
        b.notes.append(f"consume --sqlite (append) vs the sqlite3 .import of a prepared file: {1 / r:.2f}x its time")
    r = b.ratio(group, append, "duckdb read_json into a table")
    if r is not None:
        b.notes.append(f"consume --sqlite (append) vs DuckDB read_json: {1 / r:.2f}x its time")
