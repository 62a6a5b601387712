"""Records in and out: produce (with exactly-once dedup), consume, replay, filters, and the exec and SQLite sinks."""
