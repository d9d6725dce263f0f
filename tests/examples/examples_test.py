#!/usr/bin/env python3
"""Runs what examples/ ships, against the real daemon, MariaDB and nginx.

    python3 tests/examples/examples_test.py --daemon build/slotted-counterd --source .

- examples/nginx/downloads.conf, unchanged but for its three placeholders, in a real
  nginx: every download of /downloads/<id> is counted exactly once, nothing else is
  counted, and the mirrored POSTs reuse upstream keep-alive connections.
- examples/nginx/access-log.conf and access-log.yaml, in a real nginx: GETs, HEADs,
  Range GETs, 404s and other paths, the log rotated by rename + USR1 while the daemon
  runs and while it is SIGKILLed; the counts equal, per id, the GET 200 lines of
  /downloads/<id> in all the log files, exactly.
- examples/client/slotted_client.py: posts to the real daemon; with exactly_once,
  retries with one Idempotency-Key on 503 (honouring Retry-After) and on a timeout;
  fire-and-forget calls send no key and are retried after a 503 only; never retries a
  400; a keyed retry after an answer lost on the way back is counted once.

Starts its own MariaDB and nginx on 127.0.0.1 (free ports) and stops them by pid.
Prints one line per check and ends with "N passed, M failed".
"""

import argparse
import http.client
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import re
import signal
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ops"))
from ops_test import Daemon, Failure, MariaDB, Runner, free_port, migrate  # noqa: E402
from ops_test import http as http_call  # noqa: E402
from ops_test import stop_process, tail, wait_for, write_config  # noqa: E402

DOWNLOADS = 3000
WARMUP = 200
IDS = (1, 2, 3, 4, 5)


def metric(daemon, series):
    _, body, _ = http_call("GET", daemon.base + "/metrics")
    for line in body.decode().splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise Failure(f"{series} is not in /metrics")


def table_counts(db, database="app"):
    r = db.sql(f"SELECT record_type, record_id, SUM(count) FROM {database}.slotted_counters "
               "GROUP BY record_type, record_id")
    if r.returncode != 0:
        raise Failure(f"SELECT failed: {r.stderr.decode(errors='replace')}")
    out = {}
    for line in r.stdout.decode().splitlines()[1:]:
        t, i, c = line.split("\t")
        out[(int(t), int(i))] = int(c)
    return out


def flush(daemon):
    status, body, _ = http_call("POST", daemon.base + "/v1/flush", timeout=30)
    if status != 200:
        raise Failure(f"POST /v1/flush answered {status}: {body[:200]!r}")


class Nginx:
    def __init__(self, root, source, daemon_port, site="downloads.conf", name="nginx"):
        self.dir = os.path.join(root, name)
        self.log = os.path.join(self.dir, "access.log")
        self.files = os.path.join(self.dir, "files")
        os.makedirs(os.path.join(self.files, "downloads"))
        os.makedirs(os.path.join(self.dir, "tmp"))
        for i in IDS:
            with open(os.path.join(self.files, "downloads", str(i)), "w") as f:
                f.write(f"file {i}\n" * 10)
        self.port = free_port()
        with open(os.path.join(source, "examples", "nginx", site)) as f:
            site = f.read()
        site = (site.replace("@DAEMON@", f"127.0.0.1:{daemon_port}").replace("@LOG@", self.log)
                .replace("@LISTEN@", f"127.0.0.1:{self.port}").replace("@FILES@", self.files))
        with open(os.path.join(self.dir, "downloads.conf"), "w") as f:
            f.write(site)
        d = self.dir
        self.conf = os.path.join(d, "nginx.conf")
        with open(self.conf, "w") as f:
            f.write(f"""worker_processes 1;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 256; }}
http {{
  access_log off;
  client_body_temp_path {d}/tmp/body;
  proxy_temp_path {d}/tmp/proxy;
  fastcgi_temp_path {d}/tmp/fastcgi;
  uwsgi_temp_path {d}/tmp/uwsgi;
  scgi_temp_path {d}/tmp/scgi;
  include {d}/downloads.conf;
}}
""")
        self.proc = None

    def start(self):
        args = ["nginx", "-p", self.dir, "-e", os.path.join(self.dir, "error.log"), "-c", self.conf]
        r = subprocess.run(args + ["-t", "-q"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=10)
        if r.returncode != 0:
            raise Failure(f"nginx -t: {r.stdout.decode(errors='replace')}")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        wait_for("nginx to answer", lambda: http_call("GET", f"http://127.0.0.1:{self.port}/")[0] != 0
                 if self.proc.poll() is None else self._died(), 10)

    def _died(self):
        raise Failure(f"nginx exited: {tail(os.path.join(self.dir, 'error.log'))}")

    def stop(self):
        stop_process(self.proc, "nginx", sig=15)

    def reopen_logs(self):
        with open(os.path.join(self.dir, "nginx.pid")) as f:
            os.kill(int(f.read().strip()), signal.SIGUSR1)


LOG_LINE = re.compile(r'"GET /downloads/([0-9]{1,19})(?:/[^ ?]*)?(?:\?[^ ]*)? HTTP/1\.[01]" 200 ')


def log_downloads(paths):
    """Per id, the GET 200 lines of /downloads/<id> in the log files."""
    out = {}
    for p in paths:
        if not os.path.exists(p):
            continue
        with open(p, errors="replace") as f:
            for line in f:
                m = LOG_LINE.search(line)
                if m:
                    out[int(m.group(1))] = out.get(int(m.group(1)), 0) + 1
    return out


def check_nginx_access_log(ctx):
    ng = ctx.log_nginx
    sent = {}

    def traffic(rounds):
        conn = http.client.HTTPConnection("127.0.0.1", ng.port, timeout=10)
        for n in range(rounds):
            i = IDS[n % len(IDS)]
            conn.request("GET", f"/downloads/{i}")
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                raise Failure(f"GET /downloads/{i}: {r.status}")
            sent[i] = sent.get(i, 0) + 1
            # Not downloads: a HEAD, a Range request (206), a 404 under /downloads/,
            # another path.
            conn.request("HEAD", f"/downloads/{i}")
            conn.getresponse().read()
            conn.request("GET", f"/downloads/{i}", headers={"Range": "bytes=0-3"})
            r = conn.getresponse()
            r.read()
            if r.status != 206:
                raise Failure(f"Range GET: {r.status}")
            for path in ("/downloads/999999", "/downloads/abc", "/other/1"):
                conn.request("GET", path)
                conn.getresponse().read()
        conn.close()

    def exact(what):
        def same():
            got = {i: c for (t, i), c in table_counts(ctx.db, "logs").items() if t == 123}
            return got == sent
        try:
            wait_for(what, same, 30)
        except Failure:
            got = table_counts(ctx.db, "logs")
            raise Failure(f"{what}: table {got}, sent {sent}, log {log_downloads(logs)}")

    logs = [ng.log + ".2", ng.log + ".1", ng.log]
    traffic(100)
    exact("the first downloads counted")
    # Rotation while the daemon runs.
    os.rename(ng.log, ng.log + ".1")
    traffic(20)  # still written to the renamed file until the reopen
    ng.reopen_logs()
    traffic(50)
    exact("the downloads around a rotation counted")
    # SIGKILL, downloads and a rotation while it is down, then a restart.
    ctx.log_daemon.proc.kill()
    ctx.log_daemon.proc.wait(10)
    traffic(30)
    os.rename(ng.log + ".1", ng.log + ".2")
    os.rename(ng.log, ng.log + ".1")
    traffic(10)
    ng.reopen_logs()
    traffic(40)
    ctx.log_daemon = Daemon(ctx.log_daemon.binary, ctx.log_daemon.config,
                            ctx.log_daemon.logpath)
    ctx.log_daemon.start()
    ctx.log_daemon.wait_listening()
    exact("the downloads across a SIGKILL and a rotation counted")
    in_logs = log_downloads(logs)
    if in_logs != sent:
        raise Failure(f"the logs hold {in_logs} GET 200 downloads, the client made {sent}")
    return f"{sum(sent.values())} downloads counted exactly, equal to the GET 200 lines of 3 log files"


def check_nginx_mirror(ctx):
    conn = http.client.HTTPConnection("127.0.0.1", ctx.nginx.port, timeout=10)
    # Warm-up: nginx opens as many upstream connections as mirror subrequests overlap
    # (a few), then keeps them; connects are counted after it.
    for n in range(WARMUP):
        conn.request("GET", f"/downloads/{IDS[0]}")
        conn.getresponse().read()
    wait_for("the warm-up increments", lambda: metric(
        ctx.daemon, "slotted_counterd_increments_accepted_total") >= WARMUP, 30)
    flush(ctx.daemon)
    warm = table_counts(ctx.db).get((123, IDS[0]), 0)
    if warm != WARMUP:
        raise Failure(f"warm-up: table has {warm} for id {IDS[0]}, want {WARMUP}")
    accepted_before = metric(ctx.daemon, "slotted_counterd_increments_accepted_total")
    connections_before = metric(ctx.daemon, "slotted_counterd_http_connections_accepted_total")
    want = {IDS[0]: WARMUP}
    for n in range(DOWNLOADS):
        i = IDS[n % len(IDS)]
        conn.request("GET", f"/downloads/{i}")
        r = conn.getresponse()
        body = r.read()
        if r.status != 200 or not body.startswith(b"file"):
            raise Failure(f"download {n} of /downloads/{i}: {r.status} {body[:100]!r}")
        want[i] = want.get(i, 0) + 1
    # Not downloads: no id, or not a number. They are served (404) and never counted.
    for path in ("/downloads/", "/downloads/abc", "/other/1"):
        conn.request("GET", path)
        conn.getresponse().read()
    conn.close()
    # Mirror subrequests run in the background of each download: wait for the last, so
    # that every connection they open is counted. Each metrics read of this test opens
    # a connection of its own (counted when accepted): those are taken off.
    reads = [0]

    def all_accepted():
        reads[0] += 1
        return metric(ctx.daemon, "slotted_counterd_increments_accepted_total") >= accepted_before + DOWNLOADS
    wait_for("every mirrored increment to be accepted", all_accepted, 30)
    connects = (metric(ctx.daemon, "slotted_counterd_http_connections_accepted_total")
                - connections_before - reads[0] - 1)
    flush(ctx.daemon)
    got = table_counts(ctx.db)
    counted = {i: got.get((123, i), 0) for i in IDS}
    if counted != want or sum(got.values()) != DOWNLOADS + WARMUP:
        raise Failure(f"table has {got}, want {want} under record_type 123 and nothing else")
    per_1000 = connects * 1000 / DOWNLOADS
    if per_1000 >= 1:
        raise Failure(f"{connects:.0f} TCP connects to the daemon for {DOWNLOADS} mirrored downloads "
                      "(upstream keep-alive is not working)")
    return (f"{WARMUP} + {DOWNLOADS} downloads counted exactly; {per_1000:.2f} daemon connects "
            f"per 1,000 after warm-up ({connects:.0f} in all)")


class Scripted(http.server.BaseHTTPRequestHandler):
    """A stand-in for the daemon that answers from a script, to drive the client's
    retry paths (the real daemon is used for everything else)."""

    script = []   # one entry per request: ("status", code, headers) or ("hang", seconds)
    seen = []     # (Idempotency-Key, body) per request

    def do_POST(self):  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        Scripted.seen.append((self.headers.get("Idempotency-Key"), body))
        step = Scripted.script.pop(0) if Scripted.script else ("status", 202, {})
        if step[0] == "hang":
            time.sleep(step[1])
            self.close_connection = True
            return
        _, code, headers = step
        payload = json.dumps({"accepted": 1} if code == 202 else {"error": "scripted"}).encode()
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def check_client_real_daemon(ctx, client_mod):
    client = client_mod.SlottedClient(ctx.daemon.base)
    before = table_counts(ctx.db).get((123, 900), 0)
    if client.increment("repo_downloads", 900) != 1:
        raise Failure("increment did not report 1 accepted")
    if client.post([{"record_type": 123, "record_id": 900, "delta": 2}] * 3) != 3:
        raise Failure("post of 3 items did not report 3 accepted")
    sleeps = []
    bad = client_mod.SlottedClient(ctx.daemon.base, sleep=sleeps.append)
    try:
        bad.increment("not_declared", 1)
    except client_mod.SlottedError as e:
        if e.status != 400:
            raise Failure(f"undeclared type: status {e.status}, want 400") from None
    else:
        raise Failure("an undeclared type was not refused")
    if sleeps:
        raise Failure(f"a 400 was retried (slept {sleeps})")
    flush(ctx.daemon)
    got = table_counts(ctx.db).get((123, 900), 0) - before
    if got != 7:
        raise Failure(f"table gained {got} for record 900, want 7")
    return "1 + 3x2 counted exactly; 400 not retried"


def check_client_retries(ctx, client_mod):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        Scripted.seen = []
        Scripted.script = [("status", 503, {"Retry-After": "3"}), ("hang", 1.5), ("status", 202, {})]
        sleeps = []
        client = client_mod.SlottedClient(base, timeout=0.5, backoff=0.01, sleep=sleeps.append)
        if client.increment(123, 5, exactly_once=True) != 1:
            raise Failure("the third attempt's 202 was not returned")
        keys = {k for k, _ in Scripted.seen}
        if len(Scripted.seen) != 3 or len(keys) != 1 or None in keys:
            raise Failure(f"want 3 attempts with one Idempotency-Key, saw {Scripted.seen}")
        if not sleeps or sleeps[0] < 3:
            raise Failure(f"Retry-After: 3 not honoured, slept {sleeps}")
        Scripted.seen = []
        Scripted.script = [("status", 503, {})] * 10
        try:
            client_mod.SlottedClient(base, attempts=4, sleep=lambda s: None).increment(123, 5, exactly_once=True)
        except client_mod.SlottedError as e:
            if e.status != 503:
                raise Failure(f"gave up with {e.status}, want the last 503") from None
        else:
            raise Failure("an endless 503 did not raise")
        if len(Scripted.seen) != 4:
            raise Failure(f"attempts=4 made {len(Scripted.seen)} attempts")
        # Fire-and-forget: no key, one attempt: not retried after a 503 (a page must not
        # wait for Retry-After), nor after a timeout (it may have been counted); count()
        # reports it and raises nothing.
        Scripted.seen = []
        Scripted.script = [("status", 503, {"Retry-After": "1"}), ("status", 202, {})]
        plain = client_mod.SlottedClient(base, timeout=0.5, backoff=0.01, sleep=lambda s: None)
        if plain.count(123, 6) is not False or [k for k, _ in Scripted.seen] != [None]:
            raise Failure(f"fire-and-forget after a 503: want 1 attempt without a key, saw {Scripted.seen}")
        # A keyed call gives up at once when Retry-After does not fit before its deadline.
        Scripted.seen = []
        Scripted.script = [("status", 503, {"Retry-After": "9"}), ("status", 202, {})]
        t0 = time.monotonic()
        try:
            client_mod.SlottedClient(base, deadline=5).increment(123, 8, exactly_once=True)
        except client_mod.SlottedError as e:
            if e.status != 503:
                raise Failure(f"gave up with {e.status}, want the 503") from None
        else:
            raise Failure("a keyed call slept past its deadline for Retry-After: 9")
        if len(Scripted.seen) != 1 or time.monotonic() - t0 > 1:
            raise Failure(f"Retry-After: 9 past a 5 s deadline: {len(Scripted.seen)} attempts, "
                          f"{time.monotonic() - t0:.1f}s (want 1, at once)")
        Scripted.seen = []
        Scripted.script = [("hang", 1.5), ("status", 202, {})]
        try:
            plain.increment(123, 7)
        except client_mod.SlottedError:
            pass
        else:
            raise Failure("fire-and-forget retried after a timeout")
        if len(Scripted.seen) != 1 or Scripted.seen[0][0] is not None:
            raise Failure(f"fire-and-forget after a timeout: want 1 attempt without a key, saw {Scripted.seen}")
    finally:
        server.shutdown()
        server.server_close()
    return ("keyed: 503 + Retry-After, a timeout, then 202: 3 attempts, one key; gives up after "
            "`attempts`, and at once when Retry-After passes its deadline; fire-and-forget: "
            "one attempt without a key")


class LosingProxy(http.server.BaseHTTPRequestHandler):
    """Forwards each POST to the real daemon, headers and body unchanged; drops the
    daemon's answer to the first `lose` of them (the connection closes with no answer),
    as a network failure after the daemon applied the request would."""

    daemon_port = 0
    lose = 0
    forwarded = []  # (Idempotency-Key, status, Idempotent-Replayed) per request

    def do_POST(self):  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        conn = http.client.HTTPConnection("127.0.0.1", LosingProxy.daemon_port, timeout=10)
        headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
        conn.request("POST", self.path, body=body, headers=headers)
        r = conn.getresponse()
        payload = r.read()
        conn.close()
        LosingProxy.forwarded.append((self.headers.get("Idempotency-Key"), r.status,
                                      r.getheader("Idempotent-Replayed")))
        if LosingProxy.lose > 0:
            LosingProxy.lose -= 1
            self.close_connection = True
            return
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in ("connection", "keep-alive", "date", "server"):
                self.send_header(k, v)
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def check_client_lost_answer(ctx, client_mod):
    LosingProxy.daemon_port = ctx.daemon.port
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), LosingProxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        before = table_counts(ctx.db).get((123, 901), 0)
        LosingProxy.forwarded = []
        LosingProxy.lose = 2
        client = client_mod.SlottedClient(f"http://127.0.0.1:{server.server_address[1]}",
                                          backoff=0.01, sleep=lambda s: None)
        if client.post([{"record_type": 123, "record_id": 901, "delta": 5}], exactly_once=True) != 1:
            raise Failure("the retry's answer did not report 1 accepted")
        seen = LosingProxy.forwarded
        keys = {k for k, _, _ in seen}
        if len(seen) != 3 or len(keys) != 1 or [s for _, s, _ in seen] != [202] * 3:
            raise Failure(f"want 3 attempts with one key, each answered 202; saw {seen}")
        if [r for _, _, r in seen] != [None, "true", "true"]:
            raise Failure(f"want the retries marked Idempotent-Replayed, saw {seen}")
    finally:
        server.shutdown()
        server.server_close()
    flush(ctx.daemon)
    got = table_counts(ctx.db).get((123, 901), 0) - before
    if got != 5:
        raise Failure(f"table gained {got} for record 901, want 5 (applied once)")
    return "two answers lost on the way back: 3 attempts with one key, counted once"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--source", required=True)
    args = ap.parse_args()
    source = os.path.abspath(args.source)
    sys.path.insert(0, os.path.join(source, "examples", "client"))
    import slotted_client  # noqa: E402

    class Ctx:
        pass

    ctx = Ctx()
    ctx.tmp = tempfile.mkdtemp(prefix="slotted-examples-")
    os.chmod(ctx.tmp, 0o755)  # nginx's workers (nobody, when run as root) read the files
    ctx.db = ctx.daemon = ctx.nginx = ctx.log_nginx = ctx.log_daemon = None
    runner = Runner()
    try:
        missing = [t for t in ("nginx", "mariadbd", "mariadb-install-db", "mariadb") if not shutil.which(t)]
        if missing:
            raise Failure("not installed: " + ", ".join(missing))
        ctx.db = MariaDB(ctx.tmp)
        ctx.db.install()
        ctx.db.start()
        ctx.db.wait_up()
        ctx.db.sql("CREATE DATABASE app")
        cfg = os.path.join(ctx.tmp, "daemon.yaml")
        write_config(cfg, ctx.db, "examples",
                     "counters: [{name: repo_downloads, record_type: 123}]\n")
        # Only declared counters: the nginx example names its counter.
        with open(cfg) as f:
            text = f.read().replace("accept_undeclared_types: true", "accept_undeclared_types: false")
        with open(cfg, "w") as f:
            f.write(text)
        migrate(os.path.abspath(args.daemon), cfg)
        ctx.daemon = Daemon(os.path.abspath(args.daemon), cfg, os.path.join(ctx.tmp, "daemon.log"))
        ctx.daemon.start()
        ctx.daemon.wait_listening()
        ctx.nginx = Nginx(ctx.tmp, source, ctx.daemon.port)
        ctx.nginx.start()
        # The access log way: its own nginx, daemon and database.
        ctx.db.sql("CREATE DATABASE logs")
        ctx.log_nginx = Nginx(ctx.tmp, source, 0, site="access-log.conf", name="nginx-log")
        with open(os.path.join(source, "examples", "nginx", "access-log.yaml")) as f:
            example = f.read().replace("/var/log/nginx/access.log", ctx.log_nginx.log)
        log_cfg = os.path.join(ctx.tmp, "daemon-log.yaml")
        write_config(log_cfg, ctx.db, "examples-log", example)
        with open(log_cfg) as f:
            text = (f.read().replace("accept_undeclared_types: true", "accept_undeclared_types: false")
                    .replace("database: app", "database: logs").replace("interval: 200ms", "interval: 100ms"))
        with open(log_cfg, "w") as f:
            f.write(text)
        migrate(os.path.abspath(args.daemon), log_cfg)
        ctx.log_daemon = Daemon(os.path.abspath(args.daemon), log_cfg,
                                os.path.join(ctx.tmp, "daemon-log.log"))
        ctx.log_daemon.start()
        ctx.log_daemon.wait_listening()
        ctx.log_nginx.start()
    except Failure as e:
        print(f"FAIL setup: {e}", flush=True)
        runner.failed += 1
    else:
        runner.run("nginx: mirror counts every download once over upstream keep-alive",
                   check_nginx_mirror, ctx)
        runner.run("nginx: the access log counts every GET 200 download once, across rotations "
                   "and a SIGKILL", check_nginx_access_log, ctx)
        runner.run("client: posts to the daemon, 400 not retried", check_client_real_daemon, ctx,
                   slotted_client)
        runner.run("client: retries with one key, honours Retry-After", check_client_retries, ctx,
                   slotted_client)
        runner.run("client: a retry after a lost answer is counted once", check_client_lost_answer,
                   ctx, slotted_client)
    finally:
        for part in (ctx.log_nginx, ctx.log_daemon, ctx.nginx, ctx.daemon, ctx.db):
            if part is not None:
                part.stop()
        shutil.rmtree(ctx.tmp, ignore_errors=True)
    print(f"{runner.passed} passed, {runner.failed} failed", flush=True)
    return 1 if runner.failed else 0


if __name__ == "__main__":
    sys.exit(main())
