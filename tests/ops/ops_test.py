#!/usr/bin/env python3
"""Operations tests for slotted-counterd: metrics exposition, Grafana dashboard,
systemd unit, sd_notify protocol (docs/operations.md).

    python3 tests/ops/ops_test.py --daemon build/slotted-counterd --source .

Starts its own throwaway MariaDB and Prometheus on 127.0.0.1 (free ports), never
builds anything, and stops everything it started by pid. Prints one line per
check and ends with "N passed, M failed"; exits 1 if any check failed.
Needs: mariadb-install-db, mariadbd, mariadb, prometheus, promtool, systemd-analyze.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request

# The metric names pinned in the README, plus the process metrics read from /proc.
PINNED_METRICS = [
    "slotted_counterd_http_requests_total",
    "slotted_counterd_http_request_duration_seconds",
    "slotted_counterd_increments_accepted_total",
    "slotted_counterd_increments_rejected_total",
    "slotted_counterd_pending_keys",
    "slotted_counterd_pending_oldest_age_seconds",
    "slotted_counterd_flushes_total",
    "slotted_counterd_flush_duration_seconds",
    "slotted_counterd_flush_rows_total",
    "slotted_counterd_flush_statements_total",
    "slotted_counterd_db_errors_total",
    "slotted_counterd_last_flush_success_timestamp_seconds",
    "slotted_counterd_rollups_total",
    "slotted_counterd_rollup_duration_seconds",
    "slotted_counterd_rollup_records_total",
    "slotted_counterd_last_rollup_success_timestamp_seconds",
    "slotted_counterd_wal_bytes",
    "slotted_counterd_wal_fsync_duration_seconds",
    "slotted_counterd_build_info",
    "slotted_counterd_database_info",
    "slotted_counterd_idempotency_requests_total",
    "slotted_counterd_idempotency_replays_total",
    "slotted_counterd_idempotency_duplicates_dropped_total",
    "slotted_counterd_idempotency_conflicts_dropped_total",
    "slotted_counterd_idempotency_keys",
    "slotted_counterd_resets_total",
    "slotted_counterd_buckets_pruned_total",
    "process_resident_memory_bytes",
    "process_cpu_seconds_total",
    "process_open_fds",
    "process_start_time_seconds",
]
HISTOGRAMS = {
    "slotted_counterd_http_request_duration_seconds",
    "slotted_counterd_flush_duration_seconds",
    "slotted_counterd_rollup_duration_seconds",
    "slotted_counterd_wal_fsync_duration_seconds",
}
MAX_EXPOSURE = 2.0

# Loopback only: never let an http_proxy from the environment see these requests.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def log(msg):
    print(f"  .. {msg}", flush=True)


class Failure(Exception):
    pass


def wait_for(what, predicate, timeout, interval=0.1):
    """Polls predicate() until it returns a truthy value; raises Failure on timeout."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while time.monotonic() < deadline:
        try:
            v = predicate()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - the predicate's failures just mean "not yet"
            last_exc = e
        time.sleep(interval)
    raise Failure(f"timed out after {timeout}s waiting for {what}" + (f" (last error: {last_exc})" if last_exc else ""))


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, content_type=None, timeout=5.0):
    """Returns (status, body bytes, headers); 4xx/5xx are answers, not exceptions."""
    headers = {}
    if content_type:
        headers["Content-Type"] = content_type
    data = body.encode() if isinstance(body, str) else body
    if method == "POST" and data is None:
        data = b""
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with OPENER.open(req, timeout=timeout) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        try:
            payload = e.read()
        except Exception:  # noqa: BLE001
            payload = b""
        return e.code, payload, e.headers


def stop_process(proc, name, sig=signal.SIGTERM, timeout=15.0):
    """Signals one process we started, by pid, and reaps it; SIGKILL after timeout."""
    if proc is None or proc.poll() is not None:
        return None if proc is None else proc.returncode
    try:
        os.kill(proc.pid, sig)
    except ProcessLookupError:
        pass
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        log(f"{name} (pid {proc.pid}) ignored signal {sig}; killing")
        os.kill(proc.pid, signal.SIGKILL)
        return proc.wait(timeout=5)


def tail(path, n=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


# --------------------------------------------------------------------------- MariaDB


class MariaDB:
    def __init__(self, root):
        self.dir = os.path.join(root, "mariadb")
        os.makedirs(self.dir)
        self.datadir = os.path.join(self.dir, "data")
        self.sock = os.path.join(self.dir, "sock")
        self.port = free_port()
        self.errlog = os.path.join(self.dir, "err.log")
        self.proc = None

    def install(self):
        r = subprocess.run(
            # A private tmpdir: bootstraps of parallel test runs meet in /tmp otherwise.
            ["mariadb-install-db", "--no-defaults", f"--datadir={self.datadir}",
             f"--tmpdir={self.dir}", "--auth-root-authentication-method=normal",
             "--skip-test-db", "--user=root"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        if r.returncode != 0:
            raise Failure(f"mariadb-install-db failed: {r.stdout.decode(errors='replace')[-2000:]}")

    def start(self):
        self.proc = subprocess.Popen(
            ["mariadbd", "--no-defaults", f"--datadir={self.datadir}", f"--tmpdir={self.dir}",
             f"--socket={self.sock}",
             f"--port={self.port}", "--bind-address=127.0.0.1", "--user=root",
             f"--pid-file={os.path.join(self.dir, 'pid')}", f"--log-error={self.errlog}",
             # Small and quick: this is a throwaway server on a small machine.
             "--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M",
             "--skip-name-resolve", "--performance-schema=OFF"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def sql(self, statement, timeout=10):
        return subprocess.run(["mariadb", "--no-defaults", "-S", self.sock, "-uroot", "-e", statement],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)

    def wait_up(self, timeout=40):
        def up():
            if self.proc.poll() is not None:
                raise Failure(f"mariadbd exited with {self.proc.returncode}:\n{tail(self.errlog)}")
            return self.sql("select 1", timeout=5).returncode == 0
        try:
            wait_for("MariaDB to answer", up, timeout, interval=0.2)
        except Failure as e:
            if "mariadbd exited" in str(e):
                raise
            raise Failure(f"{e}\n{tail(self.errlog)}") from None

    def stop(self, timeout=30):
        return stop_process(self.proc, "mariadbd", timeout=timeout)


# --------------------------------------------------------------------------- daemon


def write_config(path, db, instance_id, extra=""):
    with open(path, "w") as f:
        f.write(f"""# written by tests/ops/ops_test.py
instance_id: {instance_id}
listen: {{address: 127.0.0.1, port: 0}}
http: {{threads: 2}}
mysql: {{socket: {db.sock}, user: root, database: app, connect_timeout: 2s}}
accept_undeclared_types: true
flush: {{interval: 200ms, max_retry_backoff: 1s}}
shutdown_timeout: 10s
{extra}""")


class Daemon:
    LISTEN_RE = re.compile(r"listening on 127\.0\.0\.1:(\d+)")

    def __init__(self, binary, config, logpath, env=None):
        self.binary = binary
        self.config = config
        self.logpath = logpath
        self.env = env
        self.proc = None
        self.port = None
        self.port_seen_at = None
        self.lines = []
        self._lock = threading.Lock()
        self._reader = None

    def start(self):
        env = dict(os.environ)
        for k in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID"):
            env.pop(k, None)
        env.update(self.env or {})
        self.proc = subprocess.Popen([self.binary, "--config", self.config], env=env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        with open(self.logpath, "ab") as out:
            for raw in self.proc.stderr:
                out.write(raw)
                out.flush()
                line = raw.decode(errors="replace").rstrip("\n")
                with self._lock:
                    self.lines.append(line)
                    if self.port is None:
                        m = self.LISTEN_RE.search(line)
                        if m:
                            self.port = int(m.group(1))
                            self.port_seen_at = time.monotonic()

    def wait_listening(self, timeout=20):
        def listening():
            if self.proc.poll() is not None:
                raise Failure(f"daemon exited with {self.proc.returncode}:\n{tail(self.logpath)}")
            return self.port
        return wait_for("the daemon's 'listening on' line", listening, timeout, interval=0.05)

    @property
    def base(self):
        return f"http://127.0.0.1:{self.port}"

    def stop(self, timeout=20):
        rc = stop_process(self.proc, "daemon", timeout=timeout)
        if self._reader:
            self._reader.join(timeout=5)
        return rc


def migrate(binary, config):
    r = subprocess.run([binary, "--config", config, "--migrate"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=30)
    if r.returncode != 0:
        raise Failure(f"--migrate exited {r.returncode}: {r.stdout.decode(errors='replace')[-2000:]}")


# --------------------------------------------------------------------------- load


class Load:
    """Mixed traffic in one background thread, with per-kind answer bookkeeping."""

    # kind -> statuses the README (HTTP API) allows at any time (the database may be down on purpose).
    ALLOWED = {
        "json": {202}, "ndjson": {202}, "malformed": {400}, "content_type": {415},
        "unknown_path": {404}, "healthz": {200}, "readyz": {200, 503},
        "counter": {200, 503}, "flush": {200, 503}, "wrong_method": {405},
        "reset": {200, 503},
    }

    def __init__(self, base):
        self.base = base
        self.stop_event = threading.Event()
        self.thread = None
        self.answers = {}
        self.unexpected = []
        self.exceptions = []
        self.accepted = 0
        self.rounds = 0
        self._n = 0

    def _record(self, kind, status, body):
        self.answers.setdefault(kind, {}).setdefault(status, 0)
        self.answers[kind][status] += 1
        if status not in self.ALLOWED[kind] and len(self.unexpected) < 20:
            self.unexpected.append(f"{kind}: {status} {body[:200]!r}")

    def one_round(self):
        self._n += 1
        n = self._n
        b = self.base
        items = [{"record_type": 7, "record_id": (n * 5 + i) % 50, "delta": 1} for i in range(5)]
        reqs = [
            ("json", "POST", "/v1/increments", json.dumps(items), "application/json"),
            ("ndjson", "POST", "/v1/increments",
             "\n".join(json.dumps({"record_type": 8, "record_id": str(n % 20 + i)}) for i in range(3)) + "\n\n",
             "application/x-ndjson"),
            ("malformed", "POST", "/v1/increments", '{"record_type": 7, "record_id": ', "application/json"),
            ("content_type", "POST", "/v1/increments", "record_type=7", "text/plain"),
            ("unknown_path", "GET", "/v1/nope", None, None),
            ("healthz", "GET", "/healthz", None, None),
        ]
        if n % 3 == 0:
            reqs.append(("counter", "GET", "/v1/counters/1/2", None, None))
            reqs.append(("readyz", "GET", "/readyz", None, None))
        if n % 5 == 0:
            reqs.append(("flush", "POST", "/v1/flush", None, None))
            reqs.append(("wrong_method", "GET", "/v1/increments", None, None))
            # A counter of its own: the others' totals stay what the load sent.
            reqs.append(("reset", "DELETE", "/v1/counters/9/1", None, None))
        for kind, method, path, body, ctype in reqs:
            if self.stop_event.is_set():
                return
            try:
                status, payload, _ = http(method, b + path, body, ctype, timeout=10)
            except Exception as e:  # noqa: BLE001
                if len(self.exceptions) < 20:
                    self.exceptions.append(f"{kind}: {e!r}")
                continue
            self._record(kind, status, payload)
            if status == 202:
                self.accepted += json.loads(payload).get("accepted", 0)
        self.rounds += 1

    def _run(self):
        while not self.stop_event.is_set():
            self.one_round()
            self.stop_event.wait(0.02)  # keep it light: 2 cores shared with MariaDB and Prometheus

    def start(self):
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def stop(self):
        self.stop_event.set()
        if self.thread:
            self.thread.join(timeout=20)

    def summary(self):
        return ", ".join(f"{k}={dict(sorted(v.items()))}" for k, v in sorted(self.answers.items()))


# --------------------------------------------------------------------------- checks


def parse_exposition(text):
    """Returns {metric family name: set of sample names}, from # TYPE lines and samples."""
    families = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            parts = line.split()
            families.setdefault(parts[2], set())
        elif line and not line.startswith("#"):
            name = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0)
            fam = name
            for suffix in ("_bucket", "_sum", "_count"):
                if name.endswith(suffix) and name[: -len(suffix)] in families:
                    fam = name[: -len(suffix)]
            families.setdefault(fam, set()).add(name)
    return families


def check_metrics(ctx):
    status, body, headers = http("GET", ctx.daemon.base + "/metrics")
    if status != 200:
        raise Failure(f"GET /metrics answered {status}")
    ctype = headers.get("Content-Type", "")
    if not ctype.startswith("text/plain"):
        raise Failure(f"GET /metrics Content-Type {ctype!r}, want text/plain; version=0.0.4")
    path = os.path.join(ctx.tmp, "metrics.txt")
    with open(path, "wb") as f:
        f.write(body)
    with open(path, "rb") as f:
        r = subprocess.run(["promtool", "check", "metrics"], stdin=f, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=30)
    if r.returncode != 0:
        raise Failure(f"promtool check metrics exited {r.returncode}: {r.stdout.decode(errors='replace')[:2000]}")
    families = parse_exposition(body.decode())
    missing = [m for m in PINNED_METRICS if m not in families]
    for h in HISTOGRAMS & set(families):
        for suffix in ("_bucket", "_sum", "_count"):
            if h + suffix not in families[h]:
                missing.append(h + suffix)
    if missing:
        raise Failure("missing from /metrics: " + ", ".join(missing))
    return f"{len(body)} bytes, promtool clean, all {len(PINNED_METRICS)} pinned names present"


def check_load_answers(ctx):
    load = ctx.load
    if load.exceptions:
        raise Failure("requests failed: " + "; ".join(load.exceptions[:5]))
    if load.unexpected:
        raise Failure("unexpected answers: " + "; ".join(load.unexpected[:5]))
    for kind, ok in (("counter", 200), ("flush", 200), ("json", 202), ("ndjson", 202),
                     ("reset", 200)):
        if load.answers.get(kind, {}).get(ok, 0) == 0:
            raise Failure(f"no {kind} request was ever answered {ok}: {load.summary()}")
    return f"{load.rounds} rounds: {load.summary()}"


def dashboard_targets(dash):
    """Yields (panel title, refId, expr) for every target, including panels in collapsed rows."""
    def walk(panels):
        for p in panels:
            yield p
            yield from walk(p.get("panels", []))
    for p in walk(dash.get("panels", [])):
        for t in p.get("targets", []):
            yield p.get("title", f"panel {p.get('id')}"), t.get("refId", "?"), t.get("expr", "")


def check_dashboard_structure(ctx):
    with open(os.path.join(ctx.source, "grafana", "slotted-counterd.json")) as f:
        dash = json.load(f)
    problems = []
    if dash.get("uid") != "slotted-counterd":
        problems.append(f"uid is {dash.get('uid')!r}")
    if not 36 <= int(dash.get("schemaVersion", 0)) <= 41:
        problems.append(f"schemaVersion {dash.get('schemaVersion')}")
    if dash.get("id") is not None:
        problems.append("id must be null for import")
    inputs = [i for i in dash.get("__inputs", []) if i.get("name") == "DS_PROMETHEUS"
              and i.get("type") == "datasource" and i.get("pluginId") == "prometheus"]
    if not inputs:
        problems.append("no __inputs entry DS_PROMETHEUS (datasource, prometheus)")
    var = [v for v in dash.get("templating", {}).get("list", []) if v.get("name") == "instance"]
    if not var:
        problems.append("no templating variable 'instance'")
    else:
        q = var[0].get("query")
        q = q.get("query") if isinstance(q, dict) else q
        if q != "label_values(slotted_counterd_build_info, instance)":
            problems.append(f"instance variable query is {q!r}")
    ids = set()

    def walk(panels):
        for p in panels:
            yield p
            yield from walk(p.get("panels", []))
    for p in walk(dash.get("panels", [])):
        title = p.get("title")
        if p.get("id") in ids:
            problems.append(f"duplicate panel id {p.get('id')}")
        ids.add(p.get("id"))
        if p.get("type") == "row":
            continue
        ds = p.get("datasource") or {}
        if ds.get("uid") != "${DS_PROMETHEUS}":
            problems.append(f"panel {title!r} datasource {ds!r}")
        if not p.get("targets"):
            problems.append(f"panel {title!r} has no targets")
        for t in p.get("targets", []):
            tds = t.get("datasource") or ds
            if tds.get("uid") != "${DS_PROMETHEUS}":
                problems.append(f"panel {title!r} target {t.get('refId')} datasource {tds!r}")
            if 'instance=~"$instance"' not in t.get("expr", ""):
                problems.append(f"panel {title!r} target {t.get('refId')} does not filter on $instance")
    # docs/operations.md, Dashboard, names every row, in order (issue 40: it had left one out).
    with open(os.path.join(ctx.source, "docs", "operations.md")) as f:
        section = f.read().split("## Dashboard", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"\*\*([^*]+)\*\*", " ".join(section.split()))
    rows = [p.get("title") for p in dash.get("panels", []) if p.get("type") == "row"]
    if documented != rows:
        problems.append(f"docs/operations.md, Dashboard, names the rows {documented}; the dashboard has {rows}")
    if problems:
        raise Failure("; ".join(problems[:10]))
    n = sum(1 for _ in dashboard_targets(dash))
    return f"{len(ids)} panels, {n} targets, all on ${{DS_PROMETHEUS}} and $instance; {len(rows)} rows documented"


def substitute(expr):
    for k, v in (("${instance}", ".*"), ("$instance", ".*"), ("${__rate_interval}", "1m"),
                 ("$__rate_interval", "1m"), ("${__interval}", "15s"), ("$__interval", "15s"),
                 ("${__range}", "5m"), ("$__range", "5m")):
        expr = expr.replace(k, v)
    return expr


def prom_query(ctx, expr):
    url = f"{ctx.prom_base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    status, body, _ = http("GET", url, timeout=10)
    try:
        doc = json.loads(body)
    except ValueError:
        raise Failure(f"Prometheus answered {status}: {body[:300]!r}") from None
    if status != 200 or doc.get("status") != "success":
        raise Failure(f"{doc.get('errorType')}: {doc.get('error')}")
    return doc["data"]


def check_dashboard_queries(ctx):
    with open(os.path.join(ctx.source, "grafana", "slotted-counterd.json")) as f:
        dash = json.load(f)
    failures = []
    n = 0
    for title, ref, expr in dashboard_targets(dash):
        n += 1
        q = substitute(expr)
        try:
            data = prom_query(ctx, q)
        except Failure as e:
            failures.append(f"panel {title!r} {ref}: error {e} [{q}]")
            continue
        if data["resultType"] in ("vector", "matrix") and not data["result"]:
            failures.append(f"panel {title!r} {ref}: empty result [{q}]")
    if failures:
        raise Failure(f"{len(failures)} of {n} queries without data: " + " | ".join(failures))
    return f"{n} panel queries returned data"


def check_db_outage_seen(ctx):
    """The database restart must show up in the scraped data (else the dashboard test proves little)."""
    data = prom_query(ctx, 'sum(increase(slotted_counterd_db_errors_total[5m])) + '
                           'sum(increase(slotted_counterd_flushes_total{result="error"}[5m]))')
    v = float(data["result"][0]["value"][1]) if data["result"] else 0
    if v <= 0:
        raise Failure("Prometheus saw neither db_errors_total nor flushes_total{result=\"error\"} rise "
                      "while MariaDB was down")
    ok = prom_query(ctx, 'increase(slotted_counterd_flush_rows_total[5m])')
    rows = float(ok["result"][0]["value"][1]) if ok["result"] else 0
    if rows <= 0:
        raise Failure("flush_rows_total never rose")
    return f"db/flush errors +{v:.0f}, rows flushed +{rows:.0f}"


def check_systemd(ctx):
    unit_src = os.path.join(ctx.source, "systemd", "slotted-counterd.service")
    with open(unit_src) as f:
        text = f.read()
    for required in ("Type=notify", "WatchdogSec=", "Restart=on-failure", "StateDirectory=slotted-counterd",
                     "ExecStart=/usr/bin/slotted-counterd --config /etc/slotted-counterd/slotted-counterd.yaml",
                     "TimeoutStopSec=", "LimitNOFILE=65536", "LoadCredential="):
        if not re.search(r"^" + re.escape(required), text, re.M):
            raise Failure(f"unit lacks {required!r}")
    m = re.search(r"^TimeoutStopSec=(\d+)s?$", text, re.M)
    if not m or int(m.group(1)) <= 30:
        raise Failure("TimeoutStopSec must exceed the default shutdown_timeout (30s)")
    udir = os.path.join(ctx.tmp, "unit")
    os.makedirs(udir)
    unit = os.path.join(udir, "slotted-counterd.service")
    rewritten, count = re.subn(r"^ExecStart=/usr/bin/slotted-counterd\b",
                               "ExecStart=" + os.path.abspath(ctx.daemon_path), text, flags=re.M)
    if count != 1:
        raise Failure("could not find exactly one ExecStart=/usr/bin/slotted-counterd line")
    with open(unit, "w") as f:
        f.write(rewritten)
    # The service Requires= its socket unit: verified with it.
    shutil.copy(os.path.join(ctx.source, "systemd", "slotted-counterd.socket"), udir)
    r = subprocess.run(["systemd-analyze", "verify", unit, os.path.join(udir, "slotted-counterd.socket")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=60)
    err = r.stderr.decode(errors="replace")
    if r.returncode != 0 or "slotted-counterd" in err:
        raise Failure(f"systemd-analyze verify (exit {r.returncode}) reports: {err.strip()[:1500]}")
    r = subprocess.run(["systemd-analyze", "security", "--offline=true", unit], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=60)
    out = r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")
    exposure = exposure_within_limit(out)
    return f"verify clean; exposure {exposure} (<= {MAX_EXPOSURE})"


def exposure_within_limit(out):
    """The unit's exposure from `systemd-analyze security` output; Failure when there is
    none or it is above MAX_EXPOSURE."""
    m = re.search(r"Overall exposure level for slotted-counterd\.service: (\d+(?:\.\d+)?)", out)
    if not m:
        raise Failure(f"no exposure figure in systemd-analyze security output: {out[-800:]}")
    exposure = float(m.group(1))
    if exposure > MAX_EXPOSURE:
        raise Failure(f"exposure {exposure} > {MAX_EXPOSURE}")
    return exposure


def check_sd_notify(ctx):
    ndir = os.path.join(ctx.tmp, "notify")
    os.makedirs(ndir)
    sock_path = os.path.join(ndir, "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    daemon = None
    try:
        sock.bind(sock_path)
        cfg = os.path.join(ndir, "daemon.yaml")
        write_config(cfg, ctx.db, "ops-notify")
        daemon = Daemon(ctx.daemon_path, cfg, os.path.join(ndir, "daemon.log"),
                        env={"NOTIFY_SOCKET": sock_path, "WATCHDOG_USEC": "400000"})
        started = time.monotonic()
        daemon.start()
        messages = []  # (monotonic time, field)

        def receive_until(pred, timeout, what):
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                sock.settimeout(max(0.01, min(0.5, deadline - time.monotonic())))
                try:
                    data = sock.recv(4096)
                except socket.timeout:
                    if daemon.proc.poll() is not None and not pred():
                        raise Failure(f"daemon exited ({daemon.proc.returncode}) before {what}:\n"
                                      f"{tail(daemon.logpath)}")
                    continue
                now = time.monotonic()
                for field in data.decode(errors="replace").split("\n"):
                    if field:
                        messages.append((now, field))
                if pred():
                    return
            raise Failure(f"no {what} within {timeout}s; got {[m for _, m in messages]}")

        def count(field, after=0.0):
            return sum(1 for t, m in messages if m == field and t >= after)

        receive_until(lambda: count("READY=1") > 0, 20, "READY=1")
        ready_at = next(t for t, m in messages if m == "READY=1")
        # The 'listening on' line is logged before READY=1, so it is already in the pipe.
        port = daemon.wait_listening(timeout=5)
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass  # connectable the moment READY=1 was seen
        pre_ready = [m for t, m in messages if t < ready_at and m.startswith("WATCHDOG")]
        receive_until(lambda: count("WATCHDOG=1", ready_at) >= 2, 5, "two WATCHDOG=1 after READY=1")
        w = [t for t, m in messages if m == "WATCHDOG=1"]
        gaps = [b - a for a, b in zip(w, w[1:])]
        if gaps and max(gaps) > 0.4:
            raise Failure(f"watchdog pings {max(gaps):.3f}s apart, above WATCHDOG_USEC (0.4s)")
        n_before_stop = len(messages)
        os.kill(daemon.proc.pid, signal.SIGTERM)
        receive_until(lambda: any(m == "STOPPING=1" for _, m in messages[n_before_stop:]), 10, "STOPPING=1")
        try:
            rc = daemon.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            raise Failure("daemon did not exit within 15s of SIGTERM") from None
        if rc != 0:
            raise Failure(f"daemon exited {rc} after SIGTERM:\n{tail(daemon.logpath)}")
        extra = f", {len(pre_ready)} pings before READY" if pre_ready else ""
        return (f"READY=1 after {ready_at - started:.2f}s (port {port} connectable), "
                f"{count('WATCHDOG=1')} WATCHDOG=1 (max gap {max(gaps) if gaps else 0:.2f}s){extra}, "
                f"STOPPING=1, exit 0")
    finally:
        if daemon:
            daemon.stop(timeout=10)
        sock.close()


# --------------------------------------------------------------------------- runner


class Context:
    pass


class Runner:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def run(self, name, fn, *args):
        t0 = time.monotonic()
        try:
            detail = fn(*args)
        except Failure as e:
            self.failed += 1
            print(f"FAIL {name} ({time.monotonic() - t0:.1f}s): {e}", flush=True)
            return False
        except Exception:  # noqa: BLE001
            self.failed += 1
            print(f"FAIL {name} ({time.monotonic() - t0:.1f}s): unexpected error\n{traceback.format_exc()}",
                  flush=True)
            return False
        self.passed += 1
        print(f"PASS {name} ({time.monotonic() - t0:.1f}s){': ' + detail if detail else ''}", flush=True)
        return True

    def skip(self, name, why):
        self.failed += 1
        print(f"FAIL {name}: not run ({why})", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--daemon", required=True, help="the built slotted-counterd binary")
    ap.add_argument("--source", required=True, help="repository root")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()

    ctx = Context()
    ctx.daemon_path = os.path.abspath(args.daemon)
    ctx.source = os.path.abspath(args.source)
    ctx.tmp = tempfile.mkdtemp(prefix="slotted-ops-")
    ctx.daemon = ctx.db = ctx.load = ctx.prom = None
    runner = Runner()
    t_start = time.monotonic()

    if not os.access(ctx.daemon_path, os.X_OK):
        print(f"FAIL setup: {ctx.daemon_path} is not an executable", flush=True)
        print("0 passed, 1 failed")
        return 1
    missing = [t for t in ("mariadb-install-db", "mariadbd", "mariadb", "prometheus", "promtool",
                           "systemd-analyze") if not shutil.which(t)]
    if missing:
        print(f"FAIL setup: not installed: {', '.join(missing)}", flush=True)
        print("0 passed, 1 failed")
        return 1

    # Independent of everything else, and quick.
    runner.run("systemd: unit verifies and is hardened", check_systemd, ctx)
    runner.run("dashboard: structure", check_dashboard_structure, ctx)

    setup_ok = False
    try:
        def setup():
            ctx.db = MariaDB(ctx.tmp)
            ctx.db.install()
            ctx.db.start()
            # Prometheus starts up while MariaDB does; it scrapes once the daemon listens.
            ctx.db.wait_up()
            r = ctx.db.sql("CREATE DATABASE app")
            if r.returncode != 0:
                raise Failure(f"CREATE DATABASE failed: {r.stderr.decode(errors='replace')}")
            cfg = os.path.join(ctx.tmp, "daemon.yaml")
            # An access log source, so the dashboard's log panels have data.
            access_log = os.path.join(ctx.tmp, "access.log")
            with open(access_log, "w") as f:
                for i in range(10):
                    f.write(f'192.0.2.1 - - [26/Nov/2026:10:00:0{i} +0000] "GET /downloads/{i}/f '
                            'HTTP/1.1" 200 10 "-" "ops"\n')
                f.write("not a log line\n")
            write_config(cfg, ctx.db, "ops-test",
                         "counters: [{name: ops_downloads, record_type: 900}]\n"
                         f"log_sources: [{{path: {access_log}, rules: "
                         "[{counter: ops_downloads, path: '^/downloads/([0-9]+)/'}]}]\n")
            migrate(ctx.daemon_path, cfg)
            ctx.daemon = Daemon(ctx.daemon_path, cfg, os.path.join(ctx.tmp, "daemon.log"))
            ctx.daemon.start()
            ctx.daemon.wait_listening()
            wait_for("/readyz 200", lambda: http("GET", ctx.daemon.base + "/readyz", timeout=2)[0] == 200, 20)
            start_prometheus(ctx)
            ctx.load = Load(ctx.daemon.base)
            ctx.load.start()
            return f"MariaDB :{ctx.db.port}, daemon :{ctx.daemon.port}, Prometheus :{ctx.prom_port}"
        setup_ok = runner.run("setup: MariaDB, daemon, Prometheus, load", setup)

        if setup_ok:
            # A few seconds of mixed load before the exposition is checked.
            wait_for("some load rounds", lambda: ctx.load.rounds >= 20, 20)
            runner.run("metrics: promtool check metrics and pinned names", check_metrics, ctx)
            outage_ok = runner.run("dashboard: load with a database restart", run_outage, ctx)
            ctx.load.stop()
            runner.run("load: answers as the README says", check_load_answers, ctx)
            if outage_ok:
                runner.run("dashboard: outage visible in Prometheus", check_db_outage_seen, ctx)
            runner.run("dashboard: every panel query returns data", check_dashboard_queries, ctx)
            runner.run("sd_notify: READY, WATCHDOG, STOPPING, exit 0", check_sd_notify, ctx)
            rc = ctx.daemon.stop(timeout=20)
            if rc != 0:
                runner.failed += 1
                print(f"FAIL daemon: exited {rc} on SIGTERM:\n{tail(ctx.daemon.logpath)}", flush=True)
        else:
            for name in ("metrics", "dashboard queries", "sd_notify"):
                runner.skip(name, "setup failed")
    finally:
        if ctx.load:
            ctx.load.stop()
        if ctx.daemon:
            ctx.daemon.stop(timeout=10)
        if ctx.prom:
            stop_process(ctx.prom, "prometheus", timeout=10)
        if ctx.db:
            ctx.db.stop(timeout=30)
        if runner.failed and not args.keep:
            print(f"  .. logs: daemon {tail(os.path.join(ctx.tmp, 'daemon.log'), 10)}", flush=True)
        if args.keep:
            print(f"  .. kept {ctx.tmp}", flush=True)
        else:
            shutil.rmtree(ctx.tmp, ignore_errors=True)

    print(f"  .. total {time.monotonic() - t_start:.1f}s", flush=True)
    print(f"{runner.passed} passed, {runner.failed} failed", flush=True)
    return 0 if runner.failed == 0 else 1


def start_prometheus(ctx):
    pdir = os.path.join(ctx.tmp, "prom")
    os.makedirs(pdir)
    ctx.prom_port = free_port()
    ctx.prom_base = f"http://127.0.0.1:{ctx.prom_port}"
    cfg = os.path.join(pdir, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write(f"""global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: slotted-counterd
    static_configs:
      - targets: ['127.0.0.1:{ctx.daemon.port}']
""")
    ctx.prom_log = os.path.join(pdir, "prometheus.log")
    with open(ctx.prom_log, "wb") as logf:
        ctx.prom = subprocess.Popen(
            ["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={os.path.join(pdir, 'data')}",
             f"--web.listen-address=127.0.0.1:{ctx.prom_port}", "--log.level=warn"],
            stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, cwd=pdir)


def wait_prometheus(ctx, min_scrapes=3):
    def ready():
        if ctx.prom.poll() is not None:
            raise Failure(f"prometheus exited {ctx.prom.returncode}:\n{tail(ctx.prom_log)}")
        return http("GET", ctx.prom_base + "/-/ready", timeout=2)[0] == 200
    wait_for("Prometheus /-/ready", ready, 30, interval=0.2)

    def scraped():
        d = prom_query(ctx, 'count_over_time(up{job="slotted-counterd"}[1m]) '
                            'and on() up{job="slotted-counterd"} == 1')
        return d["result"] and float(d["result"][0]["value"][1]) >= min_scrapes
    wait_for(f"{min_scrapes} successful scrapes", scraped, 30, interval=0.3)


def run_outage(ctx):
    """~15 s of load with MariaDB stopped for ~3 s in the middle."""
    wait_prometheus(ctx)
    t0 = time.monotonic()
    time.sleep(4)  # load under a healthy database (the load runs in its thread)
    rc = ctx.db.stop(timeout=30)
    down_at = time.monotonic()
    time.sleep(3)  # load while the database is down: increments must still be 202
    readyz_down = http("GET", ctx.daemon.base + "/readyz", timeout=5)[0]
    ctx.db.start()
    ctx.db.wait_up(timeout=40)
    up_at = time.monotonic()

    def flushed():
        return http("POST", ctx.daemon.base + "/v1/flush", timeout=10)[0] == 200
    wait_for("POST /v1/flush 200 after the restart", flushed, 30, interval=0.3)
    caught_up = time.monotonic()
    wait_for("/readyz 200 after the restart",
             lambda: http("GET", ctx.daemon.base + "/readyz", timeout=2)[0] == 200, 20)
    # Load keeps running so the rates after the restart are covered too; at least 15 s in all,
    # and a few scrapes after the catch-up.
    time.sleep(max(3.0, 15 - (time.monotonic() - t0)))
    if readyz_down != 503:
        raise Failure(f"/readyz answered {readyz_down} while MariaDB was down, want 503")
    return (f"mariadbd stopped (exit {rc}), down {up_at - down_at:.1f}s, /readyz 503 while down, "
            f"flush 200 {caught_up - up_at:.1f}s after it was back; {time.monotonic() - t0:.1f}s of load")


if __name__ == "__main__":
    sys.exit(main())
