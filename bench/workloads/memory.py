"""Memory: peak RSS of the main commands at 1M vs 5M events (one run each).

A command whose state is bounded (by keys, open windows, the table, or
nothing at all) shows the same peak at both sizes; one that grows with the log
shows up as a growth factor near 5x.
"""

from __future__ import annotations

import shutil

from bench.runner import Bench, MemoryRow, measure, say

# A runaway command must not take the shared machine down: cap each at this much address space.
LIMIT_MB = 8000


def run(b: Bench) -> None:
    sizes = [b.records, b.records * (2 if b.quick else b.big_factor)]
    labels = [f"{n // 1000}k" if n < 1_000_000 else f"{n / 1e6:g}M" for n in sizes]
    results: dict[str, dict[str, float | None]] = {}
    notes: dict[str, str] = {}
    env = b.env()
    for n, label in zip(sizes, labels, strict=True):
        events_jsonl = b.data.events_jsonl(n)
        events = b.data.events_log(n)
        profiles = b.data.profiles_log(n)
        cdc = b.data.cdc_log(n)
        plog = b.work / "mem-produce.log"
        clog = b.work / "mem-compact.log"
        shutil.rmtree(plog, ignore_errors=True)
        shutil.rmtree(clog, ignore_errors=True)
        shutil.copytree(cdc, clog)
        cmds: list[tuple[str, str, list[str]]] = [
            ("produce", "produce", b.sc("produce", str(plog), str(events_jsonl), "--key-field", "user")),
            ("consume", "consume", b.sc("consume", str(events))),
            ("consume --value", "consume", b.sc("consume", str(events), "--value")),
            ("tail -n 10", "tail", b.sc("tail", "-n", "10", str(events))),
            ("compact --roll", "compact", b.sc("compact", str(clog), "--roll")),
            ("replay (local)", "replay", b.sc("replay", str(cdc), "--engine", "local")),
            ("replay --compact (local)", "replay", b.sc("replay", str(cdc), "--compact", "--engine", "local")),
            ("window --tumbling 1m (local)", "window", b.sc("window", str(events), "--tumbling", "1m", "--agg",
                                                            "count", "--agg", "avg:amount", "--time-field", "time",
                                                            "--engine", "local")),
            ("window --session 30m (local)", "window", b.sc("window", str(events), "--session", "30m",
                                                            "--time-field", "time", "--engine", "local")),
            ("join --table (local)", "join", b.sc("join", str(events), str(profiles), "--table", "--how", "left",
                                                  "--engine", "local")),
        ]
        searches, clicks = b.data.searches_clicks(n)
        cmds.append(("join --within 1h (local)", "join", b.sc("join", str(searches), str(clicks), "--within", "1h",
                                                              "--on", "sid", "--time-field", "time",
                                                              "--engine", "local")))
        for name, command, argv in cmds:
            if not b.has_command(command):
                notes[name] = f"`streamctl {command}` not built yet"
                continue
            s = measure(argv, env=env, limit_mb=LIMIT_MB, tree=command == "window" or name.startswith("join --within"))  # read-ahead: 2 processes
            rss = s.rss_kb * 1024 / 1e6 if s.rc == 0 else None
            if s.rc != 0:
                notes[name] = f"exit {s.rc} at {label}" + (f" (over the {LIMIT_MB} MB address-space cap?)" if s.rc in (1, -9, 137) else "")
            say(f"  memory {name} @ {label}: {s.wall:.2f} s, {s.rss_kb / 1024:.0f} MiB")
            results.setdefault(name, {})[label] = rss
        shutil.rmtree(plog, ignore_errors=True)
        shutil.rmtree(clog, ignore_errors=True)
    flat = []
    for name in results:
        row = MemoryRow(name, {lb: results[name].get(lb) for lb in labels}, notes.get(name, ""))
        b.memory.append(row)
        a, z = row.rss_mb.get(labels[0]), row.rss_mb.get(labels[-1])
        if a and z:
            flat.append((name, z / a))
    for name, msg in notes.items():
        if name not in results:
            b.memory.append(MemoryRow(name, {}, msg))
    if flat:
        grown = [f"{n} {g:.2f}x" for n, g in flat if g > 1.5]
        b.target(f"peak RSS independent of log length ({labels[0]} vs {labels[-1]}, growth < 1.5x)",
                 "grows: " + ", ".join(grown) if grown else f"all within {max(g for _, g in flat):.2f}x",
                 not grown)
