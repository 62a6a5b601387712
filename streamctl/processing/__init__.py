"""Event-time processing: the input order, columns of a few fields, the watermark, aggregations, windows and joins."""
