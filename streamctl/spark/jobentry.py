"""How a generated job runs as a program: the session, the result output, and the exit codes a shell expects.

A job file (streamctl.spark.jobgen) carries this module, copied whole, with
the job module and the rest of the package it imports; its start-up code
imports them from a zip of those files and calls `run`. Only the standard
library here; pyspark is imported when the session starts.
"""

import errno
import json
import os
import sys
import time


def session(params, job):
    """The SparkSession for PARAMS: quiet logs, no progress bar, UTC, the heap the job asks for."""
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
    # The driver's heap: a job whose result comes back partition by partition (toLocalIterator:
    # window, join) needs more than Spark's 1 GiB default; a job that knows better says so
    # (driver_memory: replay). Only takes effect when this process starts the JVM (python
    # job.py, streamctl itself); spark-submit's --driver-memory wins.
    memory = job.driver_memory(params) if hasattr(job, "driver_memory") else "4g"
    if memory:
        conf["spark.driver.memory"] = memory
    conf.update(params.get("spark_conf") or {})
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(params.get("log_level") or "WARN")
    return spark


def hadoop_file(spark, uri):
    """(Hadoop FileSystem, Path) of the file or folder a Spark URI (hdfs://, s3a://, file://) or a
    local path names."""
    path = spark.sparkContext._jvm.org.apache.hadoop.fs.Path(uri)
    return path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), path


class Output:
    """Result lines, batched: to a local file, a Hadoop URI (hdfs://, s3a://), or stdout."""

    def __init__(self, spark, target, stdout_fd):
        self._buf = []
        self._size = 0
        self._java = None
        self._file = None
        if target and "://" in target and not target.startswith("file://"):
            fs, path = hadoop_file(spark, target)
            self._java = fs.create(path, True)
        elif target and target != "-":
            self._file = open(target.removeprefix("file://"), "wb")
        else:
            self._file = open(stdout_fd, "wb", closefd=False)

    def __call__(self, line):
        data = line.encode("utf-8") + b"\n"
        self._buf.append(data)
        self._size += len(data)
        if self._size >= 1 << 20:
            self.flush()

    def write_bytes(self, data):
        """Bytes that already are whole result lines, ending in a newline (copied part files):
        written out with the lines before them."""
        self._buf.append(data)
        self.flush()

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


class JavaStderr:
    """sys.stderr under spark-submit, which starts this Python process from its JVM with the
    process's stderr merged into its stdout (where the results go): notes written to sys.stderr
    (a job's summary line, warnings) go to the JVM's own stderr instead, as with `python job.py`."""

    def __init__(self, jvm):
        self._err = jvm.java.lang.System.err

    def write(self, text):
        self._err.print(text)
        return len(text)

    def flush(self):
        self._err.flush()

    def isatty(self):
        return False


STATS_PREFIX = "#streamctl-stats "  # before a window or join job's counts (report)


def report(params, name, stats, out):
    """A window or join job's counts: its last result line when PARAMS["stats_line"] (streamctl,
    which runs it, reads that line back and removes it: runner.run_job), else a note on stderr."""
    if params.get("stats_line"):
        out(STATS_PREFIX + json.dumps(stats))
    else:
        print(f"streamctl {name} job: {json.dumps(stats)}", file=sys.stderr)


def record_times(started, ready):
    """With STREAMCTL_JOB_TIMES=FILE set, append one JSON line to FILE: the seconds spent
    starting Spark (JVM, session) and the seconds of the job's own work after that (up to the
    last output byte). Start-up is the same for any job; the work is what a job's code decides."""
    path = os.environ.get("STREAMCTL_JOB_TIMES")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"startup_s": round(ready - started, 3),
                                "work_s": round(time.monotonic() - ready, 3)}) + "\n")


def run(params, job, code_zip, started=None):
    """Run `job` (a job module: main(spark, params, out), and driver_memory(params) where the
    session's default does not fit) as the program: results to the real stdout or params["output"]; returns the exit status.

    `code_zip` is the zip the job's modules were imported from: the executors get it too
    (SparkContext.addPyFile), so they run the same code without streamctl installed."""
    started = time.monotonic() if started is None else started
    # Results go to the real stdout; fd 1 is pointed at stderr before Java
    # starts, so nothing Spark or the JVM prints can end up among the results.
    stdout_fd = os.dup(1)
    os.dup2(2, 1)
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # the JVM started us (spark-submit), not we it
    spark = session(params, job)
    ready = time.monotonic()
    if submitted:
        sys.stderr = JavaStderr(spark.sparkContext._jvm)
    code = 0
    try:
        spark.sparkContext.addPyFile(code_zip)
        out = Output(spark, params.get("output"), stdout_fd)
        job.main(spark, params, out)
        out.close()
        record_times(started, ready)
    except BrokenPipeError:
        code = 141  # the reader closed the pipe, as `cat` would exit
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stdout_fd)
    except KeyboardInterrupt:
        code = 130
    finally:
        spark.stop()
    return code
