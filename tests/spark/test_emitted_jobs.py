"""Every kind of emitted job (replay, replay --compact, window, join) is streamctl's own modules, copied
whole, and runs where streamctl is not installed: with plain `python job.py` and with `spark-submit job.py`,
giving the local engine's output.

"Where streamctl is not installed": Python started with -S (no site-packages: no streamctl, orjson or
numpy) and a PYTHONPATH holding only pyspark and py4j, for the driver and the executors alike. Each JVM
start costs 10-30 s here, so one run per launcher takes all four jobs: a small runner runs each job file
as `__main__` in turn (what `python job.py` does), each with its own stdout file, and Spark's JVM is
started once per run.
"""

from __future__ import annotations

import ast
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

import streamctl
from streamctl.spark import jobgen
from tests.conftest import run_cli

T0 = 1_763_719_200_000
PACKAGE = Path(streamctl.__file__).parent


def modules_of(text: str) -> dict[str, str]:
    """The MODULES literal of a job file, read as data."""
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "MODULES":
            return ast.literal_eval(node.value)
    raise AssertionError("no MODULES in the job")


@pytest.mark.parametrize("job", ["replay_job", "window_job", "join_job"])
def test_a_job_carries_its_modules_whole(job):
    text = jobgen.render_job("t", {"log": "x"}, job)
    modules = modules_of(text)
    assert f"streamctl/spark/{job}.py" in modules and "streamctl/spark/jobentry.py" in modules
    for path, source in modules.items():
        assert source == (PACKAGE.parent / path).read_text(encoding="utf-8"), path  # byte for byte
    # nothing else of the package: a job carries what it imports
    assert "streamctl/processing/windows/driver.py" not in modules and "streamctl/spark/jobgen.py" not in modules
    if job == "window_job":
        # every window kind's operator: grid windows (tumbling, hopping) in the package itself
        for kind in ("__init__", "sliding", "session"):
            assert f"streamctl/processing/windows/{kind}.py" in modules
    # the job file's own code (all but the literals) runs no generated source
    calls = {n.func.id for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert not calls & {"exec", "eval", "compile"}
    assert "getsource" not in (PACKAGE / "spark" / "jobgen.py").read_text()


def _import_time(tree: ast.Module):
    """The import statements a module runs when it is imported (not those inside functions), each with
    whether it sits in a `try: ... except ImportError:`."""
    def visit(stmts, guarded):
        for node in stmts:
            if isinstance(node, ast.Import | ast.ImportFrom):
                yield node, guarded
            elif isinstance(node, ast.Try):
                catches = any(isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                              for h in node.handlers)
                yield from visit(node.body, guarded or catches)
                for part in (node.handlers, node.orelse, node.finalbody):
                    yield from visit(part, guarded)
            elif isinstance(node, ast.If | ast.With | ast.ClassDef | ast.ExceptHandler):
                yield from visit(node.body, guarded)
                yield from visit(getattr(node, "orelse", []), guarded)
    yield from visit(tree.body, False)


@pytest.mark.parametrize("job", ["replay_job", "window_job", "join_job"])
def test_a_job_imports_only_its_modules_the_stdlib_pyspark_and_optional_orjson(job):
    """What importing the job module imports, transitively: nothing but the modules the job carries,
    the standard library, pyspark/py4j, and orjson with a fallback (no numpy, no msgspec). A carried
    module imported only inside a function (not on the Spark path) is not imported at start."""
    modules = jobgen.job_modules(job)
    name_of = {p.removesuffix(".py").removesuffix("/__init__").replace("/", "."): p for p in modules}
    todo, seen = [f"streamctl.spark.{job}", jobgen.ENTRY], set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        assert module in name_of, f"{module} is imported but not carried"
        for node, guarded in _import_time(ast.parse(modules[name_of[module]])):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                top = name.split(".")[0]
                if top == "streamctl":
                    todo.append(name)
                    if isinstance(node, ast.ImportFrom):
                        todo += [f"{name}.{a.name}" for a in node.names if f"{name}.{a.name}" in name_of]
                elif top == "orjson":
                    assert guarded, f"{module}: orjson imported without a fallback"
                else:
                    assert top in sys.stdlib_module_names or top in ("pyspark", "py4j"), (module, name)
    assert job == "replay_job" or "streamctl.timeparse" in seen


def test_text_literal_round_trips_awkward_text():
    for text in ["", "a", "'''", '"""', "x'''y\"\"\"z", "ends with \\", "ends with '", "\r\n", "tab\tq'"]:
        assert ast.literal_eval(jobgen.text_literal(text)) == text


# -- running them ----------------------------------------------------------------------------------------

RUNNER = '''"""Run each job file given as a program (__main__), one after another in this process, each job's
stdout into JOB.out; stop at the first failing one."""
import os
import runpy
import sys

for job in sys.argv[1:]:
    for name in [m for m in sys.modules if m.split(".")[0] == "streamctl"]:
        del sys.modules[name]  # each job imports its own copy of the modules
    fd = os.open(job + ".out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.close(fd)
    path = sys.path[:]
    try:
        runpy.run_path(job, run_name="__main__")
    except SystemExit as e:
        if e.code:
            raise
    sys.path[:] = path
    sys.stderr = sys.__stderr__
'''


def _events(n: int, seed: int, step: int) -> list[str]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        at = T0 + i * step + rnd.randint(-3000, 3000)
        out.append(f'{{"at": {at}, "u": "u{rnd.randrange(4)}", "ms": {rnd.choice(["1.5", "7", "null", str(i)])}}}')
    return out


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> tuple[Path, list[tuple[str, bytes]]]:
    """The four emitted jobs in a folder, with the local engine's output for each."""
    d = tmp_path_factory.mktemp("emitted")
    clicks, searches = str(d / "clicks"), str(d / "searches")
    run_cli("produce", clicks, "--partitions", "3", "--key-field", "u", input="\n".join(_events(150, 1, 700)) + "\n",
            check=True)
    run_cli("produce", searches, "--partitions", "2", "--key-field", "u", input="\n".join(_events(60, 2, 1500)) + "\n",
            check=True)
    commands = {
        "replay": ["replay", clicks],
        "compact": ["replay", clicks, "--compact", "--until", "30"],
        "window": ["window", clicks, "--session", "3s", "--time-field", "at", "--agg", "count", "--agg", "avg:ms",
                   "--agg", "distinct:ms", "--agg", "last:ms"],
        "join": ["join", searches, clicks, "--within", "2s", "--on", "key", "--time-field", "value.at", "--how", "outer"],
    }
    out = []
    for name, args in commands.items():
        want = run_cli(*args, "--engine", "local", check=True).stdout
        assert want.count(b"\n") >= (4 if name == "compact" else 20), name  # compact: one line per key
        run_cli(*args, "--emit-job", str(d / f"{name}.py"), check=True)
        out.append((name, want))
    return d, out


def _bare_env(tmp: Path) -> dict[str, str]:
    """A Python without site-packages (no streamctl, orjson, numpy) that sees only pyspark and py4j."""
    import py4j
    import pyspark

    lib = tmp / "lib"
    lib.mkdir(exist_ok=True)
    for mod in (pyspark, py4j):
        link = lib / mod.__name__
        if not link.exists():
            link.symlink_to(Path(mod.__file__).parent)
    python = tmp / "python"
    python.write_text(f'#!/bin/sh\nexec {os.path.realpath(sys.executable)} -S "$@"\n')
    python.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "JAVA_HOME", "TMPDIR", "LANG")}
    env.update(PYTHONPATH=str(lib), PYSPARK_PYTHON=str(python), PYSPARK_DRIVER_PYTHON=str(python))
    check = subprocess.run([str(python), "-c", "import pyspark.sql\nfor m in ('streamctl', 'orjson', 'numpy'):\n"
                            "    try:\n        __import__(m)\n    except ImportError:\n        continue\n"
                            "    raise SystemExit(m + ' is importable')"], env=env, cwd=tmp, capture_output=True)
    assert check.returncode == 0, check.stderr.decode()[-1000:]
    return env


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["python", "spark-submit"])
def test_every_emitted_job_runs_without_streamctl(jobs, tmp_path, launcher):
    folder, expected = jobs
    env = _bare_env(tmp_path)
    runner = folder / f"run-{launcher}.py"
    runner.write_text(RUNNER)
    names = [f"{name}.py" for name, _ in expected]
    if launcher == "python":
        cmd = [env["PYSPARK_PYTHON"], str(runner), *names]
    else:
        submit = Path(sys.executable).parent / "spark-submit"
        assert os.access(submit, os.X_OK), f"spark-submit not found at {submit} (pyspark installs it)"
        cmd = [str(submit), "--master", "local[2]", str(runner), *names]
    proc = subprocess.run(cmd, env=env, cwd=folder, capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    for name, want in expected:
        got = (folder / f"{name}.py.out").read_bytes()
        assert got == want, name
    # the window and join summaries go to stderr, never among the results (spark-submit merges the
    # Python driver's stderr into its stdout: the job sends them to the JVM's stderr there)
    assert b"streamctl window job:" in proc.stderr and b"streamctl join job:" in proc.stderr
