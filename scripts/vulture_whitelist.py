"""Names vulture (scripts/test's dead-code check) cannot see used. Each is used, by something
vulture does not follow; anything else it reports is dead code to delete, not to list here."""

# typer calls the app's root callback and passes its options by keyword (commands/main.py)
_root  # noqa
version  # noqa
# the `*exc` of a context manager's __exit__: Python passes it, nothing reads it
exc  # noqa
# ExitCode.OK: the exit code of success, named for the table of codes (SPEC section 3)
OK  # noqa
# msgspec decodes a checkpoint's "format" into this field (processing/checkpoint.py)
format  # noqa
# counters a run keeps for its tests to check which lane or path it took
lane_batches  # noqa
line_batches  # noqa
repairable  # noqa
open_windows  # noqa
# a database driver's connection setting, assigned for the driver to read (streamctl/capture)
autocommit  # noqa
# a server-side cursor's fetch size, set for the driver to read (streamctl/capture)
itersize  # noqa
# the epoch-ms shortcut as a function (timeparse.is_epoch_ms): tests/props/test_epoch_rule.py holds it
# to event_time_ms, and the per-record loops (windows/events.py, joins/keys.py) write it inline
is_epoch_ms  # noqa
# aggregation classes: each registers itself under its --agg names (processing/aggregations/base.register)
Avg  # noqa
Min  # noqa
Max  # noqa
Percentile  # noqa
Distinct  # noqa
Last  # noqa
Stddev  # noqa
ApproxDistinct  # noqa
ApproxQuantile  # noqa
