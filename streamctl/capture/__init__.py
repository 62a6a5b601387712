"""capture: PostgreSQL tables into logs, a consistent snapshot and then every change (change data capture)."""
