#!/usr/bin/env python3
"""Catch-up of an hour of access log backlog (bench/RESULTS.md, issue 25).

    python3 bench/log_catchup.py --daemon build/slotted-counterd [--lines-per-second 100]

Writes a combined log holding one hour of downloads (LINES_PER_SECOND lines a second,
1,000 ids, times spread over the hour that just ended, the counter keeping hour buckets),
starts a throwaway MariaDB and the daemon with that log as its log_source, and measures
the time until every line is committed (slotted_counterd_log_lines_total) and the
statements the server ran meanwhile (its Com_* status: INSERT, UPDATE, SELECT, COMMIT).
"""
import argparse
import os
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "ops"))
from ops_test import Daemon, MariaDB, migrate, write_config  # noqa: E402
from ops_test import http as http_call  # noqa: E402

MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()


def clf(t):
    g = time.gmtime(t)
    return f"{g.tm_mday:02d}/{MONTHS[g.tm_mon - 1]}/{g.tm_year}:{g.tm_hour:02d}:{g.tm_min:02d}:{g.tm_sec:02d} +0000"


def status(db):
    out = {}
    r = db.sql("SHOW GLOBAL STATUS WHERE Variable_name IN "
               "('Com_insert','Com_update','Com_select','Com_commit','Questions')")
    for line in r.stdout.decode().splitlines()[1:]:
        k, v = line.split("\t")
        out[k] = int(v)
    return out


def committed(daemon):
    _, body, _ = http_call("GET", daemon.base + "/metrics")
    total = 0.0
    for line in body.decode().splitlines():
        if line.startswith("slotted_counterd_log_lines_total{"):
            total += float(line.split()[-1])
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--lines-per-second", type=int, default=100)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="slotted-catchup-")
    db = daemon = None
    try:
        log = os.path.join(tmp, "access.log")
        rng = random.Random(1)
        start = int(time.time()) - 3600
        n = 3600 * a.lines_per_second
        with open(log, "w") as f:
            for k in range(n):
                t = start + k // a.lines_per_second
                f.write(f'203.0.113.{k % 256} - - [{clf(t)}] "GET /downloads/{rng.randrange(1000)}/p.tgz '
                        f'HTTP/1.1" 200 5120 "-" "pip/24.0"\n')
        db = MariaDB(tmp)
        db.install()
        db.start()
        db.wait_up()
        db.sql("CREATE DATABASE app")
        cfg = os.path.join(tmp, "d.yaml")
        write_config(cfg, db, "catchup",
                     "counters: [{name: dl, record_type: 1, buckets: {hour: 48h}}]\n"
                     f"log_sources: [{{path: {log}, rules: [{{counter: dl, path: '^/downloads/([0-9]+)/'}}]}}]\n")
        with open(cfg) as f:
            text = f.read().replace("interval: 200ms", "interval: 1s")
        with open(cfg, "w") as f:
            f.write(text)
        migrate(os.path.abspath(a.daemon), cfg)
        before = status(db)
        t0 = time.monotonic()
        daemon = Daemon(os.path.abspath(a.daemon), cfg, os.path.join(tmp, "d.log"))
        daemon.start()
        daemon.wait_listening()
        while committed(daemon) < n:
            time.sleep(0.05)
        took = time.monotonic() - t0
        after = status(db)
        diff = {k: after[k] - before.get(k, 0) for k in after}
        r = db.sql("SELECT SUM(count) FROM app.slotted_counters")
        total = int(r.stdout.decode().split()[-1])
        print(f"lines {n} ({os.path.getsize(log)} bytes) committed in {took:.2f} s "
              f"(from the daemon's start, its start included); table total {total}; "
              f"statements: {diff}")
    finally:
        if daemon:
            daemon.stop()
        if db:
            db.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
