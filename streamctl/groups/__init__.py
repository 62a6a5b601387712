"""Consumer groups: committed offsets, members splitting partitions, offset resets, lag (stat)."""
