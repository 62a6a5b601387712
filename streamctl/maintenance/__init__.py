"""Work over a whole log: check and repair, compaction (with its key index), retention."""
