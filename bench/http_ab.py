#!/usr/bin/env python3
"""bench/http_ab: two daemon builds and nginx, side by side, at 64 connections.

    bench/http_ab.py --base OLD --binary NEW [--threads 2] [--rounds 5] [--duration 5] [--wal off]

Answers "did this change move the rate or the tail" for the single-event POST of
bench/run's run 5, with enough rounds to see past the noise of a shared two-core machine
(run 5 runs two rounds). It starts a throwaway MariaDB, the two daemons (http.threads
--threads, flush.interval 1s, WAL off as run 5, or on with --wal's wal.fsync) and nginx (--threads workers,
`return 202`), all on 127.0.0.1, then runs wrk (2 threads, 64 connections, 1 s of
warm-up, then --duration s) against each in turn, the order rotated every round
(A B N, B N A, N A B) so that no build always follows the same one. For each run it
records req/s, p50 and p99 (wrk --latency) and how often the server's threads gave up
their core (voluntary context switches) or had it taken (involuntary), from
/proc/PID/task/*/status over the run. Prints a Markdown table of medians and the
ratios to nginx, then every run. Every process is bounded and stopped by pid.
"""
import argparse, os, re, statistics, subprocess, sys, tempfile, time, shutil
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
from throwaway_mariadb import throwaway_mariadb  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--base", required=True, help="the daemon before the change")
ap.add_argument("--binary", required=True, help="the daemon after the change")
ap.add_argument("--threads", type=int, default=2, help="the daemons' http.threads and nginx's workers")
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--duration", type=int, default=5, help="seconds per measured wrk run")
ap.add_argument("--wal", choices=["off", "never", "always"], default="off",
                help="the daemons' WAL: off (run 5), or on in a scratch directory with this wal.fsync")
args = ap.parse_args()
work = tempfile.mkdtemp(prefix="slotted-http-ab-")
procs = []


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def switches(pids):
    """Sums voluntary and involuntary context switches over every thread of pids."""
    vol = invol = 0
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                status = open(f"/proc/{pid}/task/{tid}/status").read()
            except FileNotFoundError:
                continue
            vol += int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M).group(1))
            invol += int(re.search(r"^nonvoluntary_ctxt_switches:\s+(\d+)", status, re.M).group(1))
    return vol, invol


def wrk(url, seconds, latency):
    out = subprocess.run(["timeout", str(seconds + 30), "wrk", "-t2", "-c64", f"-d{seconds}s", "--timeout", "5s",
                          *(["--latency"] if latency else []), "-s", f"{here}/wrk/single.lua", url, "--", "100000"],
                         capture_output=True, text=True, check=True).stdout
    return out


def ms(text):
    value, unit = re.match(r"([\d.]+)(us|ms|s)", text).groups()
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def measure(name, url, pids):
    wrk(url, 1, False)
    v0, i0 = switches(pids)
    t0 = time.time()
    out = wrk(url, args.duration, True)
    elapsed = time.time() - t0
    v1, i1 = switches(pids)
    if re.search(r"Non-2xx|Socket errors", out):
        raise RuntimeError(f"{name}: errors in wrk's output:\n{out}")
    return {"name": name, "rate": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
            "p50": ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1)),
            "p99": ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1)),
            "vol": (v1 - v0) / elapsed, "invol": (i1 - i0) / elapsed}


def start_daemon(name, binary, socket):
    cfg = f"{work}/{name}.yaml"
    with open(cfg, "w") as f:
        f.write(f"instance_id: ab-{name}\nlisten: {{address: 127.0.0.1, port: 0}}\nhttp: {{threads: {args.threads}}}\n"
                f"mysql: {{socket: {socket}, user: root, database: ab, table: slotted_counters}}\n"
                "accept_undeclared_types: true\nflush: {interval: 1s}\nshutdown_timeout: 30s\n")
        if args.wal != "off":
            f.write(f"wal: {{dir: {work}/{name}-wal, fsync: {args.wal}}}\n")
    log = f"{work}/{name}.log"
    with open(log, "w") as out:
        subprocess.run([binary, "--config", cfg, "--migrate"], stdout=out, stderr=out, check=True, timeout=60)
        proc = subprocess.Popen([binary, "--config", cfg], stdout=out, stderr=out)
    procs.append(proc)
    deadline = time.time() + 30
    while time.time() < deadline:
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", open(log).read())
        if m:
            return proc, f"http://127.0.0.1:{m.group(1)}/v1/increments"
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError(f"daemon {name} did not start; see {log}")


def start_nginx():
    ng = f"{work}/nginx"
    os.makedirs(f"{ng}/tmp")
    port = free_port()
    with open(f"{ng}/nginx.conf", "w") as f:
        f.write(f"""worker_processes {args.threads}; daemon off; master_process on; pid {ng}/nginx.pid;
error_log {ng}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off; client_body_temp_path {ng}/tmp/body; proxy_temp_path {ng}/tmp/proxy;
  fastcgi_temp_path {ng}/tmp/fastcgi; uwsgi_temp_path {ng}/tmp/uwsgi; scgi_temp_path {ng}/tmp/scgi;
  keepalive_requests 1000000000; keepalive_timeout 60s;
  server {{ listen 127.0.0.1:{port};
    location / {{ default_type application/json; return 202 '{{"accepted": 1}}'; }} }}
}}
""")
    proc = subprocess.Popen(["nginx", "-p", ng, "-e", f"{ng}/error.log", "-c", f"{ng}/nginx.conf"])
    procs.append(proc)
    url = f"http://127.0.0.1:{port}/v1/increments"
    deadline = time.time() + 30
    while time.time() < deadline:
        r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "2", "-d", "{}", url],
                           capture_output=True, text=True)
        if r.stdout == "202":
            workers = [int(p) for p in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                                      text=True).stdout.split()]
            return proc, url, workers
        time.sleep(0.1)
    raise RuntimeError("nginx did not start")


def median(runs, name, key):
    return statistics.median(r[key] for r in runs if r["name"] == name)


try:
    with throwaway_mariadb("256M") as db:
        db.sql("CREATE DATABASE ab")
        base, base_url = start_daemon("base", args.base, db.socket)
        new, new_url = start_daemon("new", args.binary, db.socket)
        _, nginx_url, nginx_workers = start_nginx()
        targets = [("base", base_url, [base.pid]), ("new", new_url, [new.pid]), ("nginx", nginx_url, nginx_workers)]
        runs = []
        for rnd in range(args.rounds):
            for name, url, pids in targets[rnd % 3:] + targets[:rnd % 3]:
                runs.append(measure(name, url, pids))
                r = runs[-1]
                print(f"round {rnd + 1} {name}: {r['rate']:.0f} req/s, p50 {r['p50']:.2f} ms, p99 {r['p99']:.2f} ms, "
                      f"switches/s voluntary {r['vol']:.0f}, involuntary {r['invol']:.0f}", file=sys.stderr, flush=True)
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(60)
        procs.clear()
finally:
    for p in procs:
        p.kill()
    shutil.rmtree(work, ignore_errors=True)

print(f"`bench/http_ab.py --base {args.base} --binary {args.binary} --threads {args.threads} "
      f"--rounds {args.rounds} --duration {args.duration} --wal {args.wal}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
      f"{os.cpu_count()} cores, Linux {os.uname().release}\n")
print("| server | req/s (median) | p50 ms | p99 ms | rate / nginx | p99 / nginx | server switches/s, voluntary | involuntary |")
print("|---|---|---|---|---|---|---|---|")
for name in ("base", "new", "nginx"):
    print(f"| {name} | {median(runs, name, 'rate'):,.0f} | {median(runs, name, 'p50'):.2f} | {median(runs, name, 'p99'):.2f} | "
          f"{median(runs, name, 'rate') / median(runs, 'nginx', 'rate'):.2f}x | "
          f"{median(runs, name, 'p99') / median(runs, 'nginx', 'p99'):.2f}x | "
          f"{median(runs, name, 'vol'):,.0f} | {median(runs, name, 'invol'):,.0f} |")
print("\nEvery run (req/s / p99 ms):\n")
for name in ("base", "new", "nginx"):
    print(f"- {name}: " + ", ".join(f"{r['rate']:,.0f} / {r['p99']:.2f}" for r in runs if r["name"] == name))
