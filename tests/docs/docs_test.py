#!/usr/bin/env python3
"""The user docs against a running daemon and a real MariaDB.

    python3 tests/docs/docs_test.py --daemon build/slotted-counterd --source .

- README.md's five-minute walkthrough: its requests and its SQL give the numbers it shows;
- docs/clients.md: every example file it shows (examples/clients/*) is shown as it is,
  runs against the daemon (curl, Python, PHP, Node, Ruby, NDJSON batches) and leaves
  exactly the counts it should; a keyed retry counts once; Node and Ruby keep their
  connection alive;
- docs/operations.md: every metric /metrics exports is in its table (with the type
  exported), every one there is exported or says when it is absent, and the dashboard
  panel it names plots it (or, "not plotted", none does);
- docs/openapi.yaml, walked against a daemon with a bearer token: every path, method,
  status and required header it lists is what the daemon answers (503s with the
  database stopped), other methods are 405 with the listed methods in Allow, and every
  route the daemon serves (router.cpp's paths, /metrics' route labels) is in it.

Starts its own MariaDB and two daemons on 127.0.0.1 and stops them by pid. Prints one
line per check and ends with "N passed, M failed". Needs mariadbd, curl, php-cli,
node, ruby.
"""

import argparse
import http.client
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

try:
    import yaml
except ImportError:  # an interpreter without PyYAML (e.g. a pyenv one): Debian's has it
    if sys.executable != "/usr/bin/python3" and os.path.exists("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    raise

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ops"))
from ops_test import Daemon, Failure, MariaDB, Runner, migrate, wait_for  # noqa: E402

TOKEN = "docs-test-token"
COUNTERS = """counters:
  - name: repo_downloads
    record_type: 123
    rollup: {table: repositories, id_column: id, count_column: download_count}
    buckets: {hour: 48h, day: 400d}
    top: true
"""


def request(port, method, path, body=None, headers=None, timeout=10):
    """One request on a fresh connection: (status, lower-cased headers, body bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = body.encode() if isinstance(body, str) else body
        conn.request(method, path, body=data, headers=headers or {})
        r = conn.getresponse()
        payload = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, payload
    finally:
        conn.close()


def metric_value(port, series):
    """The value of one series of /metrics, named as exported (labels included)."""
    _, _, body = request(port, "GET", "/metrics")
    for line in body.decode().splitlines():
        if line.rsplit(" ", 1)[0] == series:
            return float(line.rsplit(" ", 1)[1])
    raise Failure(f"{series} not in /metrics")


def total(db, record_type, record_id):
    r = db.sql(f"SELECT COALESCE(SUM(count), 0) FROM app.slotted_counters "
               f"WHERE record_type = {record_type} AND record_id = {record_id}")
    if r.returncode != 0:
        raise Failure(r.stderr.decode())
    return int(r.stdout.decode().split()[-1])


def flush(port, headers=None):
    status, _, body = request(port, "POST", "/v1/flush", b"", headers, timeout=30)
    if status != 200:
        raise Failure(f"POST /v1/flush: {status} {body[:200]!r}")


def write_config(path, db, instance_id, extra=""):
    with open(path, "w") as f:
        f.write(f"""# written by tests/docs/docs_test.py
instance_id: {instance_id}
listen: {{address: 127.0.0.1, port: 0}}
http: {{threads: 2}}
mysql: {{socket: {db.sock}, user: root, database: app, connect_timeout: 1s}}
{COUNTERS}flush: {{interval: 200ms, max_retry_backoff: 1s}}
shutdown_timeout: 5s
{extra}""")


# --------------------------------------------------------------------------- README


def check_walkthrough(ctx):
    """README's 'Count a download' block, run as it is (the port replaced), and the SQL after."""
    text = open(os.path.join(ctx.source, "README.md")).read()
    block = text.split("Count a download", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    sql_block = text.split("comes out of SQL", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    port = ctx.a.port
    request(port, "DELETE", "/v1/counters/123/42")
    # Commands (continuation lines joined) each followed by the answer the README shows.
    steps = []
    lines = block.replace("\\\n", " ").splitlines()
    for line in lines:
        if line.startswith("curl"):
            steps.append([line.replace("localhost:8080", f"127.0.0.1:{port}"), None])
        elif line.startswith("# ") and steps:
            steps[-1][1] = line[2:]
    if len(steps) != 3:
        raise Failure(f"want 3 curl commands in the walkthrough, found {len(steps)}")
    for cmd, shown in steps:
        out = subprocess.run(["bash", "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             timeout=20).stdout.decode().strip()
        got, want = json.loads(out), json.loads(shown)
        if "count" in want:  # persisted/pending depend on whether a flush came between
            if got["count"] != want["count"] or got["persisted"] + got["pending"] != got["count"] \
                    or got["record_type"] != want["record_type"] or got["record_id"] != want["record_id"]:
                raise Failure(f"{cmd}: got {out}, README shows {shown}")
        elif got != want:
            raise Failure(f"{cmd}: got {out}, README shows {shown}")
    sql_line = [ln for ln in sql_block.splitlines() if ln.startswith("mariadb")][0]
    query = re.search(r'-e "([^"]+)"', sql_line).group(1)
    want = int([ln for ln in sql_block.splitlines() if ln.startswith("# ")][0][2:])

    def same_by_sql():
        r = ctx.db.sql("USE app; " + query)
        return r.returncode == 0 and int(r.stdout.decode().split()[-1]) == want
    wait_for(f"the walkthrough's SQL to give {want}", same_by_sql, 10)
    return f"3 requests answered as shown; SQL gives {want}"


# --------------------------------------------------------------------------- clients


def check_clients_page(ctx):
    text = open(os.path.join(ctx.source, "docs", "clients.md")).read()
    shown = re.findall(r"<!-- example: (\S+) -->\n```\w+\n(.*?)\n```\n", text, re.S)
    files = sorted(os.listdir(os.path.join(ctx.source, "examples", "clients")))
    stale = [p for p, body in shown
             if open(os.path.join(ctx.source, p)).read().rstrip("\n") != body]
    missing = [f for f in files if f"examples/clients/{f}" not in [p for p, _ in shown]]
    if stale or missing:
        raise Failure(f"clients.md differs from {stale}; does not show {missing}")
    return f"{len(shown)} examples shown as they are"


def run_example(ctx, argv, stdin=None):
    env = dict(os.environ, SLOTTED_URL=ctx.a.base)
    r = subprocess.run(argv, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=env, timeout=60, cwd=ctx.tmp)
    if r.returncode != 0:
        raise Failure(f"{' '.join(argv)} exited {r.returncode}: {r.stdout.decode()[-500:]} "
                      f"{r.stderr.decode()[-1000:]}")
    return r.stdout.decode()


def counted(ctx, ids, run):
    """Runs `run`, flushes, and returns what the table gained per record id."""
    before = {i: total(ctx.db, 123, i) for i in ids}
    out = run()
    flush(ctx.a.port)
    return {i: total(ctx.db, 123, i) - before[i] for i in ids}, out


def expect(name, gained, want):
    if gained != want:
        raise Failure(f"{name}: the table gained {gained}, want {want}")


def connections(ctx):
    return metric_value(ctx.a.port, "slotted_counterd_http_connections_accepted_total")


def check_curl(ctx):
    ex = os.path.join(ctx.source, "examples", "clients", "count.sh")
    gained, out = counted(ctx, (42, 43), lambda: run_example(ctx, ["sh", ex]) + run_example(ctx, ["sh", ex]))
    # Run twice: 42 gets 1 (fire-and-forget) + 1 (NDJSON) per run, and the keyed order once.
    expect("count.sh twice", gained, {42: 5, 43: 10})
    if '"record_type": 123, "record_id": "42"' not in out:
        raise Failure(f"count.sh did not print the counter: {out}")
    return "run twice: fire-and-forget and NDJSON twice, the keyed order once"


def check_python(ctx):
    ex = os.path.join(ctx.source, "examples", "clients", "count.py")
    gained, _ = counted(ctx, (42, 43), lambda: run_example(ctx, [sys.executable, ex]) +
                        run_example(ctx, [sys.executable, ex]))
    expect("count.py twice", gained, {42: 2, 43: 1})
    return "run twice: the page view twice, the keyed purchase once"


def check_php(ctx):
    ex = os.path.join(ctx.source, "examples", "clients", "count.php")
    gained, out = counted(ctx, (42,), lambda: run_example(ctx, ["php", ex]))
    expect("count.php", gained, {42: 1})
    if "page rendered" not in out:
        raise Failure(f"count.php printed {out!r}")
    return "the view counted after the page"


def check_node(ctx):
    ex = os.path.join(ctx.source, "examples", "clients", "count.mjs")
    c0 = connections(ctx)
    gained, _ = counted(ctx, (42, 43), lambda: run_example(ctx, ["node", ex]) + run_example(ctx, ["node", ex]))
    opened = connections(ctx) - c0 - 2  # the flush's and this read's connections
    expect("count.mjs twice", gained, {42: 200, 43: 1})
    if opened > 6:
        raise Failure(f"202 requests from two runs opened {opened:.0f} connections: no keep-alive")
    return f"run twice: 200 views, the keyed order once; {opened:.0f} connections for 202 requests"


def check_ruby(ctx):
    ex = os.path.join(ctx.source, "examples", "clients", "count.rb")
    c0 = connections(ctx)
    gained, _ = counted(ctx, (42, 44), lambda: run_example(ctx, ["ruby", ex]))
    opened = connections(ctx) - c0 - 2
    expect("count.rb", gained, {42: 100, 44: 1})
    if opened > 2:
        raise Failure(f"102 requests opened {opened:.0f} connections: no keep-alive")
    return f"100 views, a keyed order sent twice counted once; {opened:.0f} connection(s)"


def check_batch(ctx):
    ex = os.path.join(ctx.source, "examples", "clients", "batch.sh")
    ids = ("42\n" * 1500 + "45\n" * 700).encode()
    c0 = metric_value(ctx.a.port, 'slotted_counterd_http_requests_total{code="204",route="increments"}')
    gained, _ = counted(ctx, (42, 45), lambda: run_example(ctx, ["sh", ex], stdin=ids))
    posts = metric_value(ctx.a.port, 'slotted_counterd_http_requests_total{code="204",route="increments"}') - c0
    expect("batch.sh", gained, {42: 1500, 45: 700})
    if posts != 3:
        raise Failure(f"2,200 ids went in {posts:.0f} requests, want 3")
    return "2,200 ids in 3 NDJSON requests, counted exactly"


# The clients' promises (docs/clients.md): against a daemon that wants a token, one that
# answers every request 503, and none at all. (name, argv, stdin, what the token daemon's
# table gains; their keyed requests were sent before, to daemon a, and are replays.)
CLIENT_RUNS = [
    ("count.sh", ["sh"], None, {42: 2, 43: 5}),
    ("count.py", [sys.executable], None, {42: 1}),
    ("count.php", ["php"], None, {42: 1}),
    ("count.mjs", ["node"], None, {42: 100}),
    ("count.rb", ["ruby"], None, {42: 100}),
    ("batch.sh", ["sh"], b"42\n" * 10 + b"45\n" * 5, {42: 10, 45: 5}),
]
# Seconds a run may block: a keyed call's 5 s deadline plus a fire-and-forget call's 1 s
# and 1.5 s of process start-up; the scripts without a keyed call 2.5 s. STARTUP_SLACK
# more for an interpreter's start on a 2-core machine busy with sanitizer builds (ruby
# measured 7.8 s in all there): far below the 30 s or more of a client without bounds.
BOUND = {"count.sh": 9.0, "count.py": 7.5, "count.php": 2.5, "count.mjs": 7.5, "count.rb": 7.5,
         "batch.sh": 2.5}
STARTUP_SLACK = 4.0


class Always503(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
        self._answer()

    def do_GET(self):  # noqa: N802
        self._answer()

    def _answer(self):
        body = b'{"error": "busy"}'
        self.send_response(503)
        self.send_header("Retry-After", "5")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def run_client(ctx, name, argv, stdin, url, token=None):
    """(exit code, output, seconds) of one example run."""
    env = dict(os.environ, SLOTTED_URL=url)
    env.pop("SLOTTED_TOKEN", None)
    if token:
        env["SLOTTED_TOKEN"] = token
    t0 = time.monotonic()
    r = subprocess.run(argv + [os.path.join(ctx.source, "examples", "clients", name)], input=stdin,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=60, cwd=ctx.tmp)
    return r.returncode, r.stdout.decode(errors="replace"), time.monotonic() - t0


def check_clients_promises(ctx):
    import socket
    import threading
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Always503)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # nothing listens there once the block ends
    problems, times = [], []
    try:
        for name, argv, stdin, want in CLIENT_RUNS:
            before = {i: total(ctx.db, 123, i) for i in want}
            rc, out, took = run_client(ctx, name, argv, stdin, ctx.b.base, TOKEN)
            flush(ctx.b.port, AUTH)
            gained = {i: total(ctx.db, 123, i) - before[i] for i in want}
            if gained != want:
                problems.append(f"{name} with a token: gained {gained}, want {want} (exit {rc}: {out[-300:]!r})")
            for label, url in (("503", f"http://127.0.0.1:{server.server_address[1]}"),
                               ("no daemon", f"http://127.0.0.1:{closed}")):
                rc, out, took = run_client(ctx, name, argv, stdin, url)
                times.append(f"{name} {label} {took:.1f}s")
                if took > BOUND[name] + STARTUP_SLACK:
                    problems.append(f"{name} against {label} blocked {took:.1f}s (promised at most "
                                    f"{BOUND[name]}s, {STARTUP_SLACK}s allowed for start-up)")
                raised = re.search(r"Traceback|Uncaught|node:internal|\(\w+Error\)|PHP Fatal", out)
                # A script whose promise is an exit status (batch.sh, count.php: non-zero
                # when not counted) may fail; the others end normally, having said so.
                if raised or (name in ("count.py", "count.mjs", "count.rb") and rc != 0):
                    problems.append(f"{name} against {label}: exit {rc}, raised into the caller: {out[-400:]!r}")
    finally:
        server.shutdown()
        server.server_close()
    if problems:
        raise Failure("; ".join(problems))
    return "with a token: counted; " + ", ".join(times)


# --------------------------------------------------------------------------- schema


def check_schema(ctx):
    """design.md's Schema names every table --migrate created, and each CREATE TABLE it
    shows has the columns the real table has."""
    text = open(os.path.join(ctx.source, "docs", "design.md")).read()
    section = text.split("\n## Schema\n", 1)[1]
    r = ctx.db.sql("SELECT table_name, column_name FROM information_schema.columns "
                   "WHERE table_schema = 'app' AND table_name <> 'repositories' "
                   "ORDER BY table_name, ordinal_position")
    if r.returncode != 0:
        raise Failure(r.stderr.decode())
    real = {}
    for line in r.stdout.decode().splitlines()[1:]:
        t, c = line.split("\t")
        real.setdefault(t, []).append(c)
    problems = [f"--migrate created {t}, which design.md's Schema does not name"
                for t in real if f"`{t}`" not in section and f"TABLE IF NOT EXISTS {t} " not in section
                and not (t.endswith("_day") and "slotted_counters_day" in section)]
    for name, body in re.findall(r"CREATE TABLE IF NOT EXISTS (\w+) \((.*?)\) ENGINE=InnoDB;", section, re.S):
        if name not in real:
            problems.append(f"design.md shows {name}, which --migrate did not create")
            continue
        shown = [m for m in re.findall(r"(?:^|,)\s*(\w+) (?:INT|BIGINT|SMALLINT|TINYINT|VARCHAR|VARBINARY|CHAR|TIMESTAMP|DATETIME|DATE)\b",
                                       body, re.M)]
        if shown != real[name]:
            problems.append(f"{name}: design.md shows columns {shown}, the table has {real[name]}")
    if problems:
        raise Failure("; ".join(problems))
    return f"{len(real)} tables, columns as shown"


# --------------------------------------------------------------------------- metrics


def exported_families(port):
    _, _, body = request(port, "GET", "/metrics")
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", body.decode(), re.M))


def documented_metrics(source):
    text = open(os.path.join(source, "docs", "operations.md")).read()
    rows = {}
    for line in text.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0].splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0].strip("`")] = cells
    return rows


def dashboard_panels(source):
    with open(os.path.join(source, "grafana", "slotted-counterd.json")) as f:
        dash = json.load(f)
    panels = {}

    def walk(ps):
        for p in ps:
            if p.get("targets"):
                panels.setdefault(p["title"], []).extend(t.get("expr", "") for t in p["targets"])
            walk(p.get("panels", []))
    walk(dash["panels"])
    return panels


def check_metrics(ctx):
    exported = exported_families(ctx.a.port)
    rows = documented_metrics(ctx.source)
    panels = dashboard_panels(ctx.source)
    problems = []
    for name, kind in exported.items():
        if name not in rows:
            problems.append(f"{name} ({kind}) is exported but not in docs/operations.md")
        elif rows[name][1] != kind:
            problems.append(f"{name}: documented as {rows[name][1]}, exported as {kind}")
    for name, cells in rows.items():
        if name not in exported and "Absent" not in cells[3]:
            problems.append(f"{name} is documented but not exported (and its meaning says not when it is absent)")
        panel = cells[4]
        uses = [t for t, exprs in panels.items()
                if any(re.search(r"\b" + re.escape(name) + r"(_bucket|_sum|_count)?\b", e) for e in exprs)]
        if panel.startswith("not plotted"):
            if uses:
                problems.append(f"{name} is 'not plotted' but panels {uses} plot it")
        elif panel not in panels:
            problems.append(f"{name}: no dashboard panel titled {panel!r}")
        elif panel not in uses:
            problems.append(f"{name}: panel {panel!r} does not plot it")
    used = set()
    for exprs in panels.values():
        for e in exprs:
            for m in re.findall(r"\b((?:slotted_counterd|process)_[a-z_]+)\b", e):
                base = re.sub(r"_(bucket|sum|count)$", "", m)
                used.add(base if base in rows else m)
    problems += [f"the dashboard plots {m}, which docs/operations.md does not list" for m in sorted(used - set(rows))]
    if problems:
        raise Failure("; ".join(problems))
    return f"{len(exported)} exported, {len(rows)} documented, dashboard consistent"


# --------------------------------------------------------------------------- OpenAPI

METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS")
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CONCRETE = {
    "/v1/increments": "/v1/increments",
    "/v1/counters/{record_type}/{record_id}": "/v1/counters/repo_downloads/42",
    "/v1/counters/{record_type}/{record_id}/series": "/v1/counters/repo_downloads/42/series",
    "/v1/counters/{record_type}": "/v1/counters/repo_downloads",
    "/v1/top/{record_type}": "/v1/top/repo_downloads",
    "/v1/flush": "/v1/flush",
    "/v1/rollup": "/v1/rollup",
    "/metrics": "/metrics",
    "/healthz": "/healthz",
    "/readyz": "/readyz",
}
JSON = {"Content-Type": "application/json"}
ONE = '{"record_type": "repo_downloads", "record_id": 42}'


def series_query(ok=True):
    now = int(time.time())
    return f"?granularity=hour&from={now - 7200}&to={now}" if ok else "?from=0&to=1"


def provocations(path, method, db_up):
    """(status, path suffix, body, headers) requests that must get `status` on this
    operation; those needing the database stopped only when db_up is False."""
    series = path.endswith("/series")
    q = series_query() if series else ""
    bad = "/v1/counters/repo_downloads/x" + ("/series" + series_query() if series else "")
    if path == "/v1/increments":
        if db_up:
            return [(202, "", ONE, {**AUTH, **JSON}),
                    (204, "", ONE, {**AUTH, **JSON, "Prefer": "return=minimal"}),
                    (400, "", "{", {**AUTH, **JSON}),
                    (401, "", ONE, JSON),
                    (413, "", "[" + ",".join([ONE] * 60) + "]", {**AUTH, **JSON}),
                    (415, "", ONE, {**AUTH, "Content-Type": "text/plain"}),
                    ("422-setup", "", ONE, {**AUTH, **JSON, "Idempotency-Key": "docs-k1"}),
                    (422, "", ONE.replace("42", "43"), {**AUTH, **JSON, "Idempotency-Key": "docs-k1"})]
        many = "\n".join(f'{{"record_type": 123, "record_id": {i}}}' for i in range(1000, 1030))
        nd = {**AUTH, "Content-Type": "application/x-ndjson"}
        return [("503-setup", "", many, nd), (503, "", many, nd)]
    if path in ("/v1/counters/{record_type}", "/v1/top/{record_type}"):
        ok, wrong = ("?ids=42,43", "?ids=42,x") if path.startswith("/v1/counters/") else ("?limit=3", "?limit=0")
        if db_up:
            notop = [(404, "NOTOP", None, AUTH)] if path.startswith("/v1/top/") else []
            return [(200, ok, None, AUTH), (400, wrong, None, AUTH), (401, ok, None, {})] + notop
        return [(503, ok, None, AUTH)]
    if path.startswith("/v1/counters/"):
        if db_up:
            return [(200, q, None, AUTH), (400, "BAD", None, AUTH), (401, q, None, {})]
        return [(503, q, None, AUTH)]
    if path in ("/v1/flush", "/v1/rollup"):
        return [(200, "", b"", AUTH), (401, "", b"", {})] if db_up else [(503, "", b"", AUTH)]
    if path == "/readyz":
        return [(200, "", None, {})] if db_up else [(503, "", None, {})]
    return [(200, "", None, {})] if db_up else []


def body_problems(spec, schema, payload, where):
    """The answer's JSON against the object schema's required and listed properties."""
    if "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    try:
        doc = json.loads(payload)
    except ValueError:
        return [f"{where}: not JSON: {payload[:100]!r}"]
    if schema.get("type") != "object":
        return []
    if not isinstance(doc, dict):
        return [f"{where}: not an object: {payload[:100]!r}"]
    out = [f"{where}: no {k!r}" for k in schema.get("required", []) if k not in doc]
    props = schema.get("properties", {})
    if schema.get("additionalProperties") is False:
        out += [f"{where}: {k!r} not in the schema" for k in doc if k not in props]
    kinds = {"integer": int, "string": str, "array": list, "object": dict}
    for k, v in doc.items():
        t = props.get(k, {}).get("type")
        if t in kinds and (not isinstance(v, kinds[t]) or isinstance(v, bool)):
            out.append(f"{where}: {k!r} is {type(v).__name__}, the schema says {t}")
    return out


def walk_openapi(ctx, spec, db_up, seen):
    problems = []
    port = ctx.b.port
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if method.upper() not in METHODS:
                continue
            listed = set(op["responses"])
            for status, suffix, body, headers in provocations(path, method, db_up):
                target = CONCRETE[path] + suffix
                if suffix == "BAD":
                    target = "/v1/counters/repo_downloads/x" + ("/series" + series_query()
                                                                  if path.endswith("/series") else "")
                if suffix == "NOTOP":  # a declared counter without top: true
                    target = "/v1/top/plain_counter?limit=3"
                if status == "503-setup" or status == "422-setup":
                    request(port, method.upper(), target, body, headers)
                    continue
                if status == 503 and path == "/readyz":
                    wait_for("/readyz 503", lambda: request(port, method.upper(), target)[0] == 503, 15)
                got, hdrs, payload = request(port, method.upper(), target, body, headers)
                seen.add((path, method, got))
                if got != status:
                    problems.append(f"{method.upper()} {target}: {got}, want {status} ({payload[:120]!r})")
                    continue
                if str(status) not in listed:
                    problems.append(f"{method.upper()} {path} answered {status}, not listed")
                    continue
                resp = op["responses"][str(status)]
                if "$ref" in resp:
                    resp = spec["components"]["responses"][resp["$ref"].rsplit("/", 1)[1]]
                for h, hspec in (resp.get("headers") or {}).items():
                    if hspec.get("required") and h.lower() not in hdrs:
                        problems.append(f"{method.upper()} {target} {status}: no {h} header")
                if method == "head" and payload:
                    problems.append(f"HEAD {target} has a body")
                schema = ((resp.get("content") or {}).get("application/json") or {}).get("schema")
                if schema and method != "head":
                    problems += body_problems(spec, schema, payload, f"{method.upper()} {target} {status}")
    return problems


def connection_limit_problems(ctx, every):
    """x-every-route's 503: a daemon with http.max_connections 2 and two connections open
    answers a third 503 with the Retry-After the spec states, and counts it."""
    import socket
    want = re.search(r"Retry-After: (\d+)", str(every.get("503", "")))
    if not want:
        return [f"x-every-route's 503 states no Retry-After: {every.get('503')!r}"]
    conf = os.path.join(ctx.tmp, "c.yaml")
    write_config(conf, ctx.db, "docs-c", extra="")
    with open(conf) as f:
        text = f.read().replace("http: {threads: 2}", "http: {threads: 2, max_connections: 2}")
    with open(conf, "w") as f:
        f.write(text)
    d = Daemon(ctx.daemon, conf, os.path.join(ctx.tmp, "c.log"))
    d.start()
    held = []
    try:
        d.wait_listening()
        for _ in range(2):
            s = socket.create_connection(("127.0.0.1", d.port), timeout=5)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            s.recv(4096)  # answered: the connection is open and counted
            held.append(s)
        third = socket.create_connection(("127.0.0.1", d.port), timeout=5)
        got = b""
        while True:
            chunk = third.recv(4096)
            if not chunk:
                break
            got += chunk
        third.close()
        head = got.decode(errors="replace")
        if not head.startswith("HTTP/1.1 503") or f"Retry-After: {want.group(1)}\r\n" not in head:
            return [f"the connection over http.max_connections got {head[:200]!r}, "
                    f"the spec says 503 with Retry-After: {want.group(1)}"]
        # A closed connection's place comes back asynchronously: a read until then is over
        # the cap, answered 503 and counted too.
        for s in held:
            s.close()
        held = []
        refused = 1
        deadline = time.monotonic() + 10
        while True:
            status, _, body = request(d.port, "GET", "/metrics")
            if status == 200 or time.monotonic() > deadline:
                break
            refused += status == 503
        series = 'slotted_counterd_http_requests_total{code="503",route="connection_limit"} '
        counted = [float(l[len(series):]) for l in body.decode().splitlines() if l.startswith(series)]
        if counted != [refused]:
            return [f"the connection limit's 503 is counted {counted} in http_requests_total "
                    f"(status {status}), not {refused}"]
        return []
    finally:
        for s in held:
            s.close()
        d.stop()


def check_openapi(ctx):
    with open(os.path.join(ctx.source, "docs", "openapi.yaml")) as f:
        spec = yaml.safe_load(f)
    if not str(spec.get("openapi", "")).startswith("3.1"):
        raise Failure(f"openapi: {spec.get('openapi')!r}, want 3.1.x")
    problems = []
    port = ctx.b.port
    # Routes: the paths of router.cpp's endpoint table and /metrics' route labels are all
    # in the file.
    router = open(os.path.join(ctx.source, "daemon", "http", "router.cpp")).read()
    served = set(re.findall(r'\{metrics::route::\w+,\s*"(/[^"]*)"', router))
    if len(served) < 8:
        problems.append(f"router.cpp: the endpoint table's paths not found (found {sorted(served)})")
    for p in served - set(spec["paths"]):
        problems.append(f"router.cpp serves {p}, not in openapi.yaml")
    _, _, body = request(port, "GET", "/metrics")
    # The routes of answers no path gives (x-every-route, described in info).
    labels = set(re.findall(r'route="([a-z_]+)"', body.decode())) - {"not_found", "unparsed", "connection_limit"}
    for r in ("unparsed", "not_found", "connection_limit"):
        if f"`{r}`" not in spec["info"]["description"]:
            problems.append(f"openapi.yaml's description does not name the route label {r!r}")
    # A flush or rollup answered 503 may have done part of its work (G2): its 503 must
    # not say "nothing changed".
    for path in ("/v1/flush", "/v1/rollup"):
        resp = spec["paths"][path]["post"]["responses"]["503"]
        resp = spec["components"]["responses"].get(resp.get("$ref", "").rsplit("/", 1)[-1], resp)
        if "nothing changed" in resp.get("description", "") or "part" not in resp.get("description", ""):
            problems.append(f"POST {path} 503 says {resp.get('description')!r}: it may have done part of its work")
    documented = {op.get("x-metrics-route") for item in spec["paths"].values() for m, op in item.items()
                  if m.upper() in METHODS}
    if labels != documented:
        problems.append(f"routes the daemon counts {sorted(labels)} != x-metrics-route {sorted(documented)}")
    # Methods: those listed answer (not 405); the others are 405 with Allow = those listed.
    for path, item in spec["paths"].items():
        listed = {m.upper() for m in item if m.upper() in METHODS}
        for method in METHODS:
            status, hdrs, _ = request(port, method, CONCRETE[path], b"" if method in ("POST", "PUT", "PATCH") else None,
                                      {**AUTH, **JSON})
            if method in listed and status == 405:
                problems.append(f"{method} {path}: 405, but listed")
            if method not in listed:
                allow = {m.strip() for m in hdrs.get("allow", "").split(",") if m.strip()}
                if status != 405 or allow != listed:
                    problems.append(f"{method} {path}: {status} Allow {sorted(allow)}, want 405 Allow {sorted(listed)}")
    every = spec.get("x-every-route", {})
    s404 = request(port, "GET", "/no/such/path")[0]
    if s404 != 404 or "404" not in every:
        problems.append(f"unknown path: {s404}")
    s431 = request(port, "GET", "/healthz", headers={"X-Big": "a" * 17000})[0]
    if s431 != 431 or "431" not in every:
        problems.append(f"a 17 KB header: {s431}")
    problems += connection_limit_problems(ctx, every)
    seen = set()
    problems += walk_openapi(ctx, spec, True, seen)
    # The database stopped: the 503s.
    ctx.db.stop()
    ctx.db_stopped = True
    problems += walk_openapi(ctx, spec, False, seen)
    # Every status listed was seen (or is one no quick test can provoke).
    unprovoked = []
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if method.upper() in METHODS:
                # x-not-walked: statuses that need data no quick walk makes (a top-N
                # merge past its 200,000 rows), each covered by a test the spec names.
                skipped = {str(x) for x in op.get("x-not-walked", [])}
                unprovoked += [f"{method.upper()} {path} {s}" for s in op["responses"]
                               if (path, method, int(s)) not in seen and s not in skipped]
    if unprovoked:
        problems.append(f"listed but never answered in this walk: {unprovoked}")
    if problems:
        raise Failure("; ".join(problems))
    return f"{len(spec['paths'])} paths, {len(seen)} (path, method, status) answered as listed"


# --------------------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--source", required=True)
    args = ap.parse_args()

    class Ctx:
        pass
    ctx = Ctx()
    ctx.daemon = os.path.abspath(args.daemon)
    ctx.source = os.path.abspath(args.source)
    ctx.tmp = tempfile.mkdtemp(prefix="slotted-docs-")
    ctx.db = ctx.a = ctx.b = None
    ctx.db_stopped = False
    runner = Runner()
    missing = [t for t in ("mariadb-install-db", "mariadbd", "mariadb", "curl", "php", "node", "ruby")
               if not shutil.which(t)]
    if missing:
        print(f"FAIL setup: not installed: {', '.join(missing)} (scripts/install-deps)", flush=True)
        print("0 passed, 1 failed")
        return 1
    runner.run("clients.md: shows the example files as they are", check_clients_page, ctx)
    try:
        ctx.db = MariaDB(ctx.tmp)
        ctx.db.install()
        ctx.db.start()
        ctx.db.wait_up()
        r = ctx.db.sql("CREATE DATABASE app; CREATE TABLE app.repositories (id BIGINT UNSIGNED "
                       "PRIMARY KEY, download_count BIGINT NOT NULL DEFAULT 0)")
        if r.returncode != 0:
            raise Failure(r.stderr.decode())
        conf_a = os.path.join(ctx.tmp, "a.yaml")
        write_config(conf_a, ctx.db, "docs-a")
        migrate(ctx.daemon, conf_a)
        token_file = os.path.join(ctx.tmp, "token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        conf_b = os.path.join(ctx.tmp, "b.yaml")
        write_config(conf_b, ctx.db, "docs-b")
        with open(conf_b) as f:
            text = f.read()
        text = text.replace("http: {threads: 2}",
                            f"http: {{threads: 2, auth_token_file: {token_file}, max_body_bytes: 2048}}")
        # A declared counter without top: true (GET /v1/top of it is a 404).
        text = text.replace("    top: true\n", "    top: true\n  - {name: plain_counter, record_type: 124}\n")
        text = text.replace("flush: {interval: 200ms, max_retry_backoff: 1s}",
                            "flush: {interval: 200ms, max_retry_backoff: 1s, max_pending_keys: 20}")
        with open(conf_b, "w") as f:
            f.write(text)
        ctx.a = Daemon(ctx.daemon, conf_a, os.path.join(ctx.tmp, "a.log"))
        ctx.b = Daemon(ctx.daemon, conf_b, os.path.join(ctx.tmp, "b.log"))
        ctx.a.start()
        ctx.b.start()
        ctx.a.wait_listening()
        ctx.b.wait_listening()
        wait_for("both daemons ready", lambda: request(ctx.a.port, "GET", "/readyz")[0] == 200
                 and request(ctx.b.port, "GET", "/readyz")[0] == 200, 30)
    except Failure as e:
        print(f"FAIL setup: {e}", flush=True)
        runner.failed += 1
    else:
        runner.run("README: the five-minute walkthrough", check_walkthrough, ctx)
        runner.run("clients: curl", check_curl, ctx)
        runner.run("clients: Python", check_python, ctx)
        runner.run("clients: PHP", check_php, ctx)
        runner.run("clients: Node", check_node, ctx)
        runner.run("clients: Ruby", check_ruby, ctx)
        runner.run("clients: NDJSON batches", check_batch, ctx)
        runner.run("clients: a token, a 503, no daemon: counted or dropped in bounded time, nothing raised",
                   check_clients_promises, ctx)
        runner.run("design.md: the schema --migrate creates", check_schema, ctx)
        runner.run("operations.md: every metric, its panel", check_metrics, ctx)
        runner.run("openapi.yaml: walked against the daemon", check_openapi, ctx)  # stops MariaDB
    finally:
        for part in (ctx.a, ctx.b):
            if part is not None:
                part.stop()
        if ctx.db is not None and not ctx.db_stopped:
            ctx.db.stop()
        shutil.rmtree(ctx.tmp, ignore_errors=True)
    print(f"{runner.passed} passed, {runner.failed} failed", flush=True)
    return 1 if runner.failed else 0


if __name__ == "__main__":
    sys.exit(main())
