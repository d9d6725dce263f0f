#!/usr/bin/env python3
"""The daemon's own instructions per flushed row and per request, binaries side by side.

    python3 bench/callgrind_cost.py [--keys N] [--seconds S] [--wal never|always] BINARY...

Wall-clock figures on a shared 2-core VM move by 10% from run to run; instruction counts
do not. Each binary runs under callgrind (instrumentation off until asked) against one
throwaway MariaDB: N distinct keys are posted (flush.interval 1h, not counted), then
counted are one POST /v1/flush of them (instructions per flushed row, run 8's work), and
S seconds each of bench/sockload.c's single-event POSTs over TCP and over the Unix socket
(instructions per request, run 10's work). User space only: callgrind does not see the
kernel; compare syscalls with `strace -c` if the counts agree and the clock does not.
With --wal, each daemon writes a WAL (a fresh wal.dir, that fsync mode): a request's
instructions then include its log record (runs 3n and 3w's work).
"""
import argparse, json, os, re, subprocess, sys, tempfile, time, urllib.request

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
from throwaway_mariadb import throwaway_mariadb  # noqa: E402


def totals(path):
    for line in open(path):
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {path}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=100000)
    ap.add_argument("--seconds", type=int, default=15)
    ap.add_argument("--wal", choices=("never", "always"), help="write a WAL with this fsync")
    ap.add_argument("binaries", nargs="+")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="slotted-cg-")
    sockload = f"{work}/sockload"
    subprocess.run(["cc", "-O2", "-o", sockload, f"{here}/sockload.c", "-lpthread"], check=True)
    with throwaway_mariadb("512M") as db:
        for i, binary in enumerate(args.binaries):
            dbn, cfg, sock, log = f"cg{i}", f"{work}/{i}.yaml", f"{work}/{i}.sock", f"{work}/{i}.log"
            db.sql(f"CREATE DATABASE {dbn}")
            with open(cfg, "w") as f:
                f.write(f"instance_id: cg-{i}\nlisten: {{address: 127.0.0.1, port: 0, unix_socket: {sock}}}\n"
                        f"http: {{threads: 2}}\nmysql: {{socket: {db.socket}, user: root, database: {dbn}, "
                        "table: slotted_counters}\naccept_undeclared_types: true\n"
                        "flush: {interval: 1h, max_rows_per_statement: 1000}\nshutdown_timeout: 60s\n")
                if args.wal:
                    f.write(f"wal: {{dir: {work}/wal{i}, fsync: {args.wal}}}\n")
            subprocess.run([binary, "--config", cfg, "--migrate"], check=True, capture_output=True)
            out = f"{work}/cg.{i}"
            p = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                                  f"--callgrind-out-file={out}", binary, "--config", cfg],
                                 stdout=open(log, "w"), stderr=subprocess.STDOUT)
            ctl = lambda *a: subprocess.run(["callgrind_control", *a, str(p.pid)], check=True,  # noqa: E731
                                            capture_output=True)
            try:
                port = None
                for _ in range(600):
                    m = re.findall(r"listening on 127\.0\.0\.1:(\d+)", open(log).read())
                    if m:
                        port = m[-1]
                        break
                    time.sleep(0.1)
                if not port:
                    sys.exit(f"{binary} did not listen; see {log}")
                url = f"http://127.0.0.1:{port}"
                subprocess.run(["python3", f"{here}/helper.py", "post", url + "/v1/increments", "--events",
                                str(args.keys), "--batch", "1000", "--dist", "distinct", "--record-type", "7",
                                "--conns", "2"], check=True, capture_output=True, timeout=900)
                ctl("-i", "on")
                ctl("-z")
                req = urllib.request.Request(url + "/v1/flush", method="POST")
                rows = json.loads(urllib.request.urlopen(req, timeout=900).read())["flushed_rows"]
                ctl("--dump=flush")
                res = {"binary": binary, "flush_ir_per_row": round(totals(f"{out}.1") / rows)}
                for n, (tag, target) in enumerate((("tcp", ["--tcp-port", port]), ("unix", ["--unix", sock])), 2):
                    ctl("-z")
                    r = subprocess.run([sockload, "--conns", "16", "--threads", "1", "--seconds",
                                        str(args.seconds), "--keys", "100000", *target],
                                       capture_output=True, text=True, timeout=args.seconds + 60)
                    ctl(f"--dump={tag}")
                    m = dict(kv.split("=") for kv in r.stdout.split("SOCKLOAD ")[1].split())
                    if m["errors"] != "0":
                        sys.exit(f"{binary}: {m['errors']} answers other than 2xx")
                    res[f"{tag}_requests"] = int(m["requests"])
                    res[f"{tag}_ir_per_request"] = round(totals(f"{out}.{n}") / int(m["requests"]))
                print(json.dumps(res), flush=True)
            finally:
                p.terminate()
                p.wait(timeout=300)


if __name__ == "__main__":
    main()
