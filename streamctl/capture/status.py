"""What `stat` shows of a captured log: its slot, and how much WAL the slot holds back on the server.

The log's metadata keeps the DSN without its password and the slot's name. stat asks
the server with a short connect timeout; an unreachable server (or no psycopg2) is
reported as such in one field, never as an error: stat stays fast and quiet.
"""

from __future__ import annotations

from typing import Any

from streamctl.storage.log import Log

CONNECT_TIMEOUT = 2  # seconds (libpq's smallest)


def capture_status(log: Log) -> dict[str, Any] | None:
    st = log.meta.extra.get("capture")
    if not isinstance(st, dict) or not isinstance(st.get("slot"), str):
        return None
    out: dict[str, Any] = {"slot": st["slot"], "table": st.get("table"), "dsn": st.get("dsn"),
                           "snapshot": st.get("snapshot"), "server": "unreachable", "slot_exists": None,
                           "active": None, "wal_held_bytes": None, "confirmed_lsn": None}
    try:
        import psycopg2
    except ImportError:
        out["server"] = "unknown (psycopg2 is not installed)"
        return out
    try:
        conn = psycopg2.connect(st.get("dsn") or "", connect_timeout=CONNECT_TIMEOUT,
                                application_name="streamctl stat")
    except Exception:
        return out
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("select pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, active, "
                        "confirmed_flush_lsn::text from pg_replication_slots where slot_name = %s", (st["slot"],))
            row = cur.fetchone()
        out["server"] = "reachable"
        out["slot_exists"] = row is not None
        if row is not None:
            out["wal_held_bytes"], out["active"], out["confirmed_lsn"] = int(row[0] or 0), bool(row[1]), row[2]
    except Exception:
        out["server"] = "reachable (the slot could not be read)"
    finally:
        conn.close()
    return out


def describe(c: dict[str, Any]) -> str:
    """One line for people."""
    head = f"capture: {c.get('table') or '?'} through slot {c['slot']}"
    if c["server"] != "reachable":
        return f"{head} (server {c['server']}: {c.get('dsn')})"
    if not c["slot_exists"]:
        return f"{head}: the slot does not exist (dropped? the next capture run resyncs the table)"
    state = "in use" if c["active"] else "idle"
    return (f"{head}, {state}: holds back {c['wal_held_bytes']} bytes of WAL "
            f"(confirmed up to {c['confirmed_lsn']})")
