#!/usr/bin/env python3
"""Top-N cost against the number of counters (README: HTTP API, Many counters and top-N).

One throwaway MariaDB, two databases, one daemon on each, identical but for the number of
counters of record_type 1: --small (10,000) and --big (1,000,000). Each is made by
--migrate, then loaded directly (LOAD DATA LOCAL INFILE of generated files, see fill(), not
over HTTP): the slot rows, `<table>_totals` with one row per counter, and
`<table>_day_totals` with 30 days of day buckets (the 1M database holds 3.3M bucket rows,
not 30M: the load stays within a minute or two).

Then GET /v1/top/1?limit=10 and GET /v1/top/1?limit=10&granularity=day&from=F&to=T (the
30 days) in turn against both daemons, interleaved (small big big small ...), --requests
each, over one keep-alive connection: p50 and p99 of the answer time per database.

usage: bench/top.py [--binary build/release/slotted-counterd] [--requests 100]
"""
import argparse, os, re, socket, statistics, subprocess, sys, tempfile, time, signal

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from throwaway_mariadb import throwaway_mariadb  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DAY = 86400


def log(msg):
    print(f"[top {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def start_daemon(binary, tmp, db, name, counters, today):
    database = f"bench_top_{name}"
    db.sql(f"CREATE DATABASE {database}")
    cfg = f"{tmp}/{name}.yaml"
    with open(cfg, "w") as f:
        f.write(f"instance_id: bench-{name}\n"
                "listen: {address: 127.0.0.1, port: 0}\n"
                f"mysql: {{socket: {db.socket}, user: root, database: {database}}}\n"
                "counters:\n"
                "  - {name: downloads, record_type: 1, buckets: {day: 400d}, top: true}\n"
                "flush: {interval: 1h}\n")
    logf = f"{tmp}/{name}.log"
    subprocess.run([binary, "--config", cfg, "--migrate"], check=True, timeout=120,
                   stdout=open(logf, "a"), stderr=subprocess.STDOUT)
    started = time.time()
    rows = fill(db, tmp, database, counters, today)
    log(f"{name}: {counters} counters, {rows} day-bucket rows, loaded in {time.time() - started:.0f} s")
    proc = subprocess.Popen([binary, "--config", cfg], stdout=open(logf, "a"), stderr=subprocess.STDOUT)
    for _ in range(300):
        m = re.findall(r"listening on 127\.0\.0\.1:(\d+)", open(logf).read())
        if m:
            return proc, int(m[-1]), int(rows)
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited; see {logf}")
        time.sleep(0.1)
    raise RuntimeError(f"daemon did not listen; see {logf}")


def fill(db, tmp, database, counters, today):
    """Loads the counts straight into the tables (LOAD DATA LOCAL INFILE of files written
    here, in primary-key order): `slotted_counters` one slot row per counter,
    `<table>_totals` its total, `<table>_day_totals` the day buckets. Counts are skewed as
    downloads are: counter n has about 10^7/n; the first 1% of counters have a count on
    each of the 30 days, the others on 3 of them (by a hash of n and the day)."""
    hot = max(1, counters // 100)
    slots, totals, days = f"{tmp}/{database}.slots", f"{tmp}/{database}.totals", f"{tmp}/{database}.days"
    n_days = 0
    names = [time.strftime("%Y-%m-%d", time.gmtime(today - d * DAY)) for d in range(30)]
    with open(slots, "w") as fs, open(totals, "w") as ft, open(days, "w") as fd:
        for n in range(1, counters + 1):
            total = 10000000 // n + n % 7
            fs.write(f"1\t{n}\t0\t{total}\n")
            ft.write(f"1\t{n}\t{total}\n")
            # (n * 7919 + d * 104729) % 10 == 0 is d = -n (mod 10): 3 of the 30 days.
            ds = range(29, -1, -1) if n <= hot else (20 + (-n) % 10, 10 + (-n) % 10, (-n) % 10)
            per_day = max(1, 10000000 // n // 30)
            fd.write("".join(f"1\t{n}\t{names[d]}\t{per_day}\n" for d in ds))
            n_days += len(ds)
    db.sql(f"""USE {database};
SET unique_checks = 0;
LOAD DATA LOCAL INFILE '{slots}' INTO TABLE slotted_counters (record_type, record_id, slot, count);
LOAD DATA LOCAL INFILE '{totals}' INTO TABLE slotted_counters_totals (record_type, record_id, count);
LOAD DATA LOCAL INFILE '{days}' INTO TABLE slotted_counters_day_totals (record_type, record_id, bucket, count);
ANALYZE TABLE slotted_counters_totals, slotted_counters_day_totals;
""", local_infile=True)
    for f in (slots, totals, days):
        os.unlink(f)
    return n_days


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.buf = b""

    def recv(self):
        # A closed connection ends the run (it used to spin here for ever).
        data = self.s.recv(65536)
        if not data:
            raise RuntimeError("the daemon closed the connection")
        return data

    def get(self, path):
        self.s.sendall(f"GET {path} HTTP/1.1\r\nHost: b\r\n\r\n".encode())
        while b"\r\n\r\n" not in self.buf:
            self.buf += self.recv()
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))
        while len(rest) < length:
            rest += self.recv()
        self.buf = rest[length:]
        status = int(head.split(b" ", 2)[1])
        if status != 200:
            raise RuntimeError(f"{path}: {status} {rest[:length]!r}")
        return rest[:length]


def pct(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(len(v) * p))]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", default=os.environ.get("SLOTTED_COUNTERD",
                                                      f"{ROOT}/build/release/slotted-counterd"))
    p.add_argument("--requests", type=int, default=100)
    p.add_argument("--small", type=int, default=10000)
    p.add_argument("--big", type=int, default=1000000)
    args = p.parse_args()
    today = int(time.time()) // DAY * DAY
    tmp = tempfile.mkdtemp(prefix="slotted-bench-top-")
    procs = []
    with throwaway_mariadb("1G") as db:
        try:
            runs = {}
            for name, n in (("small", args.small), ("big", args.big)):
                proc, port, rows = start_daemon(args.binary, tmp, db, name, n, today)
                procs.append(proc)
                runs[name] = {"port": port, "n": n, "rows": rows, "total": [], "days": []}
            # Connected once both are loaded: a connection opened before the 1M load sat
            # idle past the daemon's keep-alive timeout and was closed.
            for r in runs.values():
                r["conn"] = Conn(r["port"])
            targets = {"total": "/v1/top/1?limit=10",
                       "days": f"/v1/top/1?limit=10&granularity=day&from={today - 29 * DAY}&to={today}"}
            answers = {}
            for r in runs.values():  # warm-up, and the answers compared
                for kind, t in targets.items():
                    for _ in range(20):
                        body = r["conn"].get(t)
                    answers.setdefault(kind, []).append(body)
            order = ["small", "big", "big", "small"]
            for i in range(args.requests):
                for name in order if i % 2 == 0 else reversed(order):
                    r = runs[name]
                    for kind, t in targets.items():
                        t0 = time.perf_counter()
                        r["conn"].get(t)
                        r[kind].append((time.perf_counter() - t0) * 1000)
            print(f"top-10, {args.requests * 2} requests each, interleaved; binary {args.binary}")
            print("| counters | day-bucket rows | top-10 of totals p50 / p99 (ms) | top-10 over 30 days p50 / p99 (ms) |")
            print("|---|---|---|---|")
            for name, r in runs.items():
                print(f"| {r['n']:,} | {r['rows']:,} | {pct(r['total'], 0.5):.2f} / {pct(r['total'], 0.99):.2f} "
                      f"| {pct(r['days'], 0.5):.2f} / {pct(r['days'], 0.99):.2f} |")
            s, b = runs["small"], runs["big"]
            print(f"big / small p50: totals {pct(b['total'], .5) / pct(s['total'], .5):.2f}x, "
                  f"30 days {pct(b['days'], .5) / pct(s['days'], .5):.2f}x; p99: totals "
                  f"{pct(b['total'], .99) / pct(s['total'], .99):.2f}x, 30 days "
                  f"{pct(b['days'], .99) / pct(s['days'], .99):.2f}x")
            # How the server reads each form at 1M (a filesort would grow with the counters).
            big_db = "bench_top_big"
            print("EXPLAIN top-10 of totals:", db.sql(
                f"EXPLAIN SELECT record_id, count FROM {big_db}.slotted_counters_totals FORCE INDEX (by_count) "
                "WHERE record_type = 1 AND count > 0 ORDER BY count DESC, record_id LIMIT 10").strip())
            print("EXPLAIN the same with count <> 0:", db.sql(
                f"EXPLAIN SELECT record_id, count FROM {big_db}.slotted_counters_totals FORCE INDEX (by_count) "
                "WHERE record_type = 1 AND count <> 0 ORDER BY count DESC, record_id LIMIT 10").strip())
            for kind, bodies in answers.items():
                print(f"{kind}: small answers {bodies[0][:90]!r}...")
                print(f"{kind}: big answers   {bodies[1][:90]!r}...")
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
                proc.wait(60)


if __name__ == "__main__":
    main()
