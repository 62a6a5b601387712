"""consume: stored lines, --value, --format and filters vs cat, jq, Miller and the orjson loop."""

from __future__ import annotations

import shlex

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
        b.target("consume of stored lines >= 3x the orjson loop", f"{r:.2f}x", r >= 3)
    r = b.ratio(group, sub, "cat")
    if r is not None:
        b.target("consume of stored lines within 3x of cat", f"{1 / r:.2f}x cat's time", 1 / r <= 3)

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

    # Finding records: a filter that matches 1% of the events (amount is uniform in [0, 200)) against
    # the pipeline users write today, consume | jq select. Both read every record; streamctl decodes
    # only `amount`, jq parses whole lines (after consume wrote them through a pipe).
    where = "value.amount > 198"
    group = "consume --where (1% match)"
    cs = [Contestant(f"{sub} --where '{where}'", b.sc("consume", str(log), "--where", where), subject=True)]
    if b.tools.get("jq"):
        pipe = f"{shlex.join(b.sc('consume', str(log)))} | jq -c 'select(.value.amount > 198)'"
        cs.append(Contestant("consume | jq -c select(...)", ["sh", "-c", pipe]))
    b.compare(group, cs, records=n, nbytes=nbytes)
    r = b.ratio(group, f"{sub} --where '{where}'", "consume | jq -c select(...)")
    if r is not None:
        b.target("filtered consume (1% match) >= 3x consume | jq select", f"{r:.2f}x", r >= 3)

    # --key reads keys from the line's prefix and never decodes a value
    group = "consume --key (one of 10k keys)"
    cs = [Contestant(f"{sub} --key user-00042", b.sc("consume", str(log), "--key", "user-00042"), subject=True)]
    if b.tools.get("jq"):
        pipe = f"{shlex.join(b.sc('consume', str(log)))} | jq -c 'select(.key == \"user-00042\")'"
        cs.append(Contestant("consume | jq -c select(.key)", ["sh", "-c", pipe]))
    b.compare(group, cs, records=n, nbytes=nbytes)
