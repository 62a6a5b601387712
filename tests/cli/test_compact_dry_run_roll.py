"""compact --roll --dry-run reports what compact --roll then does (SPEC: `--dry-run` reports without
changing anything): the segment the roll would close and the empty active one it would create, and
no roll of an active segment that is already empty."""

from __future__ import annotations

import json
import os

from conftest import run_cli

COUNTS = ("segments_before", "segments_after", "records_before", "records_after", "bytes_before",
          "bytes_after", "tombstones_removed", "retention_deleted_segments")


def _counts(log: str, *flags: str) -> dict:
    p = run_cli("compact", log, "--roll", "--json", *flags, check=True)
    return {k: json.loads(p.stdout)["total"][k] for k in COUNTS}


def _files(log: str) -> list[tuple[str, int]]:
    pdir = os.path.join(log, "p0")
    return sorted((n, os.path.getsize(os.path.join(pdir, n))) for n in os.listdir(pdir))


def test_dry_run_with_roll_reports_what_the_run_does(tmp_path) -> None:
    log = str(tmp_path / "orders")
    lines = "".join(json.dumps({"key": f"k{i % 3}", "value": {"i": i}}) + "\n" for i in range(40))
    run_cli("produce", log, "--envelope", input=lines, check=True)
    for _ in range(2):  # first: the active segment rolls; second: the new active one is empty
        files = _files(log)
        planned = _counts(log, "--dry-run")
        assert _files(log) == files, "a dry run changes nothing"
        assert planned == _counts(log)
    assert planned["segments_before"] == planned["segments_after"] == 2
