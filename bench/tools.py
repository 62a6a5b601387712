"""Reference tools: find them, install what is missing, and say why anything is skipped.

DuckDB and Polars come from PyPI into the Python running the bench (the project
venv); jq and Miller from Debian packages (apt-get, as root or with passwordless
sudo). PySpark needs Java; it is never installed here (it is streamctl's own
optional extra: pip install 'streamctl[spark]').
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

from bench.runner import say

if TYPE_CHECKING:
    from bench.runner import Bench

PYPI = {"duckdb": "duckdb", "polars": "polars", "orjson": "orjson"}
APT = {"jq": "jq", "mlr": "miller"}


def _pip(pkgs: list[str]) -> str | None:
    say(f"installing {' '.join(pkgs)} with pip into {sys.prefix}")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", *pkgs], capture_output=True, text=True)
    return None if r.returncode == 0 else (r.stderr.strip().splitlines() or ["pip failed"])[-1]


def _apt(pkgs: list[str]) -> str | None:
    if not shutil.which("apt-get"):
        return "no apt-get on this machine"
    prefix: list[str] = []
    if os.geteuid() != 0:
        if not shutil.which("sudo") or subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode:
            return "not root and no passwordless sudo for apt-get"
        prefix = ["sudo", "-n"]
    say(f"installing {' '.join(pkgs)} with apt-get")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    r = subprocess.run([*prefix, "apt-get", "install", "-y", "-q", *pkgs], capture_output=True, text=True, env=env)
    if r.returncode:
        subprocess.run([*prefix, "apt-get", "update", "-q"], capture_output=True, env=env)
        r = subprocess.run([*prefix, "apt-get", "install", "-y", "-q", *pkgs], capture_output=True, text=True, env=env)
    return None if r.returncode == 0 else (r.stderr.strip().splitlines() or ["apt-get failed"])[-1]


def ensure_tools(b: Bench, install: bool = True) -> None:
    missing_py = [m for m in PYPI if importlib.util.find_spec(m) is None]
    if missing_py and install:
        err = _pip([PYPI[m] for m in missing_py])
        if err:
            say(f"pip: {err}")
        importlib.invalidate_caches()
    for m in PYPI:
        b.tools[m] = importlib.util.find_spec(m) is not None
        if not b.tools[m]:
            b.skipped.append(f"{m}: not installed ({'pip install failed' if install else '--no-install'}); its rows are left out")
    missing_bin = [c for c in APT if not shutil.which(c)]
    if missing_bin and install:
        err = _apt([APT[c] for c in missing_bin])
        if err:
            say(f"apt-get: {err}")
    for c in APT:
        b.tools[c] = shutil.which(c) is not None
        if not b.tools[c]:
            b.skipped.append(f"{c}: not installed and could not be installed; its rows are left out")
    b.tools["cat"] = shutil.which("cat") is not None
    b.tools["tail"] = shutil.which("tail") is not None
    spark = importlib.util.find_spec("pyspark") is not None
    java = bool(shutil.which("java") or os.environ.get("JAVA_HOME"))
    b.tools["pyspark"] = spark and java and not b.skip_spark
    if b.skip_spark:
        b.skipped.append("Spark engine and PySpark references: " + (
            "--quick (each Spark run costs ~20 s; add --spark to include them)" if b.quick and not b.args.skip_spark
            else "--skip-spark"))
    elif not spark:
        b.skipped.append("Spark engine and PySpark references: pyspark not installed (pip install 'streamctl[spark]')")
    elif not java:
        b.skipped.append("Spark engine and PySpark references: no java on PATH and no JAVA_HOME")
