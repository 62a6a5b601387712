"""`streamctl --help` and one small command: start-up is a feature (target < 150 ms)."""

from __future__ import annotations

from bench.runner import Bench, Contestant


def run(b: Bench) -> None:
    tiny = b.scratch("tiny.log")
    src = b.work / "tiny.jsonl"
    src.write_text("".join(f'{{"n":{i}}}\n' for i in range(10)))
    import subprocess

    subprocess.run(b.sc("produce", str(tiny), str(src)), check=True, capture_output=True, env=b.env())
    runs = 5 if b.quick else 20
    group = "start-up"
    b.compare(group, [
        Contestant("streamctl --help", b.sc("--help"), subject=True),
        Contestant("streamctl consume (10 records)", b.sc("consume", str(tiny)), subject=True),
        Contestant("python -c pass", [b.py, "-c", "pass"]),
        Contestant("python -c 'import typer'", [b.py, "-c", "import typer"]),
    ], records=None, nbytes=None, runs=runs, note=f"{runs} runs")
    r = b.row(group, "streamctl --help")
    if r:
        b.target("`streamctl --help` < 150 ms", f"{r.wall * 1000:.0f} ms (median of {len(r.walls)})",
                 r.wall < 0.150)
