"""The CLI as a whole: help, version, start-up imports, man pages, usage errors."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT, run_cli
from streamctl.commands.main import COMMANDS, build_app


def available_commands() -> list[str]:
    from typer._click import core
    from typer.main import get_command

    root = get_command(build_app())
    return root.list_commands(core.Context(root))


def test_version_and_module_entry():
    p = run_cli("--version", check=True)
    assert p.stdout.startswith(b"streamctl ")
    assert set(available_commands()) <= set(COMMANDS)
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


def test_man_pages_are_generated_and_fresh():
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen-man"), "--check"], capture_output=True)
    assert p.returncode == 0, p.stderr.decode()
    for name in available_commands():
        assert (ROOT / "man" / f"streamctl-{name}.1").exists()
    assert (ROOT / "man" / "streamctl.1").exists()
