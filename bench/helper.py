#!/usr/bin/env python3
"""Helpers for bench/run (standard library only).

  freeport                      print a free TCP port on 127.0.0.1
  metric NAME [FILE]            sum of every sample of metric NAME in a Prometheus text file
  post URL --events N ...       POST N increments as NDJSON batches, print a JSON summary
  sql --rows N --per K --table T  print multi-row INSERT ... ON DUPLICATE KEY UPDATE statements
  report RESULTS                print the Markdown results table from bench/run's key=value file
"""
import argparse
import http.client
import json
import random
import socket
import sys
import threading
import time
import urllib.parse


def cmd_freeport(_args):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1])
    s.close()


def cmd_metric(args):
    text = open(args.file).read() if args.file else sys.stdin.read()
    total, found = 0.0, False
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name == args.name:
            total += float(line.rsplit(" ", 1)[1])
            found = True
    if not found:
        sys.exit(f"metric {args.name} not found")
    print(repr(total) if total != int(total) else int(total))


def keys_for(dist, events, seed):
    """Yields record_ids: hot:K (uniform over K ids), uniform:K (uniform over K ids),
    distinct (1..events, each once, shuffled order within a batch is irrelevant)."""
    rnd = random.Random(seed)
    kind, _, k = dist.partition(":")
    if kind == "distinct":
        return list(range(1, events + 1))
    k = int(k)
    return [rnd.randint(1, k) for _ in range(events)]


def cmd_post(args):
    url = urllib.parse.urlsplit(args.url)
    ids = keys_for(args.dist, args.events, args.seed)
    bodies = []
    for i in range(0, len(ids), args.batch):
        chunk = ids[i:i + args.batch]
        body = "".join(f'{{"record_type": {args.record_type}, "record_id": {r}}}\n' for r in chunk)
        bodies.append((body.encode(), len(chunk)))
    lock = threading.Lock()
    state = {"next": 0, "accepted": 0, "bad": [], "requests": 0}

    def worker():
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=args.timeout)
        try:
            while True:
                with lock:
                    i = state["next"]
                    if i >= len(bodies) or state["bad"]:
                        return
                    state["next"] = i + 1
                body, n = bodies[i]
                conn.request("POST", "/v1/increments", body=body,
                             headers={"Content-Type": "application/x-ndjson"})
                resp = conn.getresponse()
                data = resp.read()
                with lock:
                    state["requests"] += 1
                    if resp.status != 202:
                        state["bad"].append(f"{resp.status} {data[:200]!r}")
                    else:
                        state["accepted"] += json.loads(data)["accepted"]
        except Exception as e:  # noqa: BLE001 - reported as a failure below
            with lock:
                state["bad"].append(repr(e))
        finally:
            conn.close()

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(args.conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    secs = time.monotonic() - t0
    print(json.dumps({"events": args.events, "accepted": state["accepted"],
                      "requests": state["requests"], "seconds": round(secs, 3),
                      "errors": state["bad"][:3]}))
    if state["bad"] or state["accepted"] != args.events:
        sys.exit(1)


def cmd_sql(args):
    rnd = random.Random(args.seed)
    out = sys.stdout
    for start in range(1, args.rows + 1, args.per):
        end = min(start + args.per, args.rows + 1)
        values = ",".join(f"({args.record_type},{r},{rnd.randrange(args.slots)},1)"
                          for r in range(start, end))
        out.write(f"INSERT INTO `{args.table}` (record_type, record_id, slot, count) VALUES {values}"
                  " ON DUPLICATE KEY UPDATE count = count + VALUES(count);\n")


# ---------------------------------------------------------------------------- report

def fnum(x, digits=0):
    if x is None:
        return "n/a"
    if digits == 0:
        return f"{x:,.0f}"
    return f"{x:,.{digits}f}"


def ratio_goal(value, base, goal, higher_is_better=True, unit="x"):
    """'12.3x (goal >= 5x): met' or with the gap when missed."""
    if value is None or base in (None, 0):
        return "n/a"
    r = value / base
    if higher_is_better:
        ok = r >= goal
        gap = "" if ok else f", short by {goal / r:.2f}x ({(1 - r / goal) * 100:.0f}% below)"
        return f"{r:.2f}{unit} (goal >= {goal:g}{unit}): {'met' if ok else 'NOT met'}{gap}"
    ok = r <= goal
    gap = "" if ok else f", over by {r / goal:.2f}x"
    return f"{r:.3g}{unit} (goal <= {goal:g}{unit}): {'met' if ok else 'NOT met'}{gap}"


def abs_goal(value, goal, unit, higher_is_better=True, digits=1):
    if value is None:
        return "n/a"
    if higher_is_better:
        ok = value >= goal
        gap = "" if ok else f", reaches {value / goal * 100:.0f}% of it (short by {goal / value:.2f}x)" \
            if value > 0 else ", nothing measured"
        return f"goal >= {goal:g} {unit}: {'met' if ok else 'NOT met'}{gap}"
    ok = value <= goal
    gap = "" if ok else f", {value / goal:.2f}x over"
    return f"goal <= {goal:g} {unit}: {'met' if ok else 'NOT met'}{gap}"


def cmd_report(args):
    r = {}
    for line in open(args.results):
        line = line.rstrip("\n")
        if "=" in line:
            k, v = line.split("=", 1)
            r[k] = v

    def f(key):
        v = r.get(key, "")
        try:
            return float(v)
        except ValueError:
            return None

    s = r.get
    rows = []
    # bench/run --runs LIST: only the rows of the runs that ran.
    group = {"2": "1", "3h": "3", "3c": "3", "4": "3", "6a": "6", "6b": "6", "8a": "7", "8b": "7", "5q": "5", "5w": "5"}
    wanted = set(filter(None, (r.get("runs") or "").split(",")))

    def add(*c):
        if not wanted or group.get(c[0], c[0]) in wanted:
            rows.append(c)

    r1, r2 = f("r1_rate"), f("r2_rate")
    add("1", f"Seed baseline: `UPDATE counters SET count = count + 1 WHERE id = 1` per event, "
        f"{s('slap_clients')} clients (mariadb-slap, {s('r1_queries')} statements)",
        f"{fnum(r1)} events/s", "")
    add("2", f"Seed pattern: slotted `INSERT ... ON DUPLICATE KEY UPDATE`, `RAND()*100`, "
        f"{s('slap_clients')} clients (mariadb-slap, {s('r2_queries')} statements)",
        f"{fnum(r2)} events/s", f"vs 1: {r2 / r1:.2f}x" if r1 and r2 else "")
    r3 = f("r3_rate")
    add("3", f"Daemon, single-event JSON POST, {s('r3_conns')} keep-alive connections, "
        f"http.threads {s('r3_threads')}, WAL off, record_id uniform in 1..{s('single_keys')} "
        f"({s('dur')} s; CPU in % of one core: daemon {s('r3_daemon_cpu')}, wrk {s('r3_wrk_cpu')}, "
        f"whole machine {s('r3_all_cpu')} of {s('cpu_max')})",
        f"{fnum(r3)} events/s, p50 {fnum(f('r3_p50_ms'), 3)} ms, p99 {fnum(f('r3_p99_ms'), 3)} ms",
        "3 / 2 = " + ratio_goal(r3, r2, 5))
    r3n = f("r3n_rate")
    if r3n:
        add("3n", f"Daemon as 3 with the WAL on, `wal.fsync: never` (CPU in % of one core: "
            f"daemon {s('r3n_daemon_cpu')}, wrk {s('r3n_wrk_cpu')})",
            f"{fnum(r3n)} events/s, p50 {fnum(f('r3n_p50_ms'), 3)} ms, p99 {fnum(f('r3n_p99_ms'), 3)} ms",
            f"3n / 3 = {r3n / r3:.2f}x" if r3 else "")
    if s("r3w_rate"):
        r3w = f("r3w_rate")
        add("3w", f"Daemon as 3 with the WAL on, `wal.fsync: always` (CPU in % of one core: "
            f"daemon {s('r3w_daemon_cpu')}, wrk {s('r3w_wrk_cpu')}, whole machine "
            f"{s('r3w_all_cpu')} of {s('cpu_max')}; {s('r3w_fsyncs')} fdatasyncs, "
            f"{s('r3w_per_sync')} requests per sync, {s('r3w_sync_ms')} ms per sync on average)",
            f"{fnum(r3w)} events/s, p50 {fnum(f('r3w_p50_ms'), 3)} ms, "
            f"p99 {fnum(f('r3w_p99_ms'), 3)} ms",
            (f"3w / 3 = {r3w / r3:.2f}x; 3w / 2 = {r3w / r2:.2f}x; " if r3 and r2 and r3w else "")
            + ("3w / 3n = " + ratio_goal(r3w, r3n, 0.7) if r3n else ""))
    else:
        add("3w", "Daemon as 3 with WAL `fsync: always`",
            s("r3w_note", "n/a (WAL not implemented)"), "")
    p99h = f("r3h_p99_ms")
    add("3h", f"Daemon at about half its peak rate: {s('r3_conns')} connections paced by a wrk "
        f"`delay()` of {s('r3h_delay_ms')} ms between requests per connection (closed loop; wrk2 "
        f"is not available), target {fnum(f('r3h_target'))}/s",
        f"{fnum(f('r3h_rate'))} events/s ({fnum(f('r3h_frac'), 2)} of peak), "
        f"p50 {fnum(f('r3h_p50_ms'), 3)} ms, p99 {fnum(p99h, 3)} ms",
        "p99 " + abs_goal(p99h, 2, "ms", higher_is_better=False))
    add("3c", f"Daemon with {s('r3c_conns')} unpaced connections (the other approximation "
        f"of a lighter load)",
        f"{fnum(f('r3c_rate'))} events/s, p50 {fnum(f('r3c_p50_ms'), 3)} ms, "
        f"p99 {fnum(f('r3c_p99_ms'), 3)} ms",
        "p99 " + abs_goal(f("r3c_p99_ms"), 2, "ms", higher_is_better=False))
    r4 = f("r4_rate")
    add("4", f"Daemon, NDJSON batches of {s('batch')} increments per request, {s('r4_conns')} "
        f"connections, record_id uniform in 1..{s('ndjson_keys')} "
        f"(CPU in % of one core: daemon {s('r4_daemon_cpu')}, wrk {s('r4_wrk_cpu')}, "
        f"whole machine {s('r4_all_cpu')} of {s('cpu_max')})",
        f"{fnum(r4)} increments/s ({fnum(f('r4_req_rate'))} requests/s)",
        "4 / 2 = " + ratio_goal(r4, r2, 100) + "; " + abs_goal(r4 / 1e6 if r4 else None, 8, "M/s"))
    ng, d1 = f("r5_nginx_rate"), f("r5_daemon_rate")
    w5 = s('r5_threads')
    add("5", f"HTTP ceiling, A B A B (5q and 5w run after each B), same wrk command as 3: daemon with http.threads {w5} "
        f"(runs: {s('r5_daemon_runs')}; CPU daemon {s('r5d_daemon_cpu')}, wrk {s('r5d_wrk_cpu')}, "
        f"machine {s('r5d_all_cpu')}) vs nginx, {w5} worker(s), `return 202` "
        f"(runs: {s('r5_nginx_runs')}; CPU of nginx's workers {s('r5n_daemon_cpu')}, wrk {s('r5n_wrk_cpu')}, "
        f"machine {s('r5n_all_cpu')}); CPU in % of one core, mean of the two runs",
        f"daemon {fnum(d1)} req/s, p99 {s('r5_daemon_p99s')} ms; nginx {fnum(ng)} req/s, "
        f"p99 {s('r5_nginx_p99s')} ms",
        "daemon / nginx = " + ratio_goal(d1, ng, 0.94) + "; p99 daemon / nginx (mean of the runs) = "
        + ratio_goal(f("r5_daemon_p99"), f("r5_nginx_p99"), 1.5, higher_is_better=False))
    add("5q", "Diagnostic beside 5, interleaved with it (A B C A B C): the same daemon with "
        "flush.interval 1h, so no flush and no MariaDB work shares the cores during its runs "
        f"(runs: {s('r5q_runs')})",
        f"{fnum(f('r5q_rate'))} req/s, p99 {s('r5q_p99s')} ms",
        "5q / nginx = " + ratio_goal(f("r5q_rate"), ng, 0.9) + "; p99 5q / nginx = "
        + ratio_goal(f("r5q_p99"), f("r5_nginx_p99"), 1.5, higher_is_better=False))
    add("5w", "Beside 5, interleaved with it (A B C D A B C D): the daemon of 5 with the WAL on, "
        f"`wal.fsync: never` (runs: {s('r5w_runs')})",
        f"{fnum(f('r5w_rate'))} req/s, p99 {s('r5w_p99s')} ms",
        "5w / nginx = " + ratio_goal(f("r5w_rate"), ng, 0.9) + "; p99 5w / nginx = "
        + ratio_goal(f("r5w_p99"), f("r5_nginx_p99"), 2, higher_is_better=False))
    for tag, label in (("hot", "hot keys"), ("uni", "uniform keys")):
        st, rw = f(f"r6_{tag}_stmts_per_m"), f(f"r6_{tag}_rows_per_m")
        goal = ""
        if tag == "hot":
            spe = f(f"r6_{tag}_stmts_per_event")
            goal = ("statements/event = " + (f"{spe:.3g}" if spe is not None else "n/a") +
                    " " + (abs_goal(spe, 1 / 1000, "(1/1000)", higher_is_better=False)
                           if spe is not None else ""))
        add("6" + ("a" if tag == "hot" else "b"),
            f"DB writes per 1M events, {label} ({s(f'r6_{tag}_desc')}; "
            f"{s(f'r6_{tag}_events')} events, flush.interval 1s, from /metrics)",
            f"{fnum(st, 1)} statements, {fnum(rw)} rows", goal)
    bpk = f("r7_bytes_per_key")
    add("7", f"Resident memory per pending distinct key at {s('r7_keys')} pending keys "
        f"(RSS {fnum(f('r7_rss_before'))} -> {fnum(f('r7_rss_after'))} bytes)",
        f"{fnum(bpk, 1)} bytes/key", abs_goal(bpk, 64, "bytes/key", higher_is_better=False))
    fd, fr = f("r8_daemon_rows_s"), f("r8_raw_rows_s")
    add("8a", f"Flush rows/s, {s('r8_keys')} distinct new keys, batches of "
        f"{s('batch')} rows: daemon (POST /v1/flush; per round: {s('r8_daemon_runs')}) vs "
        f"`mariadb` client running the same multi-row INSERT ... ON DUPLICATE KEY UPDATE "
        f"(autocommit, one connection; per round: {s('r8_raw_runs')}), alternated A B A B",
        f"daemon {fnum(fd)} rows/s, client {fnum(fr)} rows/s",
        "daemon / client = " + ratio_goal(fd, fr, 0.9))
    ft = f("r8_flush_seconds")
    scaled = f("r8_flush_seconds_per_m")
    add("8b", f"Time to flush {s('r8_keys')} distinct keys (POST /v1/flush, "
        f"flushed_rows {s('r8_flushed_rows')}; rounds: {s('r8_flush_runs')}; mean)",
        f"{fnum(ft, 2)} s" + (f" ({fnum(scaled, 2)} s per 1M)" if s("r8_keys") != "1000000" else ""),
        abs_goal(scaled, 10, "s for 1M keys", higher_is_better=False))

    rk, rp = f("r9_key_rate"), f("r9_pad_rate")
    add("9", f"Single-event POSTs with a unique `Idempotency-Key` each vs the same POSTs with "
        f"a header of the same length the daemon ignores, one daemon (WAL off, flush.interval "
        f"1s), A B A B, {s('r3_conns') or 64} connections (keyed runs: {s('r9_key_runs')}; CPU daemon "
        f"{s('r9k_daemon_cpu')}, mariadbd {s('r9k_db_cpu')}, wrk {s('r9k_wrk_cpu')}; without: "
        f"{s('r9_pad_runs')}; CPU daemon {s('r9p_daemon_cpu')}, mariadbd {s('r9p_db_cpu')}, wrk "
        f"{s('r9p_wrk_cpu')}; CPU in % of one core, mean of the two runs; afterwards the keys "
        f"table held {s('r9_keys_table')} rows, one per keyed request)",
        f"keyed {fnum(rk)} req/s, without {fnum(rp)} req/s",
        "keyed / without = " + ratio_goal(rk, rp, 0.8))
    ru, rt = f("r10_unix_rate"), f("r10_tcp_rate")
    add("10", f"Single-event POSTs over the Unix socket vs TCP loopback, one daemon listening on "
        f"both, the same closed-loop client (bench/sockload.c, {s('r3_conns') or 64} connections, "
        f"2 threads), A B A B (Unix runs: {s('r10_unix_runs')}, CPU daemon {s('r10u_daemon_cpu')}; "
        f"TCP runs: {s('r10_tcp_runs')}, CPU daemon {s('r10t_daemon_cpu')}; % of one core)",
        f"Unix {fnum(ru)} req/s, TCP {fnum(rt)} req/s",
        f"Unix / TCP = {ru / rt:.2f}x" if ru and rt else "")

    print("| # | measurement | result | goal |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
    # Quietness: CPU used by processes other than the server under test, wrk and mariadbd.
    noisy = [(t, f(f"{t}_other_cpu")) for t in (s("measured_tags") or "").split()]
    noisy = [(t, v) for t, v in noisy if v is not None and v > 25]
    print()
    if noisy:
        print("WARNING: the machine was not quiet: other processes used " +
              ", ".join(f"{v:.0f}% of a core during {t}" for t, v in noisy) +
              "; those figures understate what the software can do.")
    else:
        print("Other processes used at most 25% of a core during every wrk run (the machine was quiet).")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("freeport")
    m = sub.add_parser("metric")
    m.add_argument("name")
    m.add_argument("file", nargs="?")
    po = sub.add_parser("post")
    po.add_argument("url")
    po.add_argument("--events", type=int, required=True)
    po.add_argument("--batch", type=int, default=1000)
    po.add_argument("--dist", default="distinct", help="distinct | hot:K | uniform:K")
    po.add_argument("--record-type", type=int, default=1)
    po.add_argument("--conns", type=int, default=2)
    po.add_argument("--seed", type=int, default=1)
    po.add_argument("--timeout", type=float, default=60)
    q = sub.add_parser("sql")
    q.add_argument("--rows", type=int, required=True)
    q.add_argument("--per", type=int, default=1000)
    q.add_argument("--table", default="slotted_counters")
    q.add_argument("--record-type", type=int, default=1)
    q.add_argument("--slots", type=int, default=100)
    q.add_argument("--seed", type=int, default=2)
    rp = sub.add_parser("report")
    rp.add_argument("results")
    args = p.parse_args()
    {"freeport": cmd_freeport, "metric": cmd_metric, "post": cmd_post, "sql": cmd_sql,
     "report": cmd_report}[args.cmd](args)


if __name__ == "__main__":
    main()
