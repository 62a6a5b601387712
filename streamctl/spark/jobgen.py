"""Render a standalone, readable PySpark script from a job body and its parameters.

The script is what `--emit-job FILE` writes and what the Spark engine runs:

    header comment      what it does and how to run it
    PARAMS = json.loads(...)
                        every user value (paths, keys, times) as one JSON text;
                        the Python literal is made by repr() of the JSON lines,
                        so no user value can become code
    job body            plain PySpark DataFrame code defining main(spark, params, out)
    entry point         builds the session (quiet logs, no progress bar), calls
                        main, writes each result line to stdout or params["output"]

A body is a normal Python module in this package (so tests can exec it and
ruff checks it) read as text; it must not use `from __future__` (it is not at
the top of the generated file) and must not import streamctl.
"""

from __future__ import annotations

import json
from importlib import resources

from streamctl import __version__

ENTRY_POINT = '''
# ---------------------------------------------------------------------------
# Entry point: session, output, and the exit codes a shell expects.
# ---------------------------------------------------------------------------

import errno
import os


def _session(params):
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(params.get("app_name") or "streamctl-job")
    # Without a master in PARAMS, spark-submit's --master applies (a master set
    # in code would override it); plain `python job.py` then runs on local[*].
    if params.get("master"):
        builder = builder.master(params["master"])
    conf = {
        "spark.ui.showConsoleProgress": "false",  # no progress bar on the terminal
        "spark.sql.session.timeZone": "UTC",
    }
    if (params.get("master") or "").startswith("local"):
        conf["spark.ui.enabled"] = "false"  # nobody browses a local one-shot job's UI; it costs start-up
    # The body says how much heap the driver needs (driver_memory): one that receives the
    # result partition by partition (toLocalIterator) needs more than Spark's 1 GiB default.
    # Only takes effect when this process starts the JVM (python job.py, streamctl itself);
    # spark-submit's --driver-memory wins.
    memory = driver_memory(params)
    if memory:
        conf["spark.driver.memory"] = memory
    conf.update(params.get("spark_conf") or {})
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(params.get("log_level") or "WARN")
    return spark


class _Output:
    """Result lines, batched: to a local file, a Hadoop URI (hdfs://, s3a://), or stdout."""

    def __init__(self, spark, target, stdout_fd):
        self._buf = []
        self._size = 0
        self._java = None
        self._file = None
        if target and "://" in target and not target.startswith("file://"):
            jvm = spark.sparkContext._jvm
            path = jvm.org.apache.hadoop.fs.Path(target)
            fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
            self._java = fs.create(path, True)
        elif target and target != "-":
            self._file = open(target.removeprefix("file://"), "wb")
        else:
            self._file = open(stdout_fd, "wb", closefd=False)

    def __call__(self, line):
        data = line.encode("utf-8") + b"\\n"
        self._buf.append(data)
        self._size += len(data)
        if self._size >= 1 << 20:
            self.flush()

    def write_bytes(self, data):
        """Bytes that already are whole result lines, ending in a newline (copied part files)."""
        self.flush()
        if self._java is not None:
            self._java.write(bytearray(data))
        else:
            self._file.write(data)

    def flush(self):
        data = b"".join(self._buf)
        self._buf.clear()
        self._size = 0
        if self._java is not None:
            if data:
                self._java.write(bytearray(data))
        else:
            self._file.write(data)
            self._file.flush()

    def copy_file(self, path):
        """A local file of whole result lines, copied by the kernel (sendfile) when the output
        is a local file or pipe; read and written otherwise."""
        self.flush()
        done = 0
        with open(path, "rb") as f:
            if self._file is not None:
                self._file.flush()
                size = os.fstat(f.fileno()).st_size
                try:
                    while done < size:
                        sent = os.sendfile(self._file.fileno(), f.fileno(), done, size - done)
                        if sent == 0:
                            break
                        done += sent
                except OSError as e:
                    if e.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                        raise  # a closed pipe among them: the caller's exit code
                f.seek(done)
            while data := f.read(4 << 20):
                self.write_bytes(data)

    def close(self):
        self.flush()
        if self._java is not None:
            self._java.close()
        else:
            self._file.close()


def _record_times(started, ready):
    """With STREAMCTL_JOB_TIMES=FILE set, append one JSON line to FILE: the seconds spent
    starting Spark (JVM, session) and the seconds of the job's own work after that (up to the
    last output byte). Start-up is the same for any job; the work is what a job's code decides."""
    path = os.environ.get("STREAMCTL_JOB_TIMES")
    if path:
        import time

        with open(path, "a") as f:
            f.write(json.dumps({"startup_s": round(ready - started, 3), "work_s": round(time.monotonic() - ready, 3)}) + "\\n")


if __name__ == "__main__":
    import sys
    import time

    _started = time.monotonic()
    # Results go to the real stdout; fd 1 is pointed at stderr before Java
    # starts, so nothing Spark or the JVM prints can end up among the results.
    _stdout_fd = os.dup(1)
    os.dup2(2, 1)
    _spark = _session(PARAMS)
    _ready = time.monotonic()
    _out = _Output(_spark, PARAMS.get("output"), _stdout_fd)
    _code = 0
    try:
        main(_spark, PARAMS, _out)
        _out.close()
        _record_times(_started, _ready)
    except BrokenPipeError:
        _code = 141  # the reader closed the pipe, as `cat` would exit
        _null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(_null, _stdout_fd)
    except KeyboardInterrupt:
        _code = 130
    finally:
        _spark.stop()
    sys.exit(_code)
'''


def params_literal(params: dict) -> str:
    """`json.loads(...)` source for params: each line of the JSON text as its own repr() literal.

    The JSON is ASCII-only (ensure_ascii) and indented, so the literal is
    readable and editable; repr() of a str always yields a valid, inert
    Python string literal whatever the value holds (quotes, newlines, code).
    """
    text = json.dumps(params, indent=2, ensure_ascii=True, sort_keys=False)
    pieces = text.split("\n")
    body = "\n".join(f"    {piece + chr(10) if i < len(pieces) - 1 else piece!r}" for i, piece in enumerate(pieces))
    return f"json.loads(\n{body}\n)"


def _comment(text: str) -> str:
    return "\n".join(f"# {ln}".rstrip() for ln in text.splitlines())


def render_job(title: str, how_to_run: str, params: dict, body: str) -> str:
    """The complete script. `title` and `how_to_run` are our text (not user values):
    keep user values in `params`; they are sanitised to comments here anyway."""
    if "from __future__" in body:
        raise ValueError("a job body must not use `from __future__` imports")
    header = _comment(
        f"{title}\n\nGenerated by streamctl {__version__}. A standalone PySpark job: it needs pyspark\n"
        f"(pip install pyspark) and Java 17+, not streamctl.\n\nHow to run it:\n{how_to_run}\n\n"
        "Its parameters are the JSON text in PARAMS below; edit them there (paths may be\n"
        "any Spark URI: hdfs://, s3a://, file://). Log level WARN, no progress bar;\n"
        "result lines go to stdout, or to PARAMS[\"output\"] when that is set."
    )
    return (
        "#!/usr/bin/env python3\n"
        f"{header}\n\n"
        "import json\n\n"
        f"PARAMS = {params_literal(params)}\n\n"
        "# ---------------------------------------------------------------------------\n"
        "# Job body: plain PySpark DataFrame code.\n"
        "# ---------------------------------------------------------------------------\n"
        f"{body.strip()}\n\n"
        f"{ENTRY_POINT.strip()}\n"
    )


def body_source(module: str) -> str:
    """The text of a job-body module in streamctl.spark (e.g. "replay_job"), without importing it."""
    return resources.files("streamctl.spark").joinpath(f"{module}.py").read_text(encoding="utf-8")


# streamctl's own functions a job needs, pasted in: a job runs where streamctl is not
# installed, and must read times and field paths exactly as the local engine does.
_PASTED = (("timeparse", ("parse_iso", "format_iso", "_td", "event_time_ms")), ("storage.fieldpaths", ("get",)))


def pasted_core() -> str:
    """Source of streamctl.timeparse's time functions and streamctl.storage.fieldpaths.get for a job body.

    They carry type hints like `int | None`, so jobs need Python 3.10+ on the cluster.
    """
    import importlib
    import inspect

    out = ["# ---- streamctl.timeparse and streamctl.storage.fieldpaths (pasted from streamctl) ----",
           "from datetime import datetime, timezone", "from typing import Any", "",
           "UTC = timezone.utc", "_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)", "_MISSING = object()", ""]
    for module, names in _PASTED:
        mod = importlib.import_module(f"streamctl.{module}")
        out += [inspect.getsource(getattr(mod, name)) for name in names]
    return "\n".join(out)

