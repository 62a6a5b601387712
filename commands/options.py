"""Options that several subcommands share, defined once so their names and help agree.

Each function returns a fresh typer.Option (typer needs one per parameter).
"""

from __future__ import annotations

from typing import Any

import typer

# help of the filter and template options consume, tail and replay share
WHERE_HELP = ("Only records where PATH OP VALUE holds (repeatable: all must hold). PATH: value.user.id, key, ts, "
              "offset, partition, headers.NAME (other paths are under value). OP: == != < <= > >= or ~ (regular "
              "expression search in a string). VALUE: JSON (100, \"JP\", true, null) or a bare word taken as a "
              "string. A missing field is null; != is the negation of ==; comparing different types (true and 1 "
              "too) is false, except by !=.")
FORMAT_HELP = ("kcat's -f template, kcat's meanings: %t the log's name (its folder's base name), %p partition, "
               "%o offset, %T timestamp (epoch ms), %k key, %s value, %h headers (n=v,n2=v2), %K / %S key / "
               "value length in bytes (-1: null), %R the value length as 4 bytes (binary, big-endian signed "
               "32-bit, -1: null), %% a %, kcat's escapes (\\t \\n \\r, \\xHH, \\NNN); "
               "plus %d, the timestamp as ISO-8601 UTC with milliseconds.")


def engine() -> Any:
    return typer.Option("auto", "--engine", metavar="local|spark|auto",
                        help="Where finite input is processed: this process, a generated PySpark job, or auto: "
                             "Spark at or above --spark-threshold of input when pyspark and Java are available.")


def spark_threshold() -> Any:
    from streamctl.commands import numbers

    return typer.Option(None, "--spark-threshold", metavar="SIZE", callback=numbers.size(),
                        help="Input size from which --engine auto picks Spark (default 8GiB).")


def master() -> Any:
    return typer.Option(None, "--master", metavar="URL",
                        help="Spark master (default local[*]), e.g. spark://host:7077 or yarn; a job written by "
                             "--emit-job without it takes spark-submit's --master.")


def emit_job(extra: str = "") -> Any:
    return typer.Option(None, "--emit-job", metavar="FILE",
                        help="Write the standalone PySpark job to FILE (- for stdout) and exit; run it with "
                             "spark-submit FILE or python FILE." + (f" {extra}" if extra else ""))


def unbuffered(what: str = "record") -> Any:
    return typer.Option(False, "--unbuffered", "-u", help=f"Flush after every {what} (automatic on a terminal).")
