#!/usr/bin/env python3
"""bench/keyed_cost: the daemon's CPU per request, with and without Idempotency-Key, for
one or more daemon binaries side by side.

    bench/keyed_cost.py --binary A [--binary B ...] [--rounds 3] [--duration 10]
                        [--perf DIR]

Each round starts every binary in turn (the order reversed every other round: A B, B A,
...) as bench/run's run 9 does (WAL off, http.threads 0, flush.interval 1s, its own
fresh database in one throwaway MariaDB) and runs wrk (2 threads, 64 connections, 127.0.0.1
only) with bench/wrk/keyed.lua twice: `pad` (a header of the same length the daemon
ignores) then `key` (a unique Idempotency-Key per request), each after a 2 s warm-up.
Per wrk run it reads the daemon's utime+stime from /proc and the requests wrk completed:
the daemon's CPU microseconds per request does not depend on what else the machine runs
as much as req/s does. Prints every raw run, then per binary the median of its rounds and
the keyed / unkeyed ratio. With --perf DIR, also records 6 s of `perf record -g` of each
binary's runs into DIR (first round only). Every process is bounded and stopped by pid.
"""
import argparse, os, re, signal, statistics, subprocess, sys, tempfile, time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
from throwaway_mariadb import throwaway_mariadb  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--binary", action="append", required=True)
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--duration", type=int, default=10)
ap.add_argument("--perf", default="")
args = ap.parse_args()
work = tempfile.mkdtemp(prefix="slotted-keyed-cost-")
clk_tck = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid):
    # Fields after the command name (which may hold spaces): utime is the 14th field.
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def wrk(url, duration, mode, prefix):
    out = subprocess.run(["timeout", str(duration + 30), "wrk", "-t2", "-c64", f"-d{duration}s", "--timeout",
                          "5s", "-s", f"{here}/wrk/keyed.lua", url, "--", "100000", mode, prefix],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(r"WRKRESULT requests=(\d+) duration_us=(\d+)", out)
    if not m or "err_status=0" not in out:
        raise RuntimeError(f"wrk: {out}")
    return int(m.group(1)), int(m.group(2)) / 1e6


def run_binary(db, tag, binary, rnd, results):
    database = f"d_{tag}_{rnd}"
    db.sql(f"CREATE DATABASE {database}")
    cfg = f"{work}/{tag}-{rnd}.yaml"
    with open(cfg, "w") as f:
        f.write("\n".join([f"instance_id: cost-{tag}-{rnd}", "listen: {address: 127.0.0.1, port: 0}",
                           "http: {threads: 0}",
                           f"mysql: {{socket: {db.socket}, user: root, database: {database}, "
                           "table: slotted_counters}", "accept_undeclared_types: true",
                           "flush: {interval: 1s, max_rows_per_statement: 1000}", "shutdown_timeout: 30s"]) + "\n")
    logname = f"{work}/{tag}-{rnd}.log"
    with open(logname, "w") as log:
        subprocess.run([binary, "--config", cfg, "--migrate"], stdout=log, stderr=log, check=True, timeout=60)
        daemon = subprocess.Popen([binary, "--config", cfg], stdout=log, stderr=log)
    try:
        port, deadline = None, time.time() + 30
        while port is None and time.time() < deadline:
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", open(logname).read())
            if m:
                port = int(m.group(1))
            else:
                time.sleep(0.05)
        if port is None:
            raise RuntimeError(f"{tag}: the daemon did not start; see {logname}")
        url = f"http://127.0.0.1:{port}/v1/increments"
        for mode in ["pad", "key"]:
            wrk(url, 2, mode, f"w{rnd}")
            perf = None
            if args.perf and rnd == 1:
                os.makedirs(args.perf, exist_ok=True)
                perf = subprocess.Popen(["timeout", "60", "perf", "record", "-F", "1999", "-g", "-o",
                                         f"{args.perf}/{tag}-{mode}.data", "-p", str(daemon.pid), "--", "sleep",
                                         str(min(6, args.duration - 2))],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            t0 = cpu_ticks(daemon.pid)
            n, secs = wrk(url, args.duration, mode, f"{mode}{rnd}")
            t1 = cpu_ticks(daemon.pid)
            if perf:
                perf.wait(60)
            cpu = (t1 - t0) / clk_tck
            results.append((tag, rnd, mode, n / secs, cpu / secs * 100, cpu * 1e6 / n))
            print(f"{tag} round {rnd} {mode}: {n / secs:,.0f} req/s, daemon {cpu / secs * 100:.0f}% of a core, "
                  f"{cpu * 1e6 / n:.2f} us CPU/request", flush=True)
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(40)
        except subprocess.TimeoutExpired:
            daemon.kill()


results = []
tags = [f"{chr(ord('A') + i)}" for i in range(len(args.binary))]
for t, b in zip(tags, args.binary):
    print(f"{t} = {b}")
with throwaway_mariadb("256M") as db:
    for rnd in range(1, args.rounds + 1):
        order = list(zip(tags, args.binary))
        if rnd % 2 == 0:
            order.reverse()
        for tag, binary in order:
            run_binary(db, tag, binary, rnd, results)
print("\nmedian over rounds: req/s, daemon % of a core, us daemon CPU per request; keyed / unkeyed")
for tag in tags:
    med = {}
    for mode in ["pad", "key"]:
        rows = [r for r in results if r[0] == tag and r[2] == mode]
        med[mode] = [statistics.median(r[i] for r in rows) for i in (3, 4, 5)]
    per_round = [k[5] / p[5] for k, p in zip([r for r in results if r[0] == tag and r[2] == "key"],
                                             [r for r in results if r[0] == tag and r[2] == "pad"])]
    print(f"{tag}: unkeyed {med['pad'][0]:,.0f} req/s {med['pad'][1]:.0f}% {med['pad'][2]:.2f} us; "
          f"keyed {med['key'][0]:,.0f} req/s {med['key'][1]:.0f}% {med['key'][2]:.2f} us; "
          f"CPU/request keyed/unkeyed {med['key'][2] / med['pad'][2]:.2f}x "
          f"(rounds {', '.join(f'{x:.2f}' for x in per_round)}); "
          f"req/s keyed/unkeyed {med['key'][0] / med['pad'][0]:.2f}x")
if len(tags) > 1:
    for tag in tags[1:]:
        for mode in ["pad", "key"]:
            a = statistics.median(r[5] for r in results if r[0] == "A" and r[2] == mode)
            b = statistics.median(r[5] for r in results if r[0] == tag and r[2] == mode)
            print(f"{tag} / A, {mode}: CPU per request {b / a:.2f}x")
print(f"scratch: {work}")
