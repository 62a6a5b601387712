"""The guide's whole chain (docs/guide/feeding-a-log.md): PostgreSQL -> capture -> join --table --follow
--group -> produce -> consume --sqlite, run as written, twice, against a real server."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from conftest import cli_env

CHAIN = """
set -euo pipefail
streamctl() {{ "{py}" -m streamctl "$@"; }}
streamctl capture "{dsn}" cdc/{{table}} --table customers --table orders
streamctl join cdc/public.orders cdc/public.customers --table --on customer_id=id --how left \\
    --follow --group enrich --idle-timeout 2s \\
  | streamctl produce enriched --key-field left.id
streamctl consume enriched --group sqlite --sqlite shop.db --table orders --mode upsert
"""


def run_chain(pg, db: str, cwd: Path) -> None:
    script = CHAIN.format(py=sys.executable, dsn=pg.dsn(db))
    p = subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, env=cli_env(), timeout=120)
    assert p.returncode == 0, p.stderr.decode()


def view(cwd: Path) -> list[tuple]:
    con = sqlite3.connect(cwd / "shop.db")
    try:
        return con.execute("select key, json_extract(value, '$.right.name'), json_extract(value, '$.left.amount') "
                           "from orders order by cast(key as int)").fetchall()
    finally:
        con.close()


def test_postgres_to_sqlite_through_a_live_join(pg, db, tmp_path: Path) -> None:
    pg.sql("CREATE TABLE customers (id int PRIMARY KEY, name text, country text)", db)
    pg.sql("CREATE TABLE orders (id int PRIMARY KEY, customer_id int, amount numeric(10,2))", db)
    pg.sql("INSERT INTO customers VALUES (7, 'Ada', 'JP'), (9, 'Linus', 'FI')", db)
    pg.sql("INSERT INTO orders VALUES (1, 7, 12.50), (2, 9, 99.00)", db)
    run_chain(pg, db, tmp_path)
    assert view(tmp_path) == [("1", "Ada", 12.5), ("2", "Linus", 99.0)]

    # a customer renamed, then a new order and a changed one: only what is new is joined again
    pg.sql("UPDATE customers SET name = 'Ada L.' WHERE id = 7", db)
    pg.sql("INSERT INTO orders VALUES (3, 7, 5.00)", db)
    pg.sql("UPDATE orders SET amount = 100.00 WHERE id = 2", db)
    run_chain(pg, db, tmp_path)
    assert view(tmp_path) == [("1", "Ada", 12.5), ("2", "Linus", 100.0), ("3", "Ada L.", 5.0)]
    enriched = subprocess.run([sys.executable, "-m", "streamctl", "stat", "enriched", "--json"], cwd=tmp_path,
                              capture_output=True, env=cli_env(), check=True).stdout
    import json

    assert sum(p["records"] for p in json.loads(enriched)["partitions"]) == 4  # 2 + 2: nothing joined twice
