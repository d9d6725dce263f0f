#!/usr/bin/env python3
"""--adopt of N owning rows against a plain INSERT ... SELECT of the same rows, and --adopt's
peak RSS at two sizes (issue 22).

For each size (--rows, default 10,000,000, and --small, default 1,000,000): a throwaway
MariaDB, an owning table `repositories (id BIGINT UNSIGNED PRIMARY KEY, download_count
BIGINT)` with ids 1..N and counts (id * 7) % 1000 (one in 1000 zero), then, in one run:

  A  a plain `INSERT INTO copy (record_type, record_id, slot, count) SELECT 123, id, 0,
     download_count FROM repositories WHERE download_count > 0`, one statement, into an
     empty copy of the slotted table (same layout, CREATE TABLE ... LIKE);
  B  `slotted-counterd --config C --adopt downloads` into the empty slotted table, its
     peak RSS read from wait4's rusage (ru_maxrss).

Ratio = A's time / B's time (rows/s of B against A's; goal >= 0.5x). RSS goal: flat.

usage: bench/adopt.py --daemon build/release/slotted-counterd [--rows 10000000] [--small 1000000]
"""
import argparse, os, shutil, subprocess, tempfile, time

from throwaway_mariadb import throwaway_mariadb


def fill(db, rows):
    """ids 1..rows with counts (id * 7) % 1000, through the sequence engine, in 1M steps."""
    db.sql("CREATE DATABASE app; CREATE TABLE app.repositories (id BIGINT UNSIGNED PRIMARY KEY, "
           "download_count BIGINT NOT NULL)")
    step = 1000000
    for first in range(1, rows + 1, step):
        last = min(first + step - 1, rows)
        db.sql(f"USE app; INSERT INTO repositories SELECT seq, (seq * 7) % 1000 FROM seq_{first}_to_{last};")


def measure(a, rows):
    with throwaway_mariadb(a.buffer_pool) as db:
        t0 = time.monotonic()
        fill(db, rows)
        print(f"  filled {rows:,} owning rows in {time.monotonic() - t0:.1f} s", flush=True)
        tmp = tempfile.mkdtemp(prefix="slotted-adopt-")
        try:
            cfg = f"{tmp}/c.yaml"
            with open(cfg, "w") as f:
                f.write(f"mysql: {{socket: {db.socket}, user: root, database: app}}\n"
                        "counters:\n"
                        "  - {name: downloads, record_type: 123, rollup: {table: repositories, "
                        "id_column: id, count_column: download_count}}\n")
            subprocess.run([a.daemon, "--config", cfg, "--migrate"], check=True, capture_output=True)
            db.sql("CREATE TABLE app.copy LIKE app.slotted_counters")
            # Both start from a warm owning table: read it once.
            db.sql("SELECT COUNT(*), SUM(download_count) FROM app.repositories")
            t0 = time.monotonic()
            db.sql("INSERT INTO app.copy (record_type, record_id, slot, count) SELECT 123, id, 0, "
                   "download_count FROM app.repositories WHERE download_count > 0")
            plain = time.monotonic() - t0
            t0 = time.monotonic()
            p = subprocess.Popen([a.daemon, "--config", cfg, "--adopt", "downloads"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            _, status, usage = os.wait4(p.pid, 0)
            adopt = time.monotonic() - t0
            out, err = p.stdout.read(), p.stderr.read()
            if os.waitstatus_to_exitcode(status) != 0:
                raise SystemExit(f"--adopt failed: {out}{err}")
            taken = int(db.sql("SELECT COUNT(*) FROM app.slotted_counters").strip())
            copied = int(db.sql("SELECT COUNT(*) FROM app.copy").strip())
            assert taken == copied, (taken, copied)
            same = db.sql("SELECT COUNT(*) FROM app.slotted_counters s JOIN app.copy c USING "
                          "(record_type, record_id, slot) WHERE s.count = c.count").strip()
            assert int(same) == copied, (same, copied)
            return {"rows": rows, "taken": taken, "plain": plain, "adopt": adopt,
                    "rss_kib": usage.ru_maxrss, "summary": out.strip()}
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--rows", type=int, default=10000000)
    ap.add_argument("--small", type=int, default=1000000)
    ap.add_argument("--buffer-pool", default="1G")
    a = ap.parse_args()
    results = []
    for rows in (a.small, a.rows):
        print(f"{rows:,} owning rows:", flush=True)
        r = measure(a, rows)
        results.append(r)
        print(f"  plain INSERT ... SELECT: {r['plain']:.1f} s ({r['taken'] / r['plain']:,.0f} rows/s)")
        print(f"  --adopt:                 {r['adopt']:.1f} s ({r['taken'] / r['adopt']:,.0f} rows/s), "
              f"peak RSS {r['rss_kib'] / 1024:.1f} MiB")
        print(f"  ratio (rows/s of --adopt / plain): {r['plain'] / r['adopt']:.2f}x")
        print(f"  {r['summary']}", flush=True)
    print("| owning rows | taken (count > 0) | plain INSERT ... SELECT | --adopt | ratio | --adopt peak RSS |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['rows']:,} | {r['taken']:,} | {r['plain']:.1f} s ({r['taken'] / r['plain']:,.0f}/s) "
              f"| {r['adopt']:.1f} s ({r['taken'] / r['adopt']:,.0f}/s) | {r['plain'] / r['adopt']:.2f}x "
              f"| {r['rss_kib'] / 1024:.1f} MiB |")


if __name__ == "__main__":
    main()
