#!/usr/bin/env python3
"""Sizing figures for docs/operations.md, measured on a running daemon.

    python3 bench/sizing.py --daemon build/rel/slotted-counterd [--keys 1000000]

Starts a throwaway MariaDB and one daemon (Release build recommended) and measures, each
as a difference of the daemon's resident memory (/proc/PID/status VmRSS) or of
slotted_counterd_wal_bytes:

- memory per pending counter: N distinct counters posted in NDJSON batches while the
  database is stopped (nothing flushes), with and without hour/day buckets;
- memory per remembered Idempotency-Key: K keyed single-event requests (keys of 32
  characters), flushed, so what stays is the key index;
- memory per idle connection: C keep-alive connections opened and held;
- WAL bytes per single-event request and per NDJSON increment (fsync: never);
- with --only-pending, the memory of each kind of pending entry against what it is
  charged for flush.max_pending_bytes (slotted_counterd_pending_bytes): plain counters,
  counters with hour and day buckets, unique entries with 16- and 128-byte clients,
  keyed requests with 128-character keys, the database stopped (nothing flushes).

Prints a Markdown table. Numbers include the allocator's overhead and are
approximations: RSS moves in pages and the allocator keeps freed memory.
"""

import argparse
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "ops"))
from ops_test import Daemon, MariaDB, migrate, wait_for  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "docs"))
from docs_test import metric_value, request  # noqa: E402


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def settle(pid):
    time.sleep(0.5)
    return rss(pid)


def worst_connection(port, pid, n, body=1_048_576):
    """The worst case of one connection: a POST whose body of http.max_body_bytes (the
    default, 1 MiB) has come all but its last byte, which the daemon holds while it waits
    for the rest (within http.idle_timeout)."""
    base = settle(pid)
    chunk = b"x" * 65536
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /v1/increments HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\n"
                  b"Content-Length: %d\r\n\r\n" % body)
        left = body - 1
        while left:
            k = min(left, len(chunk))
            s.sendall(chunk[:k])
            left -= k
        socks.append(s)
    time.sleep(2)  # what is sent reaches the daemon's buffers (a settle, not a sync)
    after = settle(pid)
    for s in socks:
        s.close()
    return ("connection at the worst case (a 1 MiB body but its last byte)",
            f"{(after - base) / n:,.0f} bytes", f"{n:,} connections")


def config(path, db, extra):
    with open(path, "w") as f:
        f.write(f"""instance_id: sizing
listen: {{address: 127.0.0.1, port: 0}}
http: {{threads: 2, max_connections: 100000}}
mysql: {{socket: {db.sock}, user: root, database: app, connect_timeout: 1s}}
accept_undeclared_types: true
counters:
  - {{name: plain, record_type: 1}}
  - {{name: bucketed, record_type: 2, buckets: {{hour: 48h, day: 400d}}}}
  - {{name: unique, record_type: 3, dedupe: day}}
flush: {{interval: 1s, max_retry_backoff: 1s, max_pending_keys: 1000000000,
        max_pending_bytes: 1099511627776}}
idempotency: {{max_keys: 10000000}}
shutdown_timeout: 2s
{extra}""")


def post_ndjson(port, record_type, ids, batch=10000, client=None):
    """Posts one increment per id; with `client` (a function of the id), each carries it."""
    for i in range(0, len(ids), batch):
        body = "".join(f'{{"record_type": {record_type}, "record_id": {x}'
                       + (f', "client": "{client(x)}"' if client else "") + '}\n'
                       for x in ids[i:i + batch])
        status, _, payload = request(port, "POST", "/v1/increments", body,
                                     {"Content-Type": "application/x-ndjson"}, timeout=60)
        if status != 202:
            raise RuntimeError(f"{status} {payload[:200]!r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--idem", type=int, default=20_000)
    ap.add_argument("--conns", type=int, default=2_000)
    ap.add_argument("--worst-conns", type=int, default=200,
                    help="connections each holding a body of http.max_body_bytes but its last byte")
    ap.add_argument("--only-worst", action="store_true", help="measure the worst-case connection only")
    ap.add_argument("--only-pending", action="store_true",
                    help="measure each kind of pending entry against its charge only")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="slotted-sizing-")
    db = MariaDB(tmp)
    daemon = None
    rows = []
    try:
        db.install()
        db.start()
        db.wait_up()
        db.sql("CREATE DATABASE app")
        conf = os.path.join(tmp, "c.yaml")
        wal = os.path.join(tmp, "wal")
        config(conf, db, f"wal: {{dir: {wal}, fsync: never}}\n")
        migrate(args.daemon, conf)
        daemon = Daemon(args.daemon, conf, os.path.join(tmp, "d.log"))
        daemon.start()
        daemon.wait_listening()
        port, pid = daemon.port, daemon.proc.pid
        wait_for("ready", lambda: request(port, "GET", "/readyz")[0] == 200, 30)
        if args.only_pending:
            daemon.stop()
            daemon = None
            db.stop()
            for wal_mode in ("off", "never"):
                def start_daemon():
                    shutil.rmtree(wal, ignore_errors=True)
                    config(conf, db, f"wal: {{dir: {wal}, fsync: never}}\n" if wal_mode == "never" else "")
                    d = Daemon(args.daemon, conf, os.path.join(tmp, "d.log"))
                    d.start()
                    d.wait_listening()
                    return d, d.port
                rows += [(f"{w} (WAL {wal_mode})", c, o)
                         for w, c, o in pending_entries(start_daemon, args.keys, args.idem)]
            return print_rows(rows) or 0
        rows.append(worst_connection(port, pid, args.worst_conns))
        if args.only_worst:
            return print_rows(rows) or 0

        # Idempotency-Keys: keyed requests flushed; what stays is the index.
        base = settle(pid)
        conn = __import__("http.client").client.HTTPConnection("127.0.0.1", port, timeout=10)
        for i in range(args.idem):
            conn.request("POST", "/v1/increments", body=f'{{"record_type": 1, "record_id": {i}}}',
                         headers={"Content-Type": "application/json",
                                  "Idempotency-Key": secrets.token_hex(16)})
            r = conn.getresponse()
            r.read()
            if r.status != 202:
                raise RuntimeError(f"keyed: {r.status}")
        conn.close()
        request(port, "POST", "/v1/flush", b"", timeout=60)
        keys = metric_value(port, "slotted_counterd_idempotency_keys")
        after = settle(pid)
        rows.append(("remembered Idempotency-Key (32-character keys, index only, flushed)",
                     f"{(after - base) / keys:.0f} bytes", f"{int(keys):,} keys"))

        # Connections: C idle keep-alive connections.
        base = settle(pid)
        socks = []
        for _ in range(args.conns):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            socks.append(s)
        for s in socks:
            s.recv(4096)
        wait_for("connections open", lambda: metric_value(port, "slotted_counterd_http_connections_open")
                 >= args.conns, 30)
        after = settle(pid)
        rows.append(("idle keep-alive connection (after one request)",
                     f"{(after - base) / args.conns:.0f} bytes", f"{args.conns:,} connections"))
        for s in socks:
            s.close()

        # WAL bytes: single-event requests and NDJSON increments, the database stopped so
        # that no segment is released.
        db.stop()
        wait_for("not ready", lambda: request(port, "GET", "/readyz")[0] == 503, 30)
        w0 = metric_value(port, "slotted_counterd_wal_bytes")
        n = 2000
        conn = __import__("http.client").client.HTTPConnection("127.0.0.1", port, timeout=10)
        for i in range(n):
            conn.request("POST", "/v1/increments", body=f'{{"record_type": 1, "record_id": {i}}}',
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
        conn.close()
        w1 = metric_value(port, "slotted_counterd_wal_bytes")
        rows.append(("WAL per single-event request (plain counter)", f"{(w1 - w0) / n:.1f} bytes", f"{n:,} requests"))
        post_ndjson(port, 1, list(range(100000)))
        w2 = metric_value(port, "slotted_counterd_wal_bytes")
        rows.append(("WAL per increment in NDJSON batches of 10,000 (plain counter)",
                     f"{(w2 - w1) / 100000:.1f} bytes", "100,000 increments"))
        post_ndjson(port, 2, list(range(100000)))
        w3 = metric_value(port, "slotted_counterd_wal_bytes")
        rows.append(("WAL per increment in NDJSON batches (counter with buckets: a time per increment)",
                     f"{(w3 - w2) / 100000:.1f} bytes", "100,000 increments"))

        # Pending counters, database down: nothing flushes.
        for record_type, what in ((1, "pending counter (no buckets)"), (2, "pending counter with hour and day buckets")):
            base = settle(pid)
            p0 = metric_value(port, "slotted_counterd_pending_keys")
            post_ndjson(port, record_type, list(range(10_000_000 * record_type, 10_000_000 * record_type + args.keys)))
            after = settle(pid)
            p1 = metric_value(port, "slotted_counterd_pending_keys")
            rows.append((what + " (store, with the WAL on)", f"{(after - base) / args.keys:.0f} bytes",
                         f"{args.keys:,} counters, pending_keys +{p1 - p0:,.0f}"))
    finally:
        if daemon is not None:
            daemon.stop()
        db.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print_rows(rows)
    return 0


def pending_entries(start_daemon, n, keyed):
    """Each kind of pending entry, the database down, each in a fresh daemon (memory an
    earlier kind freed would hide what the next one takes): RSS per entry, and what it is
    charged (slotted_counterd_pending_bytes) per entry."""
    rows = []

    def measure(what, send, count):
        daemon, port = start_daemon()
        pid = daemon.proc.pid
        try:
            send(port, 1)  # the first request's buffers and the arenas exist before the base
            base, b0 = settle(pid), metric_value(port, "slotted_counterd_pending_bytes")
            send(port, count)
            after, b1 = settle(pid), metric_value(port, "slotted_counterd_pending_bytes")
        finally:
            daemon.stop()
        rss_each, charge_each = (after - base) / count, (b1 - b0) / count
        rows.append((what, f"{rss_each:.0f} bytes RSS, charged {charge_each:.0f} "
                     f"({rss_each / charge_each:.2f}x)", f"{count:,} entries"))

    def ids(count):
        return list(range(1_000_000 + count, 1_000_000 + 2 * count))

    measure("pending counter", lambda port, k: post_ndjson(port, 1, ids(k)), n)
    measure("pending counter with hour and day buckets (3 entries)",
            lambda port, k: post_ndjson(port, 2, ids(k)), n)
    for size in (16, 128):
        measure(f"unique entry, {size}-byte client",
                lambda port, k: post_ndjson(port, 3, ids(k), 2000,
                                            lambda x: f"{size}-{x}".ljust(size, "c")), n)

    def keyed_requests(port, count, increments):
        conn = __import__("http.client").client.HTTPConnection("127.0.0.1", port, timeout=10)
        for i in range(count):
            body = ",".join(f'{{"record_type": 1, "record_id": {50_000_000 + i * 100 + k}}}'
                            for k in range(increments))
            conn.request("POST", "/v1/increments", body=f"[{body}]",
                         headers={"Content-Type": "application/json",
                                  "Idempotency-Key": f"{count}-{increments}-{i}-".ljust(128, "k")})
            r = conn.getresponse()
            r.read()
            if r.status != 202:
                raise RuntimeError(f"keyed: {r.status}")
        conn.close()
    for increments in (0, 1, 8):
        measure(f"keyed request pending, 128-character key, {increments} increments "
                "(its index entry included)",
                lambda port, k: keyed_requests(port, k, increments), keyed)
    return rows


def print_rows(rows):
    print("| what | cost | measured over |\n|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")


if __name__ == "__main__":
    sys.exit(main())
