"""compact: 1M records over 10k keys with 1% tombstones vs DuckDB QUALIFY and a plain-Python dict pass.

Each streamctl run compacts a fresh copy of the log (copied untimed) with
`--roll`, so every segment, the active one included, is compacted (tombstones
are kept: they are younger than the default --tombstone-retention). The
references read the same segment files and write their result to a file.
"""

from __future__ import annotations

import shutil

from bench.datagen import segments, size
from bench.runner import Bench, Contestant


def run(b: Bench) -> None:
    if not b.has_command("compact"):
        b.skip("compact", "`streamctl compact` is not built yet")
        return
    n = b.records
    src = b.data.cdc_log(n)
    segs = segments(src)
    copy = b.work / "compact.log"
    out = b.work / "compact-ref.json"

    def fresh() -> None:
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(src, copy)

    def clean() -> None:
        shutil.rmtree(copy, ignore_errors=True)
        out.unlink(missing_ok=True)

    group = f"compact {n // 1000}k records / 10k keys"
    cs = [Contestant("streamctl compact --roll", b.sc("compact", str(copy), "--roll"), subject=True,
                     setup=fresh, teardown=clean),
          Contestant("python dict pass (byte scan)", b.ref("compact_dict", *segs), stdout=str(out), teardown=clean)]
    if b.tools.get("duckdb"):
        cs.append(Contestant("duckdb QUALIFY row_number()", b.ref("compact_duckdb", str(out), *segs), teardown=clean))
    b.compare(group, cs, records=n, nbytes=size(segs))
    r = b.ratio(group, "streamctl compact --roll", "duckdb QUALIFY row_number()")
    if r is not None:
        b.target(f"compaction faster than DuckDB ({n // 1000}k records, 10k keys)", f"{r:.2f}x DuckDB's speed", r > 1)
    r = b.ratio(group, "streamctl compact --roll", "python dict pass (byte scan)")
    if r is not None:
        b.notes.append(f"compact vs the plain-Python dict pass: {r:.2f}x its speed")
