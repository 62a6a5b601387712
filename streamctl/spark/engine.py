"""Which engine runs a finite job: the local Python pass or a generated PySpark job.

`--engine local|spark|auto` (default auto). auto picks Spark only when the
input is at least `--spark-threshold` bytes *and* pyspark and Java are
available, and it says on stderr which engine it chose and why.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable

from streamctl.errors import StreamctlError, UsageError

ENGINES = ("local", "spark", "auto")

# Measured on the 2-core reference machine (see BENCHMARKS.md and the replay
# helper's report): PySpark local[2] pays ~6 s for a session and ~8-11 s more
# per job, and never beat one Python process at replay --compact up to 15M
# records (~4 GiB). On a laptop Spark is worth it only for inputs that do not
# fit a single pass comfortably; on a cluster use --engine spark or --emit-job.
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


def choose_engine(requested: str, input_bytes: int, threshold: int | None,
                  say: Callable[[str], None]) -> str:
    """"local" or "spark" for `--engine requested`; auto explains its choice through `say`."""
    if requested not in ENGINES:
        raise UsageError(f"--engine must be one of {', '.join(ENGINES)}, not {requested!r}")
    if requested == "local":
        return "local"
    if threshold is None:
        threshold = DEFAULT_SPARK_THRESHOLD
    ok, why = spark_available()
    if requested == "spark":
        if not ok:
            if "pyspark" in why:
                raise StreamctlError(f"--engine spark needs pyspark, which is not installed; install it with: {INSTALL_HINT}")
            raise StreamctlError(f"--engine spark: {why}")
        return "spark"
    if input_bytes < threshold:
        say(f"engine: local (input {_size(input_bytes)} is below --spark-threshold {_size(threshold)})")
        return "local"
    if not ok:
        say(f"engine: local (input is {_size(input_bytes)}, above the Spark threshold, but {why})")
        return "local"
    say(f"engine: spark (input {_size(input_bytes)} is at least --spark-threshold {_size(threshold)}, "
        "and pyspark and Java are available)")
    return "spark"
