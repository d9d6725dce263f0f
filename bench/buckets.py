#!/usr/bin/env python3
"""What counts per bucket cost (README: Counts per bucket). Two daemons in turn on one
throwaway MariaDB, the same but for counters[].buckets: `none` declares record_type 1
without buckets, `buckets` with {hour: 48h, day: 400d}.

Ingest: wrk posts NDJSON batches of 1,000 increments of record_type 1 (bench/wrk/ndjson.lua,
record_id uniform in 1..--keys, no `at`: the receive time) for --duration seconds, with
flush.interval 1h so that no flush competes; requests/s and the daemon's CPU per request.
Then one POST /v1/flush writes what is pending: its time, the rows it wrote to the counters
table and to the bucket tables (a fresh database per run, so every row is an insert), rows
per event (the increments posted) and the time per flushed key (counter).

The modes alternate A B B A (none buckets buckets none ...) so that load from the rest of
the machine falls on both alike; every raw run is printed, then the ratios.

usage: bench/buckets.py [--binary build/release/slotted-counterd] [--rounds 2]
                        [--duration 10] [--keys 100000] [--conns 32] [--wait-quiet 120]
"""
import argparse, os, re, signal, socket, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from throwaway_mariadb import throwaway_mariadb  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def log(msg):
    print(f"[buckets {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def cpu_busy_fraction(seconds=2.0):
    def read():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return v[3] + v[4], sum(v)  # idle + iowait, total
    i0, t0 = read()
    time.sleep(seconds)
    i1, t1 = read()
    return 1.0 - (i1 - i0) / max(1, t1 - t0)


def wait_quiet(limit):
    """Waits up to `limit` s until the CPUs are under 15% busy twice in a row."""
    quiet, waited = 0, 0.0
    while waited < limit:
        busy = cpu_busy_fraction()
        waited += 2
        quiet = quiet + 1 if busy < 0.15 else 0
        if quiet >= 2:
            log(f"machine quiet after {waited:.0f}s")
            return True
    log(f"machine NOT quiet after {limit}s (last sample {busy:.0%} busy)")
    return False


def proc_cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_daemon(binary, tmp, db, name, buckets):
    database = f"bench_{name}_{int(time.time() * 1000) % 10**9}"
    db.sql(f"CREATE DATABASE {database}")
    cfg = f"{tmp}/{name}.yaml"
    with open(cfg, "w") as f:
        f.write(f"instance_id: bench-{name}\n"
                "listen: {address: 127.0.0.1, port: 0}\n"
                "http: {threads: 2}\n"
                f"mysql: {{socket: {db.socket}, user: root, database: {database}}}\n"
                "counters:\n"
                f"  - {{name: events, record_type: 1{', buckets: {hour: 48h, day: 400d}' if buckets else ''}}}\n"
                "flush: {interval: 1h, max_rows_per_statement: 1000, max_pending_keys: 50000000}\n"
                "shutdown_timeout: 60s\n")
    logf = f"{tmp}/{database}.log"  # one per run: the port is read from it
    subprocess.run([binary, "--config", cfg, "--migrate"], check=True, timeout=60,
                   stdout=open(logf, "a"), stderr=subprocess.STDOUT)
    proc = subprocess.Popen([binary, "--config", cfg], stdout=open(logf, "a"), stderr=subprocess.STDOUT)
    port = None
    for _ in range(300):
        m = re.findall(r"listening on 127\.0\.0\.1:(\d+)", open(logf).read())
        if m:
            port = int(m[-1])
            break
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited; see {logf}")
        time.sleep(0.1)
    if port is None:
        raise RuntimeError(f"daemon did not listen; see {logf}")
    return proc, port, database


def http(port, method, path, timeout=600):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: b\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode()


def one_run(args, tmp, db, name, buckets):
    proc, port, database = start_daemon(args.binary, tmp, db, name, buckets)
    try:
        for _ in range(100):  # /healthz: ingest works before the first flush
            try:
                if http(port, "GET", "/healthz", 2)[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        url = f"http://127.0.0.1:{port}/v1/increments"
        cpu0 = proc_cpu_seconds(proc.pid)
        w = subprocess.run(["timeout", str(args.duration + 60), "wrk", "-t2", f"-c{args.conns}",
                            f"-d{args.duration}s", "--timeout", "5s", "-s", f"{HERE}/wrk/ndjson.lua",
                            url, "--", str(args.keys), "1000"],
                           capture_output=True, text=True)
        out = w.stdout
        if "WRKRESULT" not in out:
            raise RuntimeError(f"wrk failed ({w.returncode}): {w.stdout[-500:]} {w.stderr[-500:]}")
        cpu1 = proc_cpu_seconds(proc.pid)
        m = re.search(r"WRKRESULT requests=(\d+) duration_us=(\d+) p50_us=(\d+) p99_us=(\d+).*"
                      r"err_status=(\d+)", out)
        requests, duration_us, p50, p99, err_status = (int(x) for x in m.groups())
        t0 = time.monotonic()
        status, body = http(port, "POST", "/v1/flush")
        flush_s = time.monotonic() - t0
        if status != 200:
            raise RuntimeError(f"flush answered {status}: {body}")
        counter_rows = int(db.sql(f"SELECT COUNT(*) FROM {database}.slotted_counters").strip())
        bucket_rows = 0
        if buckets:
            bucket_rows = sum(int(db.sql(f"SELECT COUNT(*) FROM {database}.slotted_counters_{g}").strip())
                              for g in ("hour", "day"))
        events = requests * 1000
        return {"mode": name, "req_s": requests / (duration_us / 1e6), "p50_ms": p50 / 1000,
                "p99_ms": p99 / 1000, "err_status": err_status,
                "cpu_us_per_req": (cpu1 - cpu0) * 1e6 / max(1, requests), "events": events,
                "flush_s": flush_s, "counter_rows": counter_rows, "bucket_rows": bucket_rows}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
        db.sql(f"DROP DATABASE {database}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", default=os.environ.get("SLOTTED_COUNTERD",
                                                      f"{ROOT}/build/release/slotted-counterd"))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--duration", type=int, default=10)
    p.add_argument("--keys", type=int, default=100000)
    p.add_argument("--conns", type=int, default=32)
    p.add_argument("--wait-quiet", type=int, default=0)
    args = p.parse_args()
    quiet = wait_quiet(args.wait_quiet) if args.wait_quiet > 0 else None
    load_before = os.getloadavg()
    runs = []
    with throwaway_mariadb("512M") as db, tempfile.TemporaryDirectory(prefix="slotted-bench-b-") as tmp:
        for r in range(args.rounds):
            order = [("none", False), ("buckets", True)]
            if r % 2 == 1:
                order.reverse()  # A B B A
            for name, buckets in order:
                log(f"round {r + 1}: {name}")
                res = one_run(args, tmp, db, name, buckets)
                res["round"] = r + 1
                runs.append(res)
                log(str(res))
    load_after = os.getloadavg()

    print(f"Command: `bench/buckets.py {' '.join(sys.argv[1:])}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"{os.cpu_count()} CPUs; machine quiet before: "
          f"{'yes' if quiet else 'no' if quiet is False else 'not checked'}; load average "
          f"{load_before[0]:.1f} before, {load_after[0]:.1f} after.\n")
    print("| round | mode | req/s | CPU us/req | p50 ms | p99 ms | flush s | counter rows | bucket rows "
          "| rows/event | rows/counter | rows/s flushed | us per flushed key |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for x in runs:
        rows = x["counter_rows"] + x["bucket_rows"]
        print(f"| {x['round']} | {x['mode']} | {x['req_s']:.0f} | {x['cpu_us_per_req']:.0f} | {x['p50_ms']:.1f} "
              f"| {x['p99_ms']:.1f} | {x['flush_s']:.2f} | {x['counter_rows']} | {x['bucket_rows']} "
              f"| {rows / max(1, x['events']):.4f} | {rows / max(1, x['counter_rows']):.2f} "
              f"| {rows / x['flush_s']:.0f} "
              f"| {x['flush_s'] * 1e6 / max(1, x['counter_rows']):.1f} |")
    print()
    for r in range(1, args.rounds + 1):
        a = next(x for x in runs if x["round"] == r and x["mode"] == "none")
        b = next(x for x in runs if x["round"] == r and x["mode"] == "buckets")
        print(f"- round {r}: ingest buckets/none {b['req_s'] / a['req_s']:.2f}x (goal >= 0.7x), "
              f"CPU per request {b['cpu_us_per_req'] / a['cpu_us_per_req']:.2f}x, "
              f"flush time per counter key {b['flush_s'] / b['counter_rows'] / (a['flush_s'] / a['counter_rows']):.2f}x")


if __name__ == "__main__":
    main()
