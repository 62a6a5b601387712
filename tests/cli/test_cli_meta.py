"""The CLI as a whole: help, version, start-up imports, usage errors, and the docs generated from it or run by it."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CLI, ROOT, cli_env, log_records, run_cli
from streamctl.commands.main import COMMANDS, build_app


def available_commands() -> list[str]:
    from typer import Context
    from typer.main import get_command

    root = get_command(build_app())
    return root.list_commands(Context(root))


def test_version_and_module_entry():
    p = run_cli("--version", check=True)
    assert p.stdout.startswith(b"streamctl ")
    # every listed command is registered (none skipped), and every command module is listed
    assert available_commands() == COMMANDS
    modules = {p.stem for p in (ROOT / "commands").glob("*.py") if "def register(" in p.read_text()}
    assert modules == set(COMMANDS)
    assert {"produce", "consume", "stat", "check"} <= set(available_commands())


def test_every_command_has_help_with_an_example():
    for name in available_commands():
        p = run_cli(name, "--help", check=True)
        out = p.stdout.decode()
        assert "Examples:" in out and f"streamctl {name}" in out, name


def test_help_does_not_import_heavy_modules():
    code = (
        "import sys\n"
        "from streamctl.commands.main import main\n"
        "sys.argv=['streamctl','--help']\n"
        "import io, contextlib\n"
        "with contextlib.redirect_stdout(io.StringIO()): main(['--help'])\n"
        "heavy=[m for m in ('pyspark','tabulate','watchfiles','pandas','numpy','rich','pydantic') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    assert p.stdout.strip() == b"", p.stdout


def test_usage_errors_exit_2_with_a_streamctl_message():
    for args in (["consume"], ["consume", "x", "--nope"], ["produce", "l", "--fsync", "maybe"], ["frobnicate"]):
        p = run_cli(*args)
        assert p.returncode == 2, args
        assert p.stderr.startswith(b"streamctl: "), p.stderr
        assert b"Traceback" not in p.stderr


def test_man_pages_and_reference_are_generated_and_fresh():
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen-man"), "--check"], capture_output=True)
    assert p.returncode == 0, p.stderr.decode()
    assert (ROOT / "man" / "streamctl.1").exists()


@pytest.mark.parametrize("name", COMMANDS)
def test_each_command_is_documented(name):
    assert (ROOT / "man" / f"streamctl-{name}.1").exists()
    page = (ROOT / "docs" / "reference" / f"{name}.md").read_text()
    assert page.startswith(f"# streamctl {name}\n")
    assert f"]({name}.md)" in (ROOT / "docs" / "reference" / "index.md").read_text()
    guides = [ROOT / "README.md", *sorted((ROOT / "docs" / "guide").glob("*.md"))]
    assert any(f"streamctl {name} " in g.read_text() for g in guides), f"no guide shows streamctl {name}"


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def prose(text: str) -> str:
    """The text outside fenced code blocks."""
    return re.sub(r"^```.*?^```[ \t]*$", "", text, flags=re.M | re.S)


def anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", prose(text), flags=re.M):
        out.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return out


def test_relative_links_in_the_docs_resolve():
    bad = []
    for doc in doc_files():
        text = doc.read_text()
        for target in re.findall(r"\]\(([^)\s]+)\)", prose(text)):
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            path, _, anchor = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            if not dest.exists():
                bad.append(f"{doc.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
                bad.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert not bad, "\n".join(bad)


DIARY = [
    (r"(?i)\bsessions? \d+(?![\dmhsd])", "a work-session number"),
    (r"(?i)\bissues? \d+", "a tracker number"),
    (r"(?<![\w(&])#\d+\b", "a tracker number"),
    (r"(?im)^#+ .*\b(round|run|session) \d", "a dated-round heading"),
    (r"BENCHMARKS\.md|TESTING\.md|docs/readme-", "a file that does not exist"),
]


def test_docs_and_help_do_not_read_like_a_diary():
    # docs/reference holds every command's --help, so this covers the help texts too
    found = []
    for doc in [*doc_files(), *sorted((ROOT / "man").glob("*.1"))]:
        text = doc.read_text()
        for pattern, what in DIARY:
            for m in re.finditer(pattern, text):
                found.append(f"{doc.relative_to(ROOT)}: {what}: {m.group(0)!r}")
    assert not found, "\n".join(found)


def quick_start() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Quick start\n", 1)[1]
    m = re.search(r"^```(?:sh|bash)\n(.*?)^```$", section, flags=re.M | re.S)
    assert m, "README.md: no shell block under ## Quick start"
    return m.group(1)


def test_readme_quick_start_runs_verbatim_in_an_empty_folder(tmp_path):
    """The Quick start, exactly as printed, in a new folder, with the installed streamctl on PATH."""
    streamctl = Path(sys.executable).parent / "streamctl"
    assert streamctl.exists(), f"{streamctl}: the streamctl script is not installed beside this Python"
    (tmp_path / "run").mkdir()
    script = tmp_path / "quick-start.sh"
    script.write_text(quick_start())
    env = {**os.environ, "PATH": f"{streamctl.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    p = subprocess.run(["bash", "-e", str(script)], cwd=tmp_path / "run", env=env,
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=300)
    assert p.returncode == 0, (p.stdout.decode()[-2000:], p.stderr.decode()[-2000:])
    assert b"Traceback" not in p.stderr, p.stderr.decode()
    assert b"1000 record(s): ok" in p.stdout, p.stdout.decode()[-2000:]  # check saw every record


def _with_closed(fd: int, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    """streamctl ARGS run by a shell with descriptor `fd` closed (`N>&-` / `N<&-`)."""
    cmd = " ".join([*map(shlex.quote, [*CLI, *args]), f"{fd}<&-" if fd == 0 else f"{fd}>&-"])
    return subprocess.run(["bash", "-c", cmd], input=stdin, capture_output=True, timeout=120, env=cli_env())


def test_a_closed_standard_descriptor_is_never_a_traceback_nor_a_file(tmp_path):
    """With stdout closed, the first file opened must not become descriptor 1 and receive the
    output; the command still appends and exits with its own code, as `cat >&-` would."""
    log = str(tmp_path / "log")
    p = _with_closed(1, "produce", log, stdin=b"1\n2\n")
    assert p.returncode == 0 and b"Traceback" not in p.stderr, p.stderr
    assert [r["value"] for r in log_records(log)] == [1, 2]
    p = _with_closed(1, "consume", log)
    assert p.returncode == 1 and b"Traceback" not in p.stderr, p.stderr
    assert b"stdout" in p.stderr and b"Bad file descriptor" in p.stderr, p.stderr
    assert subprocess.run([*CLI, "check", log], capture_output=True, env=cli_env()).returncode == 0
    assert [r["value"] for r in log_records(log)] == [1, 2]  # nothing written into a segment
    p = _with_closed(2, "produce", log, stdin=b"3\n")
    assert p.returncode == 0 and p.stdout == b""
    assert _with_closed(2, "produce", log, stdin=b"{bad\n").returncode == 65
    p = _with_closed(0, "consume", log, "--value")
    assert p.returncode == 0 and p.stdout == b"1\n2\n3\n", p.stderr
