#!/usr/bin/env python3
"""Would flushing over several connections pay? The `mariadb` client writes the
flusher's batches (1,000 rows each, keys sorted, one slot per batch, the upsert of
daemon/db/sql.cpp inside the flusher's transaction: START TRANSACTION, a ledger row,
the upsert, COMMIT) over 1, 2 and 4 connections at once, each connection taking a
disjoint range of keys, against one throwaway MariaDB (innodb_flush_log_at_trx_commit=1,
as in bench/run). Rows/s is rows / wall time of all connections together.

Each round writes --rows new keys (inserts) and then the same keys again (updates),
for every connection count in turn, alternated (1 2 4 1 2 4 ...), so that load from the
rest of the machine falls on all of them alike.

usage: bench/flush_conns.py [--rows 400000] [--rounds 2] [--conns 1,2,4]
"""
import argparse, os, random, subprocess, tempfile, time

from throwaway_mariadb import throwaway_mariadb

SCHEMA = """
CREATE DATABASE app; USE app;
CREATE TABLE slotted_counters (record_type INT UNSIGNED NOT NULL, record_id BIGINT UNSIGNED NOT NULL,
  slot SMALLINT UNSIGNED NOT NULL, count BIGINT NOT NULL,
  PRIMARY KEY (record_type, record_id, slot)) ENGINE=InnoDB;
CREATE TABLE slotted_counterd_ledger (instance_id VARCHAR(64) NOT NULL, run_id BIGINT UNSIGNED NOT NULL,
  batch_seq BIGINT UNSIGNED NOT NULL, row_count INT UNSIGNED NOT NULL,
  committed_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (instance_id, run_id, batch_seq), KEY by_age (instance_id, committed_at)) ENGINE=InnoDB;
"""


def batches(record_type, rows, per, rnd, seq):
    """The flusher's batches of keys 1..rows, in key order: a list of SQL texts."""
    out = []
    for start in range(1, rows + 1, per):
        end = min(start + per, rows + 1)
        slot = rnd.randrange(100)
        values = ",".join(f"({record_type},{r},{slot},1)" for r in range(start, end))
        seq[0] += 1
        out.append(
            "START TRANSACTION;\n"
            "INSERT INTO `slotted_counterd_ledger` (`instance_id`, `run_id`, `batch_seq`, `row_count`) "
            f"VALUES ('bench', 1, {seq[0]}, {end - start});\n"
            "INSERT INTO `slotted_counters` (`record_type`, `record_id`, `slot`, `count`) VALUES "
            f"{values} ON DUPLICATE KEY UPDATE `count` = `count` + VALUES(`count`);\n"
            "COMMIT;\n")
    return out


def run(sock, tmp, texts, conns):
    """Splits the batches into `conns` contiguous key ranges; one client each; wall time."""
    files = []
    per = (len(texts) + conns - 1) // conns
    for c in range(conns):
        path = f"{tmp}/part{c}.sql"
        with open(path, "w") as f:
            f.write("USE app;\n" + "".join(texts[c * per:(c + 1) * per]))
        files.append(path)
    t0 = time.monotonic()
    procs = [subprocess.Popen(["mariadb", "--no-defaults", "-S", sock, "-uroot"], stdin=open(p))
             for p in files]
    for p in procs:
        if p.wait(300) != 0:
            raise SystemExit("mariadb client failed")
    return time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=400000)
    ap.add_argument("--per", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--conns", default="1,2,4")
    a = ap.parse_args()
    counts = [int(c) for c in a.conns.split(",")]
    rnd = random.Random(7)
    seq = [0]
    results = {(c, kind): [] for c in counts for kind in ("insert", "update")}
    with throwaway_mariadb("256M") as db, tempfile.TemporaryDirectory() as tmp:
        db.sql(SCHEMA)
        print("innodb_flush_log_at_trx_commit =",
              db.sql("SELECT @@innodb_flush_log_at_trx_commit").strip(), flush=True)
        record_type = 0
        for rnd_no in range(a.rounds):
            for c in counts:
                record_type += 1
                for kind in ("insert", "update"):
                    texts = batches(record_type, a.rows, a.per, rnd, seq)
                    secs = run(db.socket, tmp, texts, c)
                    got = db.sql(f"SELECT COUNT(DISTINCT record_id), SUM(count) FROM app.slotted_counters "
                                 f"WHERE record_type = {record_type}").split()
                    want = [str(a.rows), str(a.rows * (1 if kind == "insert" else 2))]
                    if got != want:
                        raise SystemExit(f"table holds {got}, expected {want}")
                    rate = a.rows / secs
                    results[(c, kind)].append(rate)
                    print(f"round {rnd_no + 1}: {c} connection(s), {kind}: {a.rows} rows in {secs:.2f} s "
                          f"= {rate:,.0f} rows/s", flush=True)
    print()
    print("| connections | kind | rows/s per round | mean | vs 1 connection |")
    print("|---|---|---|---|---|")
    for kind in ("insert", "update"):
        base = sum(results[(counts[0], kind)]) / len(results[(counts[0], kind)])
        for c in counts:
            rs = results[(c, kind)]
            mean = sum(rs) / len(rs)
            print(f"| {c} | {kind} | {', '.join(f'{r:,.0f}' for r in rs)} | {mean:,.0f} | {mean / base:.2f}x |")


if __name__ == "__main__":
    main()
