#!/usr/bin/env python3
"""The daemon's flush over 1, 2 and 4 connections (flush.connections): one daemon per
connection count, each on a database of its own in one throwaway MariaDB
(innodb_flush_log_at_trx_commit = 1, as in bench/run), flush.interval 1h. A measurement
fills one daemon with --keys fresh distinct keys (NDJSON), then times POST /v1/flush
(rows / wall time of that call: forming the batches and committing them all); then the
same keys again (updates of existing rows). Connection counts are alternated (1 2 4,
4 2 1, ...) so that load from the rest of the machine falls on all of them alike.

usage: bench/flush_parallel.py --daemon build/release/slotted-counterd [--keys 200000]
       [--rounds 4] [--conns 1,2,4] [--wait-quiet S] [--baseline OTHER_BINARY]

--baseline adds a daemon of another build (e.g. the commit before flush.connections
existed, started without that key) as connection count 0, measured in turn with the
others: one connection must flush as fast as before.

--wait-quiet S waits up to S seconds, as bench/run does, for the CPUs together to be
under 15% busy for two consecutive 5 s windows, and says whether they were.
"""
import argparse, os, shutil, tempfile, time

from dirty_marks import fill, free_port, post, start_daemon, stop_daemons
from throwaway_mariadb import throwaway_mariadb


def start(a, sock, tmp, conns):
    """conns 0: the --baseline binary, one connection, without the key."""
    port = free_port()
    cfg = f"{tmp}/c{conns}.yaml"
    binary = a.baseline if conns == 0 else a.daemon
    key = "" if conns == 0 else f", connections: {conns}"
    with open(cfg, "w") as f:
        f.write(f"instance_id: bench-{conns}\n"
                f"listen: {{address: 127.0.0.1, port: {port}}}\n"
                f"mysql: {{socket: {sock}, user: root, database: app{conns}, pool_size: {max(conns, 1) + 1}}}\n"
                "accept_undeclared_types: true\n"
                f"flush: {{interval: 1h, max_pending_keys: 10000000{key}}}\n"
                "http: {max_body_bytes: 67108864}\n")
    return start_daemon(binary, cfg, port), port


def timed_flush(port, keys):
    t0 = time.monotonic()
    rows = post(port, "/v1/flush")["flushed_rows"]
    took = time.monotonic() - t0
    assert rows == keys, rows
    return keys / took


def cpustat():
    f = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
    busy = f[0] + f[1] + f[2] + f[5] + f[6] + f[7]
    return busy, sum(f)


def wait_quiet(limit):
    quiet = waited = 0
    while waited < limit and quiet < 2:
        b0, a0 = cpustat()
        time.sleep(5)
        b1, a1 = cpustat()
        waited += 5
        quiet = quiet + 1 if (b1 - b0) * 100 // (a1 - a0 + 1) < 15 else 0
    print(f"quiet after {waited}s" if quiet >= 2 else f"still busy after {waited}s; running anyway")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--keys", type=int, default=200000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--conns", default="1,2,4")
    ap.add_argument("--wait-quiet", type=int, default=0)
    ap.add_argument("--baseline")
    a = ap.parse_args()
    if a.wait_quiet > 0:
        wait_quiet(a.wait_quiet)
    conns = [int(c) for c in a.conns.split(",")]
    if a.baseline:
        conns = [0] + conns
    print(f"load average at start: {os.getloadavg()}")
    with throwaway_mariadb("512M") as db:
        db.sql("".join(f"CREATE DATABASE app{c};" for c in conns))
        tmp = tempfile.mkdtemp(prefix="slotted-par-")
        daemons = {}
        try:
            for c in conns:
                daemons[c] = start(a, db.socket, tmp, c)
            results = {(c, kind): [] for c in conns for kind in ("insert", "update")}
            first = {c: 1 for c in conns}
            for r in range(a.rounds):
                order = conns if r % 2 == 0 else list(reversed(conns))
                for c in order:
                    port = daemons[c][1]
                    for kind in ("insert", "update"):
                        fill(port, 7, first[c], a.keys)
                        rate = timed_flush(port, a.keys)
                        results[(c, kind)].append(rate)
                        print(f"round {r + 1} connections {c} {kind}: {rate:,.0f} rows/s "
                              f"(load {os.getloadavg()[0]:.2f})", flush=True)
                    first[c] += a.keys
            print(f"load average at end: {os.getloadavg()}")
            print("| connections (0: --baseline) | kind | rows/s per round | mean | vs the first |")
            print("|---|---|---|---|---|")
            for kind in ("insert", "update"):
                base = sum(results[(conns[0], kind)]) / a.rounds
                for c in conns:
                    runs = results[(c, kind)]
                    mean = sum(runs) / len(runs)
                    print(f"| {c} | {kind} | {', '.join(f'{x:,.0f}' for x in runs)} | {mean:,.0f} | "
                          f"{mean / base:.2f}x |")
        finally:
            stop_daemons([d for d, _ in daemons.values()])
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
