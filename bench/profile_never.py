#!/usr/bin/env python3
"""bench/profile_never: where a request's extra CPU goes with the WAL on, `fsync: never`.

    bench/profile_never [--binary PATH] [--threads 1] [--wrk-threads 1] [--count]

Runs the daemon (http.threads --threads, flush.interval 1h: no flush shares the cores) WAL
off, then WAL `never`, each under 64 keep-alive connections of single-event POSTs (wrk,
--wrk-threads threads, 12 s, 127.0.0.1 only), and records 8 s of `perf record -g` of the daemon into a
scratch directory; prints req/s and where the profiles are. Read them with
`perf report -i DIR/never.data --children --sort symbol -g none`. Use a RelWithDebInfo
build for symbols. With --count, instead of a profile: the daemon's malloc calls (a
uprobe on libc's malloc, made if missing) per request over the same 8 s, a figure that
the machine's other load does not move as it moves req/s; and its instructions, where
the CPU lets perf count them (not in every VM: then only mallocs are printed).
Every process is bounded and stopped by pid.
"""
import argparse, os, re, subprocess, sys, tempfile, time, signal, shutil
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
from throwaway_mariadb import throwaway_mariadb  # noqa: E402
ap = argparse.ArgumentParser()
ap.add_argument("--binary", default=f"{os.path.dirname(here)}/build/release/slotted-counterd")
ap.add_argument("--threads", type=int, default=1, help="the daemon's http.threads")
ap.add_argument("--wrk-threads", type=int, default=1)
ap.add_argument("--count", action="store_true", help="instructions and mallocs per request")
args = ap.parse_args()
binary = args.binary
work = tempfile.mkdtemp(prefix="slotted-profile-")


def run(db, mode):
    cfg = f"{work}/{mode}.yaml"
    lines = [f"instance_id: p-{mode}", "listen: {address: 127.0.0.1, port: 0}", f"http: {{threads: {args.threads}}}",
             f"mysql: {{socket: {db.socket}, user: root, database: daemon}}",
             "accept_undeclared_types: true", "flush: {interval: 1h}", "shutdown_timeout: 30s"]
    if mode != "off":
        lines.append(f"wal: {{dir: {work}/{mode}-wal, fsync: never}}")
    with open(cfg, "w") as f:
        f.write("\n".join(lines) + "\n")
    log = open(f"{work}/{mode}.log", "w")
    subprocess.run([binary, "--config", cfg, "--migrate"], stdout=log, stderr=log, check=True, timeout=60)
    daemon = subprocess.Popen([binary, "--config", cfg], stdout=log, stderr=log)
    wrk = None
    try:
        port, deadline = None, time.time() + 30
        while port is None and time.time() < deadline:
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", open(f"{work}/{mode}.log").read())
            if m:
                port = int(m.group(1))
            else:
                time.sleep(0.05)
        if port is None:
            raise RuntimeError(f"{mode}: the daemon did not start")
        url = f"http://127.0.0.1:{port}/v1/increments"
        wrk = subprocess.Popen(["timeout", "60", "wrk", f"-t{args.wrk_threads}", "-c64", "-d12s", "-s", f"{here}/wrk/single.lua",
                                url, "--", "100000"], stdout=subprocess.PIPE, text=True)
        time.sleep(2)  # past the ramp-up
        if args.count:
            before = served(port)
            stat = subprocess.run(["perf", "stat", "-x", ",", "-e", "instructions:u,instructions:k,probe_libc:malloc",
                                   "-p", str(daemon.pid), "--", "sleep", "8"],
                                  capture_output=True, text=True, timeout=60).stderr
            requests = served(port) - before
            counts = {l.split(",")[2]: float(l.split(",")[0]) for l in stat.splitlines()
                      if l.count(",") >= 2 and l.split(",")[0].replace(".", "").isdigit()}
            out = wrk.communicate(timeout=60)[0]
            print(mode, "req/s", re.search(r"Requests/sec:\s+([\d.]+)", out).group(1),
                  f"requests {requests}", " ".join(f"{k}/request {v / requests:.2f}" for k, v in counts.items()))
            return
        subprocess.run(["perf", "record", "-F", "2999", "-g", "-o", f"{work}/{mode}.data", "-p",
                        str(daemon.pid), "--", "sleep", "8"], capture_output=True, timeout=60)
        out = wrk.communicate(timeout=60)[0]
        print(mode, "req/s", re.search(r"Requests/sec:\s+([\d.]+)", out).group(1), f"profile {work}/{mode}.data")
    finally:
        if wrk and wrk.poll() is None:
            wrk.kill()
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(40)
        except subprocess.TimeoutExpired:
            daemon.kill()


def served(port):
    """The daemon's answered increments requests so far, from /metrics."""
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines()
               if l.startswith("slotted_counterd_http_requests_total{") and "increments" in l)


if args.count:
    subprocess.run(["perf", "probe", "-q", "-x", "/lib/x86_64-linux-gnu/libc.so.6", "malloc"],
                   capture_output=True, timeout=60)  # fails harmlessly when it exists
with throwaway_mariadb("256M") as db:
    db.sql("CREATE DATABASE daemon")
    for m in ["off", "never"]:
        run(db, m)
