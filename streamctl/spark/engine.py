"""Which engine runs a finite job: the local Python pass or a generated PySpark job.

`--engine local|spark|auto` (default auto). auto picks Spark only when the
input is at least `--spark-threshold` bytes *and* pyspark and Java are
available. The local pass is the normal case and is chosen silently; auto
speaks on stderr only when it picks Spark (the JVM's start-up is worth
explaining) or when the input is above the threshold but Spark cannot run
(a setup the user probably wants to fix).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable

from streamctl.errors import StreamctlError, UsageError

ENGINES = ("local", "spark", "auto")

Say = Callable[[str], None]  # where a run's diagnostics go (stderr, as "streamctl: ...")

# Measured on the 2-core reference machine (replay helper's run, 1M records,
# 266 MiB, 2 partitions, other jobs running beside it): local --compact 1.6 s
# wall (a plain-Python dict pass over the same segments: 1.6 s); the Spark
# engine, JVM start-up included, 19-36 s on local[2] and 49 s on local[1];
# warm (session already up) its job took 5 s, on par with a hand-written
# PySpark job (5.4 s). Spark's marginal cost per record on 2 cores is ~3x the
# local pass's, so here it never catches up; it pays off only with many more
# cores (a cluster: --engine spark or --emit-job) or inputs too big for one
# pass. 8 GiB (~30M records) keeps every laptop-sized log local.
DEFAULT_SPARK_THRESHOLD = 8 << 30  # 8 GiB

INSTALL_HINT = "pip install 'streamctl[spark]'"


def spark_available() -> tuple[bool, str]:
    """(True, "") when pyspark is importable and a Java runtime is found; else (False, why)."""
    if importlib.util.find_spec("pyspark") is None:
        return False, f"pyspark is not installed ({INSTALL_HINT})"
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        if os.access(os.path.join(java_home, "bin", "java"), os.X_OK):
            return True, ""
        return False, f"JAVA_HOME={java_home} has no bin/java (Spark needs Java 17 or newer)"
    if shutil.which("java") is None:
        return False, "no Java runtime found (install Java 17+ or set JAVA_HOME)"
    return True, ""


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def check_engine(requested: str) -> None:
    """--engine's value is one of ENGINES (a usage error otherwise, before anything is read or written)."""
    if requested not in ENGINES:
        raise UsageError(f"--engine must be one of {', '.join(ENGINES)}, not {requested!r}")


def choose_engine(requested: str, input_bytes: int, threshold: int | None,
                  say: Say, blocker: str | None = None) -> str:
    """"local" or "spark" for `--engine requested`. auto says through `say` when it picks Spark, or
    when Spark would have been picked but cannot run; below the threshold it is silent.

    `blocker` says why the Spark engine cannot run this job (an option only the local engine
    applies): auto then stays local, saying so at or above the threshold; spark is refused."""
    check_engine(requested)
    if requested == "local":
        return "local"
    if threshold is None:
        threshold = DEFAULT_SPARK_THRESHOLD
    if blocker is not None:
        if requested == "spark":
            raise UsageError(f"the Spark engine cannot run this: {blocker}; use --engine local")
        if input_bytes >= threshold:
            say(f"engine: local (input is above the Spark threshold, but {blocker})")
        return "local"
    ok, why = spark_available()
    if requested == "spark":
        if not ok:
            if "pyspark" in why:
                raise StreamctlError(f"--engine spark needs pyspark, which is not installed; install it with: {INSTALL_HINT}")
            raise StreamctlError(f"--engine spark: {why}")
        return "spark"
    if input_bytes < threshold:
        return "local"
    if not ok:
        say(f"engine: local (input is {_size(input_bytes)}, above the Spark threshold, but {why})")
        return "local"
    say(f"engine: spark (input {_size(input_bytes)} is at least --spark-threshold {_size(threshold)}, "
        "and pyspark and Java are available)")
    return "spark"


# why the Spark engine cannot run a window or join (pick_engine's blocker)
STDIN = "a Spark job reads files or logs, not stdin (-)"
LATE_OUT = "--late-out writes a local file"


def pick_engine(requested: str, paths: list[str], threshold: int | None, say: Say,
                blocker: str | None = None, emit_job: bool = False) -> str:
    """"local" or "spark" for a finite run over `paths`, and the checks --emit-job needs (it is
    Spark's). A URI only Spark reads, stdin (-) only the local engine. `blocker` says why the Spark
    engine cannot run this one otherwise (an option only the local engine applies): --engine spark
    and --emit-job are refused, auto stays local (choose_engine)."""
    check_engine(requested)
    blocker = STDIN if "-" in paths else blocker
    if emit_job:  # written out, not run here: no pyspark needed, but refused as --engine spark is
        if not blocker:
            return "spark"
        requested = "spark"
    uri = next((p for p in paths if is_uri(p)), None)
    if uri is not None and requested != "spark":
        if requested == "local":
            raise UsageError(f"{uri} is a URI: only the Spark engine reads it (--engine spark, or --emit-job)")
        if not blocker:  # (with one, choose_engine refuses Spark naming the option it cannot run)
            say(f"engine: spark ({uri} is a Spark URI; only Spark can read it)")
        requested = "spark"
    return choose_engine(requested, input_bytes(paths), threshold, say, blocker)


def is_uri(path: str) -> bool:
    """hdfs://, s3a://, file://...: only a Spark job reads those."""
    return "://" in path


def input_bytes(paths: list[str]) -> int:
    """Bytes of input, for the engine choice: a log's segments, a file's size (stdin and a URI count
    as nothing: stdin cannot be handed to Spark, and a URI is Spark's anyway)."""
    from streamctl.storage import log as logmod

    total = 0
    for path in paths:
        if path == "-" or is_uri(path):
            continue
        try:
            total += logmod.open_log(path).total_bytes() if logmod.is_log(path) else os.path.getsize(path)
        except OSError:
            pass
    return total


def job_input(path: str) -> str:
    """A job's input path: a local one made absolute, so the job runs from any folder."""
    return path if is_uri(path) else os.path.abspath(path)


def job_inputs(paths: list[str], snapshot: bool) -> list[dict]:
    """PARAMS["inputs"] of a window or join job: each input's path (job_input), whether it is a log
    (a URI is one unless it names a .jsonl file) and, with `snapshot`, each partition's end offset
    as of now, so that a job run now reads what the local engine would (an emitted job, run later,
    reads to the end as it is then)."""
    from streamctl.storage import log as logmod
    from streamctl.storage import reader

    inputs = []
    for path in paths:
        is_log = not path.rstrip("/").endswith(".jsonl") if is_uri(path) else logmod.is_log(path)
        entry: dict = {"path": job_input(path), "is_log": is_log}
        if is_log and snapshot and not is_uri(path):
            lg = logmod.open_log(path)
            entry["end_offsets"] = {str(p): reader.partition_info(lg, p).next_offset for p in range(lg.partitions)}
        inputs.append(entry)
    return inputs


def follow_options(follow: bool, group: str | None, idle_timeout: str | None, engine: str,
                   emit_job: str | None) -> float | None:
    """Checks --follow's options (window and join: it runs on the local engine); the idle timeout
    in seconds."""
    if follow and (engine == "spark" or emit_job is not None):
        raise UsageError("--follow runs on the local engine: --engine spark and --emit-job are for finite input")
    if group is not None:
        from streamctl.storage.names import check_group

        check_group(group)
    if (group or idle_timeout) and not follow:
        raise UsageError("--group and --idle-timeout need --follow (a finite run has nothing to resume)")
    if idle_timeout is None:
        return None
    from streamctl.timeparse import parse_duration

    return parse_duration(idle_timeout) / 1000
