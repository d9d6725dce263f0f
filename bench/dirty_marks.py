#!/usr/bin/env python3
"""Flush-path cost of rollup dirty marks: time POST /v1/flush for N fresh distinct keys of
a counter without rollup (A) and of one with rollup (B, which also writes dirty marks in
the same transaction), alternated A B A B in one run against one throwaway MariaDB.

usage: bench/dirty_marks.py --daemon build/release/slotted-counterd [--keys 200000] [--rounds 3]
"""
import argparse, json, shutil, signal, socket, subprocess, tempfile, time, urllib.request

from throwaway_mariadb import throwaway_mariadb


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def post(port, path, body=b"", ctype="application/json"):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method="POST",
                                 headers={"Content-Type": ctype})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def start_daemon(binary, cfg, port):
    """Migrates, starts the daemon on config file `cfg` (listening on `port`), waits for
    /healthz and lets its first flush cycle pass; returns the process."""
    subprocess.run([binary, "--config", cfg, "--migrate"], check=True, capture_output=True)
    d = subprocess.Popen([binary, "--config", cfg], stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            break
        except Exception:
            time.sleep(0.05)
    post(port, "/v1/flush")
    return d


def fill(port, rtype, first, keys):
    """Increments keys first .. first + keys - 1 of `rtype` once each (NDJSON, 20,000 a request)."""
    for start in range(first, first + keys, 20000):
        body = "".join(f'{{"record_type":{rtype},"record_id":{i}}}\n'
                       for i in range(start, min(start + 20000, first + keys)))
        post(port, "/v1/increments", body.encode(), "application/x-ndjson")


def stop_daemons(procs):
    for p in reversed(procs):
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--keys", type=int, default=200000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    with throwaway_mariadb("512M") as db:
        db.sql("CREATE DATABASE app; CREATE TABLE app.repositories (id BIGINT UNSIGNED PRIMARY KEY, download_count BIGINT)")
        run(a, db.socket)


def run(a, sock):
    tmp = tempfile.mkdtemp(prefix="slotted-dirty-")
    procs = []
    try:
        port = free_port()
        cfg = f"{tmp}/c.yaml"
        with open(cfg, "w") as f:
            f.write(f"listen: {{address: 127.0.0.1, port: {port}}}\n"
                    f"mysql: {{socket: {sock}, user: root, database: app}}\n"
                    "counters:\n  - {name: plain, record_type: 7}\n"
                    "  - {name: downloads, record_type: 123, rollup: {table: repositories, id_column: id, count_column: download_count}}\n"
                    "flush: {interval: 1h, max_pending_keys: 10000000}\nrollup: {interval: 24h}\n"
                    "http: {max_body_bytes: 67108864}\n")
        procs.append(start_daemon(a.daemon, cfg, port))
        results = {7: [], 123: []}
        base = 1
        for _ in range(a.rounds):
            for rtype in (7, 123):
                fill(port, rtype, base, a.keys)
                t0 = time.monotonic()
                rows = post(port, "/v1/flush")["flushed_rows"]
                results[rtype].append(time.monotonic() - t0)
                assert rows == a.keys, rows
                base += a.keys
        plain, marked = min(results[7]), min(results[123])
        print(f"keys per flush: {a.keys}, rounds: {a.rounds} (A B alternated; best of each)")
        print(f"A without rollup: {plain:.3f} s  ({a.keys / plain:,.0f} rows/s)  all: {['%.3f' % x for x in results[7]]}")
        print(f"B with dirty marks: {marked:.3f} s  ({a.keys / marked:,.0f} rows/s)  all: {['%.3f' % x for x in results[123]]}")
        print(f"cost of dirty marks on the flush path: B/A = {marked / plain:.2f}x")
    finally:
        stop_daemons(procs)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
