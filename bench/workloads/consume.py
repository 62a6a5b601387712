"""consume: stored lines, --value and --format vs cat, jq, Miller and the orjson loop."""

from __future__ import annotations

from bench.datagen import segments, size
from bench.runner import Bench, Contestant


def run(b: Bench) -> None:
    n = b.records
    log = b.data.events_log(n)
    segs = segments(log)
    nbytes = size(segs)
    sub = "streamctl consume"

    group = "consume stored lines"
    cs = [Contestant(sub, b.sc("consume", str(log)), subject=True),
          Contestant("cat", ["cat", *segs]),
          Contestant("orjson loads+dumps loop", b.ref("orjson_loop", "line", *segs))]
    if b.tools.get("jq"):
        cs.append(Contestant("jq -c .", ["jq", "-c", ".", *segs]))
    b.compare(group, cs, records=n, nbytes=nbytes)
    r = b.ratio(group, sub, "orjson loads+dumps loop")
    if r is not None:
        b.target("2, 9", "consume of stored lines >= 3x the orjson loop", f"{r:.2f}x", r >= 3)
    r = b.ratio(group, sub, "cat")
    if r is not None:
        b.target("9", "consume of stored lines within 3x of cat", f"{1 / r:.2f}x cat's time", 1 / r <= 3)

    group = "consume --value"
    cs = [Contestant(f"{sub} --value", b.sc("consume", str(log), "--value"), subject=True),
          Contestant("orjson loop (value)", b.ref("orjson_loop", "value", *segs))]
    if b.tools.get("jq"):
        cs.append(Contestant("jq -c .value", ["jq", "-c", ".value", *segs]))
    if b.tools.get("mlr"):
        cs.append(Contestant("mlr --ijsonl --ojsonl cut -f value",
                             ["mlr", "--ijsonl", "--ojsonl", "cut", "-f", "value", *segs], max_runs=1))
    b.compare(group, cs, records=n, nbytes=nbytes)

    group = "consume --format '%k %s\\n'"
    cs = [Contestant(f"{sub} --format", b.sc("consume", str(log), "--format", "%k %s\\n"), subject=True),
          Contestant("orjson loop (format)", b.ref("orjson_loop", "format", *segs))]
    if b.tools.get("jq"):
        cs.append(Contestant("jq -r (key + value)", ["jq", "-r", r'"\(.key) \(.value|tojson)"', *segs]))
    b.compare(group, cs, records=n, nbytes=nbytes)
