"""The benchmark runner: options, measuring a command, interleaved runs, tables, targets.

Every number comes from running a real command in a subprocess: wall time with
perf_counter around it, peak RSS from os.wait4 (Linux folds the peak of every
waited-for descendant into it, so it is the largest process of the tree); for
Spark contestants, whose driver does not wait for its JVM, the summed RSS of the
whole tree is also sampled from /proc (TreeSampler). Contestants of one workload run
interleaved (A B C A B C ...) so a noisy neighbour hits all of them alike.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MB = 1_000_000


@dataclass
class Sample:
    wall: float
    rss_kb: int
    rc: int
    stderr: str = ""
    cpu: float = 0.0  # user + system seconds of the process and the children it waited for


@dataclass
class Contestant:
    """One command of a workload. `setup`/`teardown` run around each timed run, untimed."""

    tool: str
    argv: list[str]
    subject: bool = False  # a streamctl row (ratios are computed for these)
    stdin: str | None = None
    stdout: str | None = os.devnull
    env: dict[str, str] | None = None
    setup: Callable[[], None] | None = None
    teardown: Callable[[], None] | None = None
    ok_codes: tuple[int, ...] = (0,)
    spark: bool = False  # runs only --spark-runs times
    max_runs: int | None = None  # a slow reference measured fewer times (said in the table)
    tree: bool = False  # several processes at once (window's read-ahead): sum their RSS (TreeSampler)


@dataclass
class Row:
    group: str
    tool: str
    records: int | None
    nbytes: int | None
    subject: bool
    walls: list[float] = field(default_factory=list)
    rss_kb: list[int] = field(default_factory=list)
    error: str = ""
    note: str = ""
    # Spark contestants: each run's own record (STREAMCTL_JOB_TIMES) of the seconds after Spark was up
    works: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)  # CPU seconds (user + system) per run

    @property
    def wall(self) -> float | None:
        return statistics.median(self.walls) if self.walls else None

    @property
    def cpu(self) -> float | None:
        return statistics.median(self.cpus) if self.cpus else None

    @property
    def work(self) -> float | None:
        return statistics.median(self.works) if self.works else None

    @property
    def rss_mb(self) -> float | None:
        return max(self.rss_kb) * 1024 / MB if self.rss_kb else None


@dataclass
class LatencyRow:
    group: str
    tool: str
    samples_ms: list[float]
    note: str = ""

    def pct(self, q: float) -> float:
        s = sorted(self.samples_ms)
        if not s:
            return float("nan")
        k = (len(s) - 1) * q
        lo = int(k)
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (k - lo)


@dataclass
class MemoryRow:
    command: str
    rss_mb: dict[str, float | None]  # size label -> peak RSS MB
    note: str = ""


@dataclass
class Target:
    target: str
    measured: str
    holds: bool | None  # None: not measured (say why in measured)


class TreeSampler:
    """Peak of the summed RSS of a process and all its descendants, sampled from /proc.

    wait4()'s ru_maxrss only covers descendants the process waited for, and a
    PySpark driver does not wait for its JVM: without this a Spark run would
    report the Python driver's ~40 MB. Sampling costs a /proc scan (~5 ms), so
    it is used only for Spark contestants, every 0.25 s.
    """

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        self.pid = pid
        self.interval = interval
        self.peak_kb = 0
        self._stop = threading.Event()
        self._page_kb = os.sysconf("SC_PAGE_SIZE") // 1024
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _tree_kb(self) -> int:
        children: dict[int, list[int]] = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat", "rb") as f:
                    st = f.read()
                ppid = int(st[st.rindex(b")") + 2:].split(None, 2)[1])
            except (OSError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
        total, todo = 0, [self.pid]
        while todo:
            pid = todo.pop()
            try:
                with open(f"/proc/{pid}/statm", "rb") as f:
                    total += int(f.read().split()[1]) * self._page_kb
            except (OSError, ValueError, IndexError):
                pass
            todo.extend(children.get(pid, ()))
        return total

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak_kb = max(self.peak_kb, self._tree_kb())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak_kb


def measure(argv: list[str], stdin: str | None = None, stdout: str | None = os.devnull,
            env: dict[str, str] | None = None, timeout: float = 3600, limit_mb: int | None = None,
            tree: bool = False) -> Sample:
    """Run argv once; wall seconds and peak RSS (KiB) of its process tree."""
    fin = open(stdin, "rb") if stdin else subprocess.DEVNULL
    fout = open(stdout, "wb") if stdout else subprocess.DEVNULL
    ferr = tempfile.TemporaryFile()
    try:
        t0 = time.perf_counter()
        pre = None
        if limit_mb:
            def pre() -> None:
                import resource

                resource.setrlimit(resource.RLIMIT_AS, (limit_mb << 20, limit_mb << 20))
        proc = subprocess.Popen(argv, stdin=fin, stdout=fout, stderr=ferr, env=env, preexec_fn=pre)
        sampler = TreeSampler(proc.pid) if tree else None
        # A blocking wait4 (no polling jitter); a timer kills a runaway run.
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            _, status, ru = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.perf_counter() - t0
        rss_kb = ru.ru_maxrss
        if sampler is not None:
            rss_kb = max(rss_kb, sampler.stop())
        rc = os.waitstatus_to_exitcode(status)
        proc.returncode = rc
        ferr.seek(0)
        err = ferr.read()[-2000:].decode("utf-8", "replace")
    finally:
        for f in (fin, fout):
            if hasattr(f, "close"):
                f.close()
        ferr.close()
    return Sample(wall, rss_kb, rc, err, ru.ru_utime + ru.ru_stime)


class Bench:
    """Holds options, datasets and every result of one run."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.quick: bool = args.quick
        self.records: int = args.records or (50_000 if args.quick else 1_000_000)
        self.runs: int = args.runs or (1 if args.quick else 3)
        self.spark_runs: int = args.spark_runs or self.runs
        self.skip_spark: bool = args.skip_spark or (args.quick and not args.spark)
        self.big_factor: int = 5
        self.py = sys.executable
        venv_bin = Path(sys.executable).parent
        cli = venv_bin / "streamctl"
        if cli.exists():
            self.streamctl = [str(cli)]
        elif shutil.which("streamctl"):
            self.streamctl = [str(shutil.which("streamctl"))]
        else:
            self.streamctl = [self.py, "-m", "streamctl"]
        self.work = Path(args.work_dir or tempfile.mkdtemp(prefix="streamctl-bench-"))
        self.work.mkdir(parents=True, exist_ok=True)
        self.data_root = Path(args.data_dir or Path(tempfile.gettempdir()) / "streamctl-bench-data")
        self.rows: list[Row] = []
        self.latency: list[LatencyRow] = []
        self.memory: list[MemoryRow] = []
        self.targets: list[Target] = []
        self.skipped: list[str] = []
        self.notes: list[str] = []
        self.tools: dict[str, bool] = {}
        self._commands: dict[str, bool] = {}
        from bench.datagen import Datasets

        self.data = Datasets(self)

    # --- helpers for workloads -------------------------------------------------
    def sc(self, *args: str) -> list[str]:
        return [*self.streamctl, *args]

    def ref(self, name: str, *args: str) -> list[str]:
        """A reference implementation from bench/refs.py, run by the same Python."""
        return [self.py, str(ROOT / "bench" / "refs.py"), name, *args]

    def spark_ref(self, name: str, *args: str) -> list[str]:
        """A hand-written PySpark reference from bench/refs_spark.py."""
        return [self.py, str(ROOT / "bench" / "refs_spark.py"), name, *args]

    def env(self) -> dict[str, str]:
        e = dict(os.environ)
        e.pop("PYTHONWARNINGS", None)
        return e

    def has_command(self, name: str) -> bool:
        if name not in self._commands:
            s = measure(self.sc(name, "--help"))
            self._commands[name] = s.rc == 0
        return self._commands[name]

    def skip(self, what: str, why: str) -> None:
        msg = f"{what}: skipped ({why})"
        self.skipped.append(msg)
        say(msg)

    def scratch(self, name: str) -> Path:
        p = self.work / name
        if p.exists():
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        return p

    def compare(self, group: str, contestants: list[Contestant], records: int | None, nbytes: int | None,
                runs: int | None = None, note: str = "") -> list[Row]:
        """Run the contestants interleaved `runs` times; add and return their rows."""
        runs = runs or self.runs
        rows = [Row(group, c.tool, records, nbytes, c.subject, note=note) for c in contestants]
        env = self.env()
        for r in range(runs):
            for c, row in zip(contestants, rows, strict=True):
                if row.error or (c.spark and r >= self.spark_runs) or (c.max_runs and r >= c.max_runs):
                    continue
                if c.setup:
                    c.setup()
                run_env = c.env or env
                times = None
                if c.spark:
                    times = self.work / f"job-times-{len(self.rows)}-{r}.jsonl"
                    times.unlink(missing_ok=True)
                    run_env = {**run_env, "STREAMCTL_JOB_TIMES": str(times)}
                s = measure(c.argv, c.stdin, c.stdout, run_env, tree=c.spark or c.tree)
                if c.teardown:
                    c.teardown()
                if times is not None and s.rc in c.ok_codes:
                    work = _job_work_seconds(times)
                    if work is not None:
                        row.works.append(work)
                if s.rc not in c.ok_codes:
                    row.error = f"exit {s.rc}: {s.stderr.strip().splitlines()[-1] if s.stderr.strip() else ''}"
                    say(f"  {group} / {c.tool}: FAILED {row.error}")
                    continue
                row.walls.append(s.wall)
                row.cpus.append(s.cpu)
                row.rss_kb.append(s.rss_kb)
                work = f" (job work after start-up {row.works[-1]:.3f} s)" if c.spark and row.works else ""
                say(f"  {group} / {c.tool} run {r + 1}/{min(runs, self.spark_runs) if c.spark else runs}: "
                    f"{s.wall:.3f} s, {s.rss_kb / 1024:.0f} MiB{work}")
        self.rows.extend(rows)
        return rows

    def row(self, group: str, tool: str) -> Row | None:
        for r in self.rows:
            if r.group == group and r.tool == tool and r.walls:
                return r
        return None

    def ratio(self, group: str, subject: str, reference: str, cpu: bool = False) -> float | None:
        """reference wall (or CPU) seconds / subject's: > 1 means the subject is faster."""
        a, b = self.row(group, subject), self.row(group, reference)
        if a is None or b is None:
            return None
        if cpu:
            return b.cpu / a.cpu if a.cpu and b.cpu else None
        return b.wall / a.wall

    def target(self, text: str, measured: str, holds: bool | None) -> None:
        self.targets.append(Target(text, measured, holds))


def _job_work_seconds(path: Path) -> float | None:
    """The work seconds a Spark job recorded in its STREAMCTL_JOB_TIMES file (jobgen), if any."""
    try:
        lines = path.read_text().splitlines()
        path.unlink()
    except OSError:
        return None
    return float(json.loads(lines[-1])["work_s"]) if lines else None


def say(msg: str) -> None:
    sys.stderr.write(f"bench: {msg}\n")
    sys.stderr.flush()


# --- reporting -------------------------------------------------------------------

def _fmt_rate(n: float | None) -> str:
    if n is None:
        return "-"
    if n >= 1e6:
        return f"{n / 1e6:.2f}M"
    if n >= 1e3:
        return f"{n / 1e3:.0f}k"
    return f"{n:.0f}"


def _ratios(b: Bench, row: Row) -> str:
    if not row.subject or not row.walls:
        return ""
    out = []
    for other in b.rows:
        if other.group == row.group and not other.subject and other.walls:
            out.append(f"{other.wall / row.wall:.2f}x {other.tool}")
    return ", ".join(out)


def main_table(b: Bench) -> tuple[list[str], list[list[str]]]:
    head = ["workload", "tool", "runs", "median s", "CPU s", "records/s", "MB/s", "peak RSS MB",
            "speed vs reference (ref s / this s)"]
    body = []
    for r in b.rows:
        if r.error:
            body.append([r.group, r.tool, "0", "FAILED", "", "", "", "", r.error[:80]])
            continue
        w, cpu = r.wall, r.cpu
        body.append([
            r.group, r.tool, str(len(r.walls)), f"{w:.3f}" if w < 10 else f"{w:.1f}",
            "-" if cpu is None else f"{cpu:.2f}",  # median user+system s of the waited-for process tree
            _fmt_rate(r.records / w) if r.records else "-",
            f"{r.nbytes / MB / w:.0f}" if r.nbytes else "-",
            f"{r.rss_mb:.0f}", _ratios(b, r),
        ])
    return head, body


def latency_table(b: Bench) -> tuple[list[str], list[list[str]]]:
    head = ["workload", "tool", "samples", "p50 ms", "p99 ms", "max ms", "note"]
    body = [[r.group, r.tool, str(len(r.samples_ms)), f"{r.pct(0.5):.2f}", f"{r.pct(0.99):.2f}",
             f"{max(r.samples_ms):.2f}" if r.samples_ms else "-", r.note] for r in b.latency]
    return head, body


def memory_table(b: Bench) -> tuple[list[str], list[list[str]]]:
    labels: list[str] = []
    for m in b.memory:
        for k in m.rss_mb:
            if k not in labels:
                labels.append(k)
    head = ["command", *[f"peak RSS MB @ {k}" for k in labels], "growth", "note"]
    body = []
    for m in b.memory:
        vals = [m.rss_mb.get(k) for k in labels]
        growth = f"{vals[-1] / vals[0]:.2f}x" if len(vals) > 1 and vals[0] and vals[-1] else "-"
        body.append([m.command, *[f"{v:.0f}" if v else "-" for v in vals], growth, m.note])
    return head, body


def targets_table(b: Bench) -> tuple[list[str], list[list[str]]]:
    head = ["target", "measured", "holds"]
    body = [[t.target, t.measured, {True: "yes", False: "**NO**", None: "n/a"}[t.holds]]
            for t in b.targets]
    return head, body


def render(b: Bench, markdown: bool) -> str:
    from tabulate import tabulate

    fmt = "github" if markdown else "simple"
    parts = []
    for title, (head, body) in (("Throughput", main_table(b)), ("Latency", latency_table(b)),
                                ("Memory: peak RSS vs log length", memory_table(b)),
                                ("Targets", targets_table(b))):
        if not body:
            continue
        parts.append(f"### {title}\n" if markdown else f"== {title}")
        parts.append(tabulate(body, head, tablefmt=fmt, disable_numparse=True))
        parts.append("")
    if b.skipped:
        parts.append("Skipped:" if not markdown else "Skipped:\n")
        parts.extend(f"- {s}" for s in b.skipped)
        parts.append("")
    if b.notes:
        parts.append("Notes:" if not markdown else "Notes:\n")
        parts.extend(f"- {s}" for s in b.notes)
        parts.append("")
    return "\n".join(parts)


def machine() -> dict[str, str]:
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram = "?"
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                ram = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    except OSError:
        pass
    return {
        "nproc": str(os.cpu_count()), "cpu": cpu, "ram": ram,
        "python": platform.python_version(), "kernel": platform.release(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


WORKLOADS = ["startup", "produce", "consume", "group", "tail", "compact", "replay", "window", "join", "sqlite", "capture", "follow",
             "memory"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="scripts/bench",
        description="Benchmark streamctl against cat, jq, Miller, an orjson loop, DuckDB, Polars and PySpark, "
                    "in one run on the same seeded data.",
        epilog="Workloads: " + ", ".join(WORKLOADS) + ".  Example: scripts/bench --quick; "
               "scripts/bench --only produce,consume --runs 5 --markdown out.md",
    )
    ap.add_argument("--quick", action="store_true", help="smoke run: 50k records, 1 run, no Spark (about a minute)")
    ap.add_argument("--only", metavar="NAME[,NAME]", help="run only these workloads")
    ap.add_argument("--records", type=int, metavar="N", help="events in the main data set (default 1M; quick 50k)")
    ap.add_argument("--runs", type=int, metavar="N", help="timed runs per contestant (default 3; quick 1)")
    ap.add_argument("--skip-spark", action="store_true", help="leave out the Spark engine and PySpark references")
    ap.add_argument("--spark", action="store_true", help="with --quick: include Spark anyway")
    ap.add_argument("--spark-runs", type=int, metavar="N",
                    help="timed runs for Spark contestants (default: --runs; each costs ~20 s of JVM and job)")
    ap.add_argument("--markdown", metavar="FILE", help="also write the tables as markdown to FILE")
    ap.add_argument("--data-dir", metavar="DIR", help="where generated data is cached (default $TMPDIR/streamctl-bench-data)")
    ap.add_argument("--work-dir", metavar="DIR", help="scratch space (default: a new temp dir, removed at the end)")
    ap.add_argument("--seed", type=int, default=42, help="generator seed (default 42)")
    ap.add_argument("--prepare", action="store_true",
                    help="only generate (and cache) the data sets for these sizes, then exit")
    ap.add_argument("--no-install", action="store_true", help="do not install missing reference tools")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    import importlib

    args = parse_args(argv)
    names = WORKLOADS if not args.only else [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        say(f"unknown workload(s): {', '.join(unknown)} (known: {', '.join(WORKLOADS)})")
        return 2
    b = Bench(args)
    if args.prepare:
        for n in (b.records, b.records * (2 if b.quick else b.big_factor)):
            b.data.events_log(n)
            b.data.cdc_log(n)
            b.data.searches_clicks(n)
        b.data.head(b.data.events_jsonl(b.records), 2_000 if b.quick else 20_000)
        b.data.events_real_log(b.records)  # the main window and join data: stragglers, skewed keys
        b.data.profiles_real_log(b.records)
        b.data.searches_clicks_real(b.records)
        b.data.events_iso_log(b.records)  # the in-order ISO shape (window, join)
        b.data.profiles_iso(b.records)
        b.data.searches_clicks_iso(b.records)
        say(f"data ready in {b.data_root}")
        return 0
    from bench.tools import ensure_tools

    ensure_tools(b, install=not args.no_install)
    m = machine()
    say(f"{m['nproc']} cores, {m['cpu']}, {m['ram']}, Python {m['python']}; "
        f"{b.records} records, {b.runs} run(s); work dir {b.work}")
    t0 = time.perf_counter()
    try:
        for name in names:
            mod = importlib.import_module(f"bench.workloads.{name}")
            say(f"--- {name}")
            w0 = time.perf_counter()
            try:
                mod.run(b)
            except Exception as e:  # one broken workload must not lose the others' figures
                import traceback

                traceback.print_exc()
                b.skip(name, f"crashed: {type(e).__name__}: {e}")
            say(f"--- {name} took {time.perf_counter() - w0:.0f} s")
            if args.markdown:  # after every workload, so a cut-short run keeps what it measured
                write_markdown(b, args, argv, m, partial=name != names[-1])
    finally:
        if not args.work_dir:
            shutil.rmtree(b.work, ignore_errors=True)
    total = time.perf_counter() - t0
    b.notes.append(f"total bench time {total:.0f} s")
    sys.stdout.write(render(b, markdown=False) + "\n")
    if args.markdown:
        write_markdown(b, args, argv, m, partial=False)
        say(f"markdown written to {args.markdown}")
    return 0


def write_markdown(b: Bench, args: argparse.Namespace, argv: list[str] | None, m: dict[str, str],
                   partial: bool) -> None:
    import shlex

    cmd = "scripts/bench " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    spark = f", Spark contestants {b.spark_runs} run(s)" if b.spark_runs != b.runs else ""
    head = (f"Machine: {m['nproc']} cores ({m['cpu']}), {m['ram']} RAM, Python {m['python']}, "
            f"Linux {m['kernel']}.  \nDate: {m['date']}.  \nCommand: `{cmd.strip()}` "
            f"({b.records} records, {b.runs} run(s) per contestant{spark}, median shown).\n\n")
    if partial:
        head += "**Partial: the run is still going (or was cut short).**\n\n"
    Path(args.markdown).write_text(head + render(b, markdown=True) + "\n")
