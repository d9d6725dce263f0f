#!/usr/bin/env python3
"""An access log backlog end to end, against GoAccess and mawk, and POSTs while a source
catches up (bench/RESULTS.md, issue 39, Speed).

    python3 bench/log_backlog.py --daemon build/rel/slotted-counterd [--lines 1000000]
        [--wrk-seconds 10] [--no-goaccess]

Writes a combined log of LINES lines (about 134 bytes each, times over the hour that just
ended, 1,000 download ids, 80% countable: GET 200 of a download; the rest HEAD, 206, 404
and other paths; user agents of pip, cargo, browsers, curl and bots), starts a throwaway
MariaDB, and in one run, A B C C B A:
  A the daemon, from its start to every line committed (slotted_counterd_log_lines_total
    reaching LINES, then the table's sum checked), with traffic-class rules: bots by
    user agent into one counter, pip and cargo into another, the other downloads into a
    third (three RE2 rules, two on the user agent);
  B `goaccess FILE --log-format=COMBINED -o report.json`;
  C `mawk '$9 == 200 && $6 == "\\"GET" { c[$7]++ }' FILE`;
B and C run under `nice -n 10`, the priority of the daemon's reader thread, so that on a
machine other work keeps busy the three get the same share of it.
Then wrk single-event POSTs (bench/wrk/single.lua, 2 threads, 16 connections) for
WRK_SECONDS, without and with a source catching up (a feeder appends the same lines to
the log whenever the daemon is less than 64 MiB behind), A B B A, and their ratio.
"""
import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "ops"))
from ops_test import Daemon, MariaDB, migrate, write_config  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()
AGENTS = [
    (0.40, "pip/24.0 CPython/3.12.1"),
    (0.25, "cargo/1.75.0 (1d8b05cdd 2023-11-20)"),
    (0.15, "Mozilla/5.0 (X11; Linux x86_64) Firefox/121.0"),
    (0.10, "curl/8.5.0"),
    (0.10, "Googlebot/2.1 (+http://www.google.com/bot.html)"),
]
RULES = """counters:
  - {name: installs, record_type: 1}
  - {name: bots, record_type: 2}
  - {name: downloads, record_type: 3}
log_sources:
  - path: LOG
    rules:
      - {counter: bots, path: '^/downloads/([0-9]+)/', user_agent: '(?i)bot|crawl|spider'}
      - {counter: installs, path: '^/downloads/([0-9]+)/', user_agent: '^(pip|cargo)/'}
      - {counter: downloads, path: '^/downloads/([0-9]+)/'}
"""


def clf(t):
    g = time.gmtime(t)
    return f"{g.tm_mday:02d}/{MONTHS[g.tm_mon - 1]}/{g.tm_year}:{g.tm_hour:02d}:{g.tm_min:02d}:{g.tm_sec:02d} +0000"


def write_log(path, n):
    """The log; returns how many lines count (GET 200 of a download)."""
    rng = random.Random(39)
    start = int(time.time()) // 3600 * 3600 - 3600
    countable = 0
    cum = []
    acc = 0.0
    for p, ua in AGENTS:
        acc += p
        cum.append((acc, ua))
    with open(path, "w") as f:
        for k in range(n):
            r = rng.random()
            method, status, ident = "GET", 200, rng.randrange(1000)
            p = f"/downloads/{ident}/pkg-{ident % 7}.{ident % 13}.tar.gz"
            if r < 0.05:
                method = "HEAD"
            elif r < 0.10:
                status = 206
            elif r < 0.15:
                status = 404
            elif r < 0.20:
                p = f"/static/app.{ident}.js"
            else:
                countable += 1
            u = rng.random()
            ua = next(a for c, a in cum if u <= c)
            f.write(f'203.0.113.{k % 256} - - [{clf(start + k * 3600 // n)}] "{method} {p} '
                    f'HTTP/1.1" {status} 5120 "-" "{ua}"\n')
    return countable


def metric_sum(base, prefix):
    with urllib.request.urlopen(base + "/metrics", timeout=5) as r:
        body = r.read().decode()
    total = 0.0
    for line in body.splitlines():
        if line.startswith(prefix):
            total += float(line.split()[-1])
    return total


def fresh_database(db):
    db.sql("DROP DATABASE IF EXISTS app")
    db.sql("CREATE DATABASE app")


def run_daemon(binary, db, tmp, log, lines, countable):
    fresh_database(db)
    cfg = os.path.join(tmp, "d.yaml")
    write_config(cfg, db, "backlog", RULES.replace("LOG", log))
    migrate(binary, cfg)
    daemon = Daemon(binary, cfg, os.path.join(tmp, "d.log"))
    t0 = time.monotonic()
    daemon.start()
    try:
        daemon.wait_listening()
        while metric_sum(daemon.base, "slotted_counterd_log_lines_total{") < lines:
            time.sleep(0.02)
        took = time.monotonic() - t0
    finally:
        daemon.stop()
    r = db.sql("SELECT COALESCE(SUM(count), 0) FROM app.slotted_counters")
    total = int(r.stdout.decode().split()[-1])
    if total != countable:
        raise RuntimeError(f"the table counts {total}, not {countable}")
    return took


def run_timed(cmd, cwd):
    t0 = time.monotonic()
    r = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    took = time.monotonic() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({r.returncode}): {r.stderr[-500:]}")
    return took


def wrk_rate(base, seconds):
    w = subprocess.run(["wrk", "-t2", "-c16", f"-d{seconds}s", "--timeout", "5s", "-s",
                        f"{HERE}/wrk/single.lua", base + "/v1/increments", "--", "100000"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=seconds + 60)
    m = re.search(r"Requests/sec:\s+([0-9.]+)", w.stdout.decode())
    if w.returncode != 0 or not m:
        raise RuntimeError(f"wrk failed: {w.stdout[-500:]} {w.stderr[-500:]}")
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", w.stdout.decode())
    if non2xx:
        raise RuntimeError(f"wrk: {non2xx.group(1)} answers were not 2xx")
    return float(m.group(1))


def posts_while_catching_up(binary, db, tmp, source_lines, seconds):
    """wrk POST rates without and with a source catching up, A B B A."""
    fresh_database(db)
    log = os.path.join(tmp, "feed.log")
    open(log, "w").close()
    cfg = os.path.join(tmp, "p.yaml")
    write_config(cfg, db, "posts", RULES.replace("LOG", log))
    migrate(binary, cfg)
    with open(source_lines, "rb") as f:
        chunk = f.read()
    daemon = Daemon(binary, cfg, os.path.join(tmp, "p.log"))
    daemon.start()
    daemon.wait_listening()
    stop = threading.Event()
    fed = [0]

    def feed():
        while not stop.is_set():
            lag = metric_sum(daemon.base, "slotted_counterd_log_lag_bytes{")
            if lag < 64 << 20:
                with open(log, "ab") as f:
                    f.write(chunk)
                fed[0] += len(chunk)
            time.sleep(0.05)

    rates = {}
    try:
        for mode in ("without", "with", "with", "without"):
            feeder = None
            if mode == "with":
                stop.clear()
                feeder = threading.Thread(target=feed, daemon=True)
                feeder.start()
                time.sleep(0.5)  # the reader is at work
            rates.setdefault(mode, []).append(wrk_rate(daemon.base, seconds))
            if feeder:
                stop.set()
                feeder.join()
                # Let the source catch up before the next round without it.
                while metric_sum(daemon.base, "slotted_counterd_log_lag_bytes{") > 0:
                    time.sleep(0.1)
    finally:
        daemon.stop()
    return rates, fed[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--wrk-seconds", type=int, default=10)
    ap.add_argument("--no-goaccess", action="store_true")
    ap.add_argument("--no-posts", action="store_true")
    a = ap.parse_args()
    binary = os.path.abspath(a.daemon)
    tmp = tempfile.mkdtemp(prefix="slotted-backlog-")
    db = None
    try:
        log = os.path.join(tmp, "access.log")
        countable = write_log(log, a.lines)
        size = os.path.getsize(log)
        print(f"log: {a.lines} lines, {size} bytes ({size / 1e6:.0f} MB), {countable} countable "
              f"({100 * countable / a.lines:.0f}%)", flush=True)
        db = MariaDB(tmp)
        db.install()
        db.start()
        db.wait_up()
        results = {"daemon": [], "goaccess": [], "mawk": []}
        mawk = ["nice", "-n", "10", "mawk", '$9 == 200 && $6 == "\\"GET" { c[$7]++ } END { print length(c) }', log]
        goaccess = ["nice", "-n", "10", "goaccess", log, "--log-format=COMBINED", "-o", os.path.join(tmp, "report.json")]
        order = ["daemon", "goaccess", "mawk", "mawk", "goaccess", "daemon"]
        for tool in order:
            if tool == "goaccess" and a.no_goaccess:
                continue
            if tool == "daemon":
                took = run_daemon(binary, db, tmp, log, a.lines, countable)
            elif tool == "goaccess":
                took = run_timed(goaccess, tmp)
            else:
                took = run_timed(mawk, tmp)
            results[tool].append(took)
            print(f"{tool:9s} {took:7.3f} s  ({a.lines / took / 1e6:.2f}M lines/s)", flush=True)
        best = {k: min(v) for k, v in results.items() if v}
        print(f"best: " + ", ".join(f"{k} {v:.3f} s" for k, v in best.items()))
        if "goaccess" in best:
            print(f"daemon / GoAccess (end to end): {best['goaccess'] / best['daemon']:.1f}x")
        print(f"daemon / mawk (end to end): {best['mawk'] / best['daemon']:.2f}x")
        if not a.no_posts:
            rates, fed = posts_while_catching_up(binary, db, tmp, log, a.wrk_seconds)
            print(f"POSTs/s without a source catching up: {rates['without']}; with: "
                  f"{rates['with']} (fed {fed / 1e6:.0f} MB)")
            ratio = sum(rates["with"]) / sum(rates["without"])
            print(f"with / without: {ratio:.2f}x")
    finally:
        if db:
            db.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
