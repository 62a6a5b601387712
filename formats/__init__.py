"""Codecs between records and bytes: stored lines, values, kcat templates, CSV and tables."""
