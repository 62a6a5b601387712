"""Render a standalone, readable PySpark job: a job module of this package and the modules it
imports, copied whole, with its parameters as data.

The job file is what `--emit-job FILE` writes and what the Spark engine runs:

    header comment      what it does, how to run it, what it needs
    PARAMS = json.loads(...)
                        every user value (paths, keys, times) as one JSON text;
                        the Python literal is made by repr() of the JSON lines,
                        so no user value can become code
    start-up            a few functions: MODULES become a zip (the package
                        `streamctl`, only these files) in a temp folder, put
                        first on sys.path; the job module is imported from it
                        and run by streamctl.spark.jobentry, which ships the same
                        zip to the executors (SparkContext.addPyFile)
    MODULES = {...}     path in the package -> the file's text, each file whole
                        and unchanged (a raw string literal of it)

The files are read with importlib.resources, never through inspect and never
cut: the set is the job module (streamctl/spark/<job>.py), every streamctl
module it imports (transitively, found with ast), their packages' __init__.py
and streamctl.spark.jobentry. Nothing is exec'd: the modules are imported as
any installed package would be. They may import one another, the standard
library, pyspark, and orjson only with a fallback (streamctl.orjson_fallback),
so the job runs where only pyspark and Java are installed;
tests/spark/test_emitted_jobs.py checks that and runs each kind of job there.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from streamctl import __version__

ENTRY = "streamctl.spark.jobentry"

START_UP = '''
# ---------------------------------------------------------------------------
# Start-up: MODULES (at the end of this file) become the package `streamctl`
# in a zip, first on sys.path; the job module is imported from it (nothing is
# exec'd) and run by streamctl.spark.jobentry, which ships the zip to the
# executors. An installed streamctl is not used.
# ---------------------------------------------------------------------------

import atexit
import importlib
import os
import shutil
import sys
import tempfile
import zipfile


def package(folder):
    """MODULES as a zip in folder, the same bytes on every run, first on sys.path; its path."""
    path = os.path.join(folder, "streamctl-job.zip")
    with zipfile.ZipFile(path, "w") as z:
        for name, text in sorted(MODULES.items()):
            z.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), text.encode("utf-8"))
    sys.path.insert(0, path)
    return path


def main(spark, params, out):
    """The job on a SparkSession that is already running (a notebook, a test): out(line) takes
    each result line. Where streamctl is imported already, its modules are the ones run."""
    if "streamctl" not in sys.modules:
        folder = tempfile.mkdtemp(prefix="streamctl-job-")
        atexit.register(shutil.rmtree, folder, True)  # the executors may read it until then
        spark.sparkContext.addPyFile(package(folder))
    importlib.import_module(JOB).main(spark, params, out)


def run():
    import time

    started = time.monotonic()
    folder = tempfile.mkdtemp(prefix="streamctl-job-")
    try:
        path = package(folder)
        entry = importlib.import_module(ENTRY)
        code = entry.run(PARAMS, importlib.import_module(JOB), path, started)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    sys.exit(code)
'''


def _lines_literal(text: str, indent: str) -> str:
    """One repr() literal per line of `text` (each with its newline): adjacent literals, one string.
    repr() of a str always yields a valid, inert Python string literal whatever it holds (quotes,
    newlines, code)."""
    return "\n".join(f"{indent}{line!r}" for line in text.splitlines(keepends=True))


def params_literal(params: dict) -> str:
    """`json.loads(...)` source for params: the JSON text ASCII-only (ensure_ascii) and indented, so
    the literal is readable and editable, one line per literal (_lines_literal)."""
    text = json.dumps(params, indent=2, ensure_ascii=True, sort_keys=False)
    return f"json.loads(\n{_lines_literal(text, '    ')}\n)"


def text_literal(text: str) -> str:
    """A Python literal of `text` that reads as the text itself: a raw triple-quoted string when one
    spells it exactly (checked by parsing it back), else one repr() literal per line."""
    for quote in ("'''", '"""'):
        literal = f"r{quote}{text}{quote}"
        try:
            if ast.literal_eval(literal) == text:
                return literal
        except (SyntaxError, ValueError):
            pass
    return f"(\n{_lines_literal(text, '        ')}\n    )"


def _file(module: str):
    """The Traversable of a streamctl module's file (a package's __init__.py)."""
    parts = module.split(".")
    if parts[0] != "streamctl":
        raise ValueError(f"not a streamctl module: {module}")
    root = resources.files("streamctl")
    package = root.joinpath(*parts[1:], "__init__.py")
    if package.is_file():
        return package
    node = root.joinpath(*parts[1:-1], parts[-1] + ".py")
    if len(parts) < 2 or not node.is_file():
        raise ValueError(f"{module} is not a module in streamctl/ (a job carries only those files)")
    return node


def _is_module(module: str) -> bool:
    try:
        _file(module)
    except ValueError:
        return False
    return True


def _statements(body: list):
    """Every statement in `body` and in the blocks nested in it (functions, classes, if, try, ...);
    imports are statements, so the expressions (most of a tree) are not walked."""
    for node in body:
        yield node
        for field in ("body", "orelse", "handlers", "finalbody", "cases"):
            block = getattr(node, field, None)
            if isinstance(block, list):
                yield from _statements(block)


def _imported(module: str, text: str) -> set[str]:
    """The streamctl modules `text` (module's source) imports, anywhere in it."""
    found: set[str] = set()
    for node in _statements(ast.parse(text, module).body):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "streamctl")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise ValueError(f"{module}: a job module imports absolutely (from streamctl...)")
            if node.module and node.module.split(".")[0] == "streamctl":
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names if _is_module(f"{node.module}.{a.name}"))
    return found


def job_modules(job: str) -> dict[str, str]:
    """{path in the package ("streamctl/spark/window_job.py"): the file's text} for streamctl.spark.<job>:
    the job module, what it imports of streamctl (transitively), their packages and the entry module."""
    todo = [f"streamctl.spark.{job}", ENTRY]
    seen: set[str] = set()
    out: dict[str, str] = {}
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # the packages it is in
        node = _file(module)
        text = node.read_text(encoding="utf-8")
        out["/".join(parts) + ("/__init__.py" if node.name == "__init__.py" else ".py")] = text
        todo += sorted(_imported(module, text))
    return dict(sorted(out.items()))


def _comment(text: str) -> str:
    return "\n".join(f"# {ln}".rstrip() for ln in text.splitlines())


HOW_TO_RUN = (
    "  spark-submit job.py > out.jsonl                  # the master from spark-submit (default local[*])\n"
    "  spark-submit --master yarn job.py > out.jsonl    # on a cluster\n"
    "  python job.py > out.jsonl                        # plain Python with pyspark: local[*] unless PARAMS has\n"
    "                                                   # a master")


def render_job(title: str, params: dict, job: str, note: str = "") -> str:
    """The complete job file for streamctl.spark.<job>. `title` and `note` (said after how to run
    it) are our text, not user values: keep user values in `params`; they are sanitised to
    comments here anyway."""
    modules = job_modules(job)
    header = _comment(
        f"{title}\n\nGenerated by streamctl {__version__}. A standalone PySpark job: it needs Python 3.11+,\n"
        "pyspark (pip install pyspark) and Java 17+, not streamctl: the streamctl code it runs is in\n"
        "MODULES at the end, each file copied whole.\n\n"
        f"How to run it:\n{HOW_TO_RUN}\n{note + chr(10) if note else ''}\n"
        "Its parameters are the JSON text in PARAMS below; edit them there (paths may be\n"
        "any Spark URI: hdfs://, s3a://, file://). Log level WARN, no progress bar;\n"
        "result lines go to stdout, or to PARAMS[\"output\"] when that is set."
    )
    listing = "\n".join(f"#   {path}" for path in modules)
    entries = "\n".join(f"    {path!r}: {text_literal(text)},\n" for path, text in modules.items())
    return (
        "#!/usr/bin/env python3\n"
        f"{header}\n\n"
        "import json\n\n"
        f"PARAMS = {params_literal(params)}\n\n"
        f"JOB = {f'streamctl.spark.{job}'!r}  # the module whose main(spark, params, out) is the job\n"
        f"ENTRY = {ENTRY!r}  # the session, the output and the exit codes\n"
        f"{START_UP.rstrip()}\n\n\n"
        "# ---------------------------------------------------------------------------\n"
        f"# The code: these files of streamctl {__version__}, each whole and unchanged\n"
        "# (path in the package -> text):\n"
        f"{listing}\n"
        "# ---------------------------------------------------------------------------\n\n"
        f"MODULES = {{\n{entries}}}\n\n"
        'if __name__ == "__main__":\n'
        "    run()\n"
    )


@dataclass(frozen=True)
class Job:
    """A command's Spark job, emitted or run by streamctl (runner): the command (`name`; its job
    module is streamctl.spark.<name>_job), the header's title and note (our text: user values go
    in `params`) and the command's own PARAMS."""

    name: str
    title: str
    params: dict
    note: str = ""

    def text(self, master: str | None, **more: Any) -> str:
        """The job file (render_job). PARAMS: the command's, `more` (what a run by streamctl adds:
        runner), then those of every job, read by streamctl.spark.jobentry (the session and where
        the result lines go), for the reader of an emitted job to edit."""
        params = {**self.params, **more, "output": None, "master": master, "app_name": f"streamctl-{self.name}",
                  "log_level": "WARN"}
        return render_job(self.title, params, f"{self.name}_job", self.note)
