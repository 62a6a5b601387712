"""Hostile input and names: fuzzed parsers, planted symlinks, permissions."""

from __future__ import annotations

import json
import os
import stat

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import run_cli
from streamctl import timeparse
from streamctl.errors import StreamctlError
from streamctl.formats import inputs, template
from streamctl.storage import names

settings.register_profile("torture", deadline=None, max_examples=300)


@settings(deadline=None, max_examples=300)
@given(st.text(max_size=30))
def test_duration_parser_only_raises_usage_errors(text):
    try:
        assert timeparse.parse_duration(text) >= 0
    except StreamctlError:
        pass


@settings(deadline=None, max_examples=300)
@given(st.text(max_size=40))
def test_time_parser_only_raises_usage_errors(text):
    try:
        assert isinstance(timeparse.parse_time(text, now=0), int)
    except StreamctlError:
        pass


@settings(deadline=None, max_examples=300)
@given(st.one_of(st.text(max_size=40), st.integers(), st.floats(allow_nan=True), st.none(), st.booleans()))
def test_event_time_never_raises(value):
    r = timeparse.event_time_ms(value)
    assert r is None or isinstance(r, int)


@settings(deadline=None, max_examples=300)
@given(st.text(max_size=40))
def test_template_parser_only_raises_usage_errors(text):
    try:
        render = template.compile_template(text)
    except StreamctlError:
        return
    line = b'{"offset":1,"partition":0,"ts":5,"key":"k","value":{"a":1},"headers":{"h":"v"}}\n'
    assert isinstance(render(line), bytes)


@settings(deadline=None, max_examples=500)
@given(st.binary(max_size=200))
def test_input_decoders_only_raise_bad_line(raw):
    for dec in (inputs.value_decoder("a.b", None), inputs.envelope_decoder(None, "src"),
                inputs.raw_decoder(":", None)):
        try:
            dec(raw)
        except inputs.BadLine:
            pass


@settings(deadline=None, max_examples=300)
@given(st.text(max_size=300))
def test_group_names(text):
    try:
        names.check_group(text)
    except StreamctlError:
        return
    assert "/" not in text and "\x00" not in text and text not in (".", "..") and len(text) <= 249


def test_hostile_group_names_through_the_cli(logdir):
    run_cli("produce", logdir, input="1\n", check=True)
    for bad in ["..", "../../x", "a/b", "x" * 300, "", "."]:
        p = run_cli("consume", logdir, f"--group={bad}")
        assert p.returncode == 2, bad
    assert os.listdir(os.path.join(logdir, "groups")) == []
    # a leading dash is a valid Kafka name; it stays inside groups/
    assert run_cli("consume", logdir, "--group=-dash", check=True).returncode == 0
    assert os.listdir(os.path.join(logdir, "groups")) == ["-dash.json"] or "-dash.json" in os.listdir(os.path.join(logdir, "groups"))


def test_symlink_planted_as_group_file_leaves_victim_untouched(logdir, tmp_path):
    run_cli("produce", logdir, input="1\n2\n", check=True)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    os.symlink(victim, os.path.join(logdir, "groups", "g.json"))
    p = run_cli("consume", logdir, "--group", "g")
    assert p.returncode == 1 and b"Traceback" not in p.stderr
    assert victim.read_text() == "precious"


def test_symlink_planted_as_segment_leaves_victim_untouched(logdir, tmp_path):
    run_cli("produce", logdir, input="1\n", check=True)
    seg = os.path.join(logdir, "p0", "00000000000000000000.jsonl")
    victim = tmp_path / "victim"
    victim.write_bytes(open(seg, "rb").read())
    before = victim.read_bytes()
    os.unlink(seg)
    os.symlink(victim, seg)
    p = run_cli("produce", logdir, input="2\n")
    assert p.returncode == 1 and b"symlink" in p.stderr and b"Traceback" not in p.stderr
    assert victim.read_bytes() == before


def test_symlink_planted_as_lock_file(logdir, tmp_path):
    run_cli("produce", logdir, input="1\n", check=True)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    os.symlink(victim, os.path.join(logdir, "groups", ".g.lock"))
    p = run_cli("consume", logdir, "--group", "g")
    assert p.returncode == 1 and b"symlink" in p.stderr
    assert victim.read_text() == "precious"


def test_dead_letter_file_symlink_is_refused(logdir, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    dl = tmp_path / "dead.jsonl"
    os.symlink(victim, dl)
    p = run_cli("produce", logdir, "--on-error", f"dead-letter={dl}", input="1\nbad\n")
    assert p.returncode == 2 and b"symlink" in p.stderr and b"Traceback" not in p.stderr  # refused at start
    assert victim.read_text() == "precious"


def test_files_follow_the_umask_and_are_never_world_writable(tmp_path):
    import subprocess
    import sys

    log = str(tmp_path / "log")
    code = ("import os,sys; os.umask(0o022); sys.argv=['streamctl','produce',sys.argv[1]];"
            "from streamctl.commands.main import main; sys.exit(main(sys.argv[1:]))")
    subprocess.run([sys.executable, "-c", code, log], input=b"1\n", check=True, capture_output=True)
    run_cli("consume", log, "--group", "g", check=True)
    for root, dirs, files in os.walk(log):
        for n in files + dirs:
            mode = os.stat(os.path.join(root, n)).st_mode
            assert not mode & stat.S_IWOTH, os.path.join(root, n)
    gmode = os.stat(os.path.join(log, "groups", "g.json")).st_mode
    assert not gmode & (stat.S_IWGRP | stat.S_IWOTH)


def test_nothing_written_outside_the_log(tmp_path):
    log = str(tmp_path / "inside" / "log")
    outside = sorted(os.listdir(tmp_path))
    run_cli("produce", log, "--partitions", "2", input="".join(json.dumps({"i": i}) + "\n" for i in range(50)), check=True)
    run_cli("consume", log, "--group", "g", check=True)
    run_cli("check", log, "--repair", check=True)
    assert sorted(os.listdir(tmp_path)) == sorted({*outside, "inside"})
    assert sorted(os.listdir(tmp_path / "inside")) == ["log"]
