#!/usr/bin/env python3
"""The image and the Kubernetes manifests, run for real under podman.

    python3 tests/container/container_test.py --source . [--cache DIR] [--deb FILE]

Builds the image with scripts/build-image (the .deb from scripts/build-package, the
debootstrap base cached in --cache, default /var/cache/slotted-counterd-image), then
runs it under podman 4.3 (runc, `kube play`) against a MariaDB on the host:
 1. the image: its user, entrypoint, default arguments, stop signal, volume; no compiler
    or test tool; the migrate Job's arguments after the image name run --migrate;
 2. replica 0 of the StatefulSet: POST and GET through the published port, its logs in
    `podman logs`, its ledger rows under its Pod name;
 3. `podman kill` under load, then `podman start`: the totals exact (every request
    carries an Idempotency-Key and is retried until answered);
 4. the daemon SIGKILLed under load, brought back by the restart policy: exact;
 5. `kube down` with increments the database (stopped) could not take, and play again:
    the WAL volume replays them, exact;
 6. the nginx sidecar example: downloads through nginx counted from the shared access
    log, not the 404 or the HEAD; the daemon SIGKILLed while nginx serves, restarted
    where its committed position says: exact;
 7. the sidecar Pod down and played again: a new emptyDir, its log counted from its
    start, the position under the Pod's name: exact.
How the manifests are made runnable here: tests/container/podman_harness.py.
Exits 77 (skipped, the reason printed) when not root or where containers cannot run.
Prints one line per check and ends with "N passed, M failed".
"""
import argparse
import http.client as httpclient
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ops"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "systemd"))
from ops_test import Failure, MariaDB, Runner, http, wait_for  # noqa: E402
from systemd_test import Reaper  # noqa: E402
import podman_harness as ph  # noqa: E402

DB_PASSWORD = "s3cret-counterd-pw"
ADMIN_PASSWORD = "s3cret-admin-pw"
RECORD_TYPE = 123  # repo_downloads, the manifests' example counter
TOOLS = ["cc", "gcc", "g++", "c++", "clang", "make", "cmake", "ctest", "gdb", "python3", "valgrind"]


class Ctx:
    pass


def total(ctx, record_id):
    r = ctx.db.sql(f"SELECT COALESCE(SUM(count), 0) FROM app.slotted_counters "
                   f"WHERE record_type = {RECORD_TYPE} AND record_id = {record_id}")
    if r.returncode != 0:
        raise Failure(f"reading the total failed: {r.stderr.decode()}")
    return int(r.stdout.decode().split()[-1])


def wait_total(ctx, record_id, expected, what, timeout=60):
    wait_for(f"{what}: a total of {expected} for record {record_id}", lambda: total(ctx, record_id) == expected,
             timeout, 0.3)
    time.sleep(1.5)  # one more flush interval: nothing more comes (a double count would)
    got = total(ctx, record_id)
    if got != expected:
        raise Failure(f"{what}: {got} for record {record_id}, expected {expected}")


class Load:
    """Single increments of one record from two threads, each request with its own
    Idempotency-Key and retried with it until answered 2xx: every request counts once,
    whatever happens to the daemon meanwhile. Bounded: at most `limit` requests."""

    def __init__(self, port, record_id, limit=4000):
        self.port, self.record_id, self.limit = port, record_id, limit
        self.sent = self.retries = 0
        self.lock = threading.Lock()
        self.stop_flag = threading.Event()
        self.errors = []
        self.threads = [threading.Thread(target=self.worker, daemon=True) for _ in range(2)]

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def post(self, conn, key):
        body = f'{{"record_type": {RECORD_TYPE}, "record_id": {self.record_id}, "delta": 1}}'
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if conn[0] is None:
                    conn[0] = httpclient.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn[0].request("POST", "/v1/increments", body=body,
                                headers={"Content-Type": "application/json", "Idempotency-Key": key})
                r = conn[0].getresponse()
                r.read()
                if 200 <= r.status < 300:
                    return
                if r.status not in (502, 503, 504):
                    raise Failure(f"POST answered {r.status}")
            except (OSError, httpclient.HTTPException):
                conn[0] = None
            with self.lock:
                self.retries += 1
            time.sleep(0.05)
        raise Failure("a request was not answered 2xx within 90 s")

    def worker(self):
        conn = [None]
        try:
            while not self.stop_flag.is_set():
                with self.lock:
                    if self.sent >= self.limit:
                        return
                    self.sent += 1
                self.post(conn, uuid.uuid4().hex)
                time.sleep(0.004)
        except Failure as e:
            self.errors.append(str(e))

    def wait_sent(self, n, timeout=30):
        wait_for(f"{n} requests sent", lambda: self.sent >= n or self.errors, timeout, 0.05)

    def finish(self):
        self.stop_flag.set()
        for t in self.threads:
            t.join(120)
        if self.errors:
            raise Failure(f"load: {self.errors[0]}")
        return self.sent


# --------------------------------------------------------------------------- checks


def check_image(ctx):
    p, img = ctx.podman, ctx.image
    c = json.loads(p.out("image", "inspect", "--format", "{{json .Config}}", img))
    want = {"User": "10001:10001", "Entrypoint": ["/usr/bin/tini", "--", "/usr/bin/slotted-counterd"],
            "Cmd": ["--config", "/etc/slotted-counterd/slotted-counterd.yaml"], "StopSignal": "15"}
    wrong = {k: c.get(k) for k, v in want.items() if c.get(k) != v}
    if wrong or "/var/lib/slotted-counterd" not in c.get("Volumes", {}):
        raise Failure(f"image config {wrong or c.get('Volumes')}, expected {want} and the WAL volume")
    if p.out("image", "inspect", "--format", "{{.Id}}", "localhost/slotted-counterd:latest") != \
            p.out("image", "inspect", "--format", "{{.Id}}", img):
        raise Failure(":latest is not the image just built")
    version = p.out("run", "--rm", "--pull=never", img, "--version")
    if version != f"slotted-counterd {ctx.version}":
        raise Failure(f"--version printed {version!r}")
    found = p.out("run", "--rm", "--pull=never", "--entrypoint", "/bin/sh", img, "-c",
                  "for t in " + " ".join(TOOLS) + "; do command -v $t; done; true")
    if found:
        raise Failure(f"the image holds {found.split()}")
    size = int(p.out("image", "inspect", "--format", "{{.Size}}", img))
    ctx.image_size = size
    return f"{img}: user 10001, tini, --config default, SIGTERM, WAL volume; {size / 1e6:.0f} MB; no {', '.join(TOOLS)}"


def check_migrate(ctx):
    """The migrate Job's own arguments, given after the image name."""
    job = ph.load_docs(os.path.join(ctx.k8s, "migrate-job.yaml"))[0]
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    cm = ph.load_docs(os.path.join(ctx.k8s, "configmap.yaml"))[0]
    cfg_dir, adm_dir = os.path.join(ctx.tmp, "migrate-config"), os.path.join(ctx.tmp, "migrate-admin")
    os.makedirs(cfg_dir)
    os.makedirs(adm_dir)
    with open(os.path.join(cfg_dir, "slotted-counterd.yaml"), "w") as f:
        f.write(ph.test_config(cm["data"]["slotted-counterd.yaml"]))
    with open(os.path.join(adm_dir, "password"), "w") as f:
        f.write(ADMIN_PASSWORD + "\n")
    for d in (cfg_dir, adm_dir):
        os.chmod(d, 0o755)
        for n in os.listdir(d):
            os.chmod(os.path.join(d, n), 0o644)
    # As the Job's securityContext has it, and with no volume at the image's VOLUME (a
    # cluster mounts none there).
    r = ctx.podman.run("run", "--rm", "--pull=never", "--read-only", "--image-volume", "ignore",
                       "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
                       "-v", f"{cfg_dir}:/etc/slotted-counterd:ro",
                       "-v", f"{adm_dir}:/run/secrets/slotted-counterd-admin:ro",
                       "-v", f"{ctx.db.dir}:{ph.DB_MOUNT}", ctx.image, *args, check=False)
    text = (r.stdout + r.stderr).decode(errors="replace")
    if r.returncode != 0 or "migrated" not in text:
        raise Failure(f"podman run IMAGE {' '.join(args)} exited {r.returncode}: {ph.noise_free(text)[-1500:]}")
    return f"podman run IMAGE {' '.join(args[2:])}: tables created"


def play_statefulset(ctx):
    sts = ph.load_docs(os.path.join(ctx.k8s, "statefulset.yaml"))[0]
    ctx.sts_pod, pod = ctx.variant.statefulset_pod(sts, {"http": ctx.sts_port})
    ctx.sts_yaml = ph.write_yaml(os.path.join(ctx.tmp, "statefulset-pod.yaml"),
                                 ctx.variant.configmaps(ph.load_docs(os.path.join(ctx.k8s, "configmap.yaml"))) + [pod])
    for claim in ctx.variant.claims:
        ctx.podman.claim_volume(claim, ctx.image, pod["spec"]["securityContext"]["fsGroup"])
    ctx.podman.run("kube", "play", ctx.sts_yaml)
    ctx.sts_ctr = f"{ctx.sts_pod}-slotted-counterd"
    wait_ready(ctx.sts_port, f"{ctx.sts_pod} to be ready")


def wait_ready(port, what, timeout=60):
    wait_for(what, lambda: http("GET", f"http://127.0.0.1:{port}/readyz", timeout=2)[0] == 200, timeout, 0.2)


def check_statefulset(ctx):
    play_statefulset(ctx)
    url = f"http://127.0.0.1:{ctx.sts_port}"
    for delta in (3, 4):
        st, body, _ = http("POST", f"{url}/v1/increments", f'{{"record_type": {RECORD_TYPE}, "record_id": 1, '
                           f'"delta": {delta}}}', "application/json")
        if st != 202:
            raise Failure(f"POST answered {st} {body!r}")
    wait_for("the GET to say 7 persisted",
             lambda: b'"persisted": 7' in http("GET", f"{url}/v1/counters/{RECORD_TYPE}/1")[1], 20, 0.2)
    ids = ctx.db.sql("SELECT DISTINCT instance_id FROM app.slotted_counterd_ledger").stdout.decode().split()[1:]
    if ids != [ctx.sts_pod]:
        raise Failure(f"ledger rows under {ids}, expected the Pod's name {ctx.sts_pod} (its host name "
                      "is slotted-test-host)")
    r = ctx.podman.run("logs", ctx.sts_ctr)
    logs = (r.stdout + r.stderr).decode(errors="replace")
    if f"listening on 0.0.0.0:8080 (instance {ctx.sts_pod}" not in logs:
        raise Failure(f"podman logs has no 'listening' line naming the instance: {logs[-800:]}")
    total_ok = total(ctx, 1)
    if total_ok != 7:
        raise Failure(f"the table holds {total_ok}, expected 7")
    return (f"{ctx.sts_pod}: POST and GET on 127.0.0.1:{ctx.sts_port}; ledger and log name the Pod "
            "(from the downward API: its host name is another)")


def under_load(ctx, record_id, disrupt, what):
    """disrupt() while the load runs; the daemon back, more load; then the total exact."""
    load = Load(ctx.sts_port, record_id).start()
    load.wait_sent(300)
    disrupt()
    wait_ready(ctx.sts_port, f"the daemon to be ready again after {what}")
    load.wait_sent(load.sent + 300)
    sent = load.finish()
    wait_total(ctx, record_id, sent, f"after {what}")
    return f"{sent} requests ({load.retries} retries) across {what}: exact"


def check_kill_and_start(ctx):
    """podman kill (SIGKILL, no restart: podman stopped it) and start again."""
    def disrupt():
        ctx.podman.run("kill", ctx.sts_ctr)
        # kube play's Pods have the exit policy "stop": the Pod stops with its last
        # container (a start before that is stopped again).
        wait_for("the Pod to stop with its container",
                 lambda: ctx.podman.out("pod", "inspect", "--format", "{{.State}}", ctx.sts_pod) == "Exited", 30, 0.2)
        ctx.podman.run("pod", "start", ctx.sts_pod)
    return under_load(ctx, 2, disrupt, "podman kill and pod start")


def check_crash_restart(ctx):
    def restarts():
        return int(ctx.podman.out("inspect", "--format", "{{.RestartCount}}", ctx.sts_ctr))

    def disrupt():
        before = restarts()
        os.kill(ctx.podman.daemon_pid(ctx.sts_ctr), signal.SIGKILL)
        wait_for("the restart policy to restart the daemon", lambda: restarts() > before, 30, 0.2)
    return under_load(ctx, 3, disrupt, "a SIGKILL of the daemon and the restart policy")


def check_down_and_play(ctx):
    """Increments only the WAL holds (the database stopped) survive kube down and play."""
    before = total(ctx, 4)
    ctx.db.stop()
    url = f"http://127.0.0.1:{ctx.sts_port}/v1/increments"
    try:
        for _ in range(50):
            st, body, _ = http("POST", url, f'{{"record_type": {RECORD_TYPE}, "record_id": 4, "delta": 2}}',
                               "application/json")
            if st != 202:
                raise Failure(f"POST with the database down answered {st} {body!r}")
        t0 = time.monotonic()
        ctx.podman.run("kube", "down", ctx.sts_yaml)
        down_s = time.monotonic() - t0
        if ctx.podman.run("volume", "exists", f"wal-{ctx.sts_pod}", check=False).returncode != 0:
            raise Failure(f"kube down removed the WAL volume wal-{ctx.sts_pod}")
    finally:
        ctx.db.start()
        ctx.reaper.add("kill", [ctx.db.proc.pid, ctx.db.datadir])
        ctx.db.wait_up()
    ctx.podman.run("kube", "play", ctx.sts_yaml)
    wait_ready(ctx.sts_port, "the Pod played again to be ready")
    wait_total(ctx, 4, before + 100, "after kube down and play")
    return f"100 increments held only by the WAL: kube down ({down_s:.1f}s), play again, replayed: exact"


def play_sidecar(ctx):
    docs = ctx.variant.configmaps(ph.load_docs(os.path.join(ctx.k8s, "sidecar", "configmap.yaml")))
    dep = ph.load_docs(os.path.join(ctx.k8s, "sidecar", "deployment.yaml"))[0]
    ctx.web_pod, dep = ctx.variant.deployment(dep, {"web": ctx.web_port, "counterd": ctx.web_counterd_port},
                                              {"nginx": ctx.nginx_image})
    ctx.web_yaml = ph.write_yaml(os.path.join(ctx.tmp, "sidecar.yaml"), docs + [dep])
    ctx.podman.run("kube", "play", ctx.web_yaml)
    wait_ready(ctx.web_counterd_port, f"{ctx.web_pod}'s sidecar to be ready")
    wait_for("nginx to answer", lambda: http("GET", f"http://127.0.0.1:{ctx.web_port}/", timeout=2)[0] in (200, 403, 404),
             30, 0.2)


def downloads(ctx, plan):
    """GETs through nginx: plan is {record_id: count}; a 404 and a HEAD besides."""
    for rid, n in plan.items():
        for _ in range(n):
            st = http("GET", f"http://127.0.0.1:{ctx.web_port}/downloads/{rid}/pkg.tar.gz")[0]
            if st != 200:
                raise Failure(f"nginx answered {st} for /downloads/{rid}/pkg.tar.gz")
            ctx.downloaded[rid] = ctx.downloaded.get(rid, 0) + 1
    if http("GET", f"http://127.0.0.1:{ctx.web_port}/downloads/9/missing")[0] != 404:
        raise Failure("nginx did not answer 404 for a missing download")
    http("HEAD", f"http://127.0.0.1:{ctx.web_port}/downloads/1/pkg.tar.gz")


def check_sidecar(ctx):
    ctx.nginx_image, how = ph.nginx_image(ctx.podman, ctx.image, ctx.tmp)
    play_sidecar(ctx)
    ctx.downloaded = {}
    base = {rid: total(ctx, rid) for rid in ph.DOWNLOAD_IDS}
    ctx.download_base = base
    downloads(ctx, {1: 5, 2: 3, 3: 1})
    for rid in ph.DOWNLOAD_IDS:
        wait_total(ctx, rid, base[rid] + ctx.downloaded[rid], "downloads through nginx")
    return f"{ctx.web_pod}: {sum(ctx.downloaded.values())} downloads counted from the shared log, not the 404 or HEAD; nginx image {how}"


def check_sidecar_crash(ctx):
    stop = threading.Event()
    errors = []

    def serve():
        try:
            while not stop.is_set():
                downloads(ctx, {2: 1})
                time.sleep(0.01)
        except Failure as e:
            errors.append(str(e))

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    ctr = f"{ctx.web_pod}-slotted-counterd"
    restarts = int(ctx.podman.out("inspect", "--format", "{{.RestartCount}}", ctr))
    time.sleep(2)
    os.kill(ctx.podman.daemon_pid(ctr), signal.SIGKILL)
    wait_for("the sidecar to be restarted",
             lambda: int(ctx.podman.out("inspect", "--format", "{{.RestartCount}}", ctr)) > restarts, 30, 0.2)
    wait_ready(ctx.web_counterd_port, "the restarted sidecar to be ready")
    time.sleep(2)
    stop.set()
    t.join(30)
    if errors:
        raise Failure(errors[0])
    wait_total(ctx, 2, ctx.download_base[2] + ctx.downloaded[2], "after the sidecar's SIGKILL")
    return f"{ctx.downloaded[2]} downloads of record 2 across a SIGKILL of the sidecar: read on from its position, exact"


def check_sidecar_down_and_play(ctx):
    ctx.podman.run("kube", "down", ctx.web_yaml)
    play_sidecar(ctx)
    downloads(ctx, {1: 2, 3: 4})
    for rid in ph.DOWNLOAD_IDS:
        wait_total(ctx, rid, ctx.download_base[rid] + ctx.downloaded[rid], "after the sidecar Pod down and up")
    rows = ctx.db.sql("SELECT instance_id, path FROM app.slotted_counterd_log_positions").stdout.decode().split("\n")
    rows = [r.split("\t") for r in rows[1:] if r]
    if rows != [[ctx.web_pod, "/var/log/nginx-counted/access.log"]]:
        raise Failure(f"positions {rows}, expected one row for the Pod {ctx.web_pod}")
    return f"a new emptyDir read from its start; one position row under {ctx.web_pod}; totals exact"


# --------------------------------------------------------------------------- main


def setup(ctx, args):
    if shutil.which("podman") is None:
        raise Failure("podman is not installed (scripts/install-deps)")
    t0 = time.monotonic()
    argv = [os.path.join(ctx.source, "scripts", "build-image"), "--cache", args.cache]
    r = subprocess.run(argv + (["--deb", args.deb] if args.deb else []), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        raise Failure(f"scripts/build-image exited {r.returncode}:\n{r.stderr.decode(errors='replace')[-3000:]}")
    ctx.image = r.stdout.decode().split()[-1]
    size_line = [line for line in r.stderr.decode().splitlines() if " MB (" in line]
    ctx.image_line = size_line[-1] if size_line else ""
    return f"{ctx.image} built in {time.monotonic() - t0:.0f}s ({ctx.image_line.split(': ', 2)[-1]})"


def probe(ctx):
    """None when a container runs here, else why not."""
    r = ctx.podman.run("run", "--rm", "--pull=never", "--entrypoint", "/bin/true", ctx.image, check=False, timeout=120)
    return None if r.returncode == 0 else ph.noise_free(r.stderr.decode(errors="replace")).strip()[-800:]


def start_db(ctx):
    ctx.db = MariaDB(ctx.tmp)
    ctx.db.install()
    ctx.db.start()
    ctx.reaper.add("kill", [ctx.db.proc.pid, ctx.db.datadir])
    ctx.db.wait_up()
    os.chmod(ctx.db.dir, 0o755)  # the container's user reaches the socket through it
    r = ctx.db.sql(f"CREATE DATABASE app; CREATE USER 'counterd'@'localhost' IDENTIFIED BY '{DB_PASSWORD}'; "
                   "GRANT SELECT, INSERT, UPDATE, DELETE ON app.* TO 'counterd'@'localhost'; "
                   f"CREATE USER 'counterd_admin'@'localhost' IDENTIFIED BY '{ADMIN_PASSWORD}'; "
                   "GRANT ALL ON app.* TO 'counterd_admin'@'localhost'")
    if r.returncode != 0:
        raise Failure(f"creating the accounts failed: {r.stderr.decode()}")


def prepare(ctx):
    start_db(ctx)
    secret = ph.load_docs(os.path.join(ctx.k8s, "secret.yaml"))[0]
    ph.create_secret(ctx.podman, dict(secret, stringData={"db-password": DB_PASSWORD}), ctx.podman.prefix)
    return check_migrate(ctx)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", required=True)
    ap.add_argument("--cache", default=os.environ.get("SLOTTED_IMAGE_CACHE", "/var/cache/slotted-counterd-image"))
    ap.add_argument("--deb", help="this package, not scripts/build-package's")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("SKIP: needs root (podman kube play with published ports, debootstrap)")
        return 77
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ctx = Ctx()
    ctx.source = os.path.abspath(args.source)
    ctx.k8s = os.path.join(ctx.source, "deploy", "kubernetes")
    with open(os.path.join(ctx.source, "CMakeLists.txt")) as f:
        ctx.version = re.search(r"project\(slotted-counterd VERSION ([0-9.]+)", f.read()).group(1)
    ctx.tmp = tempfile.mkdtemp(prefix=f"slotted-container-test-{os.getpid()}.")
    os.chmod(ctx.tmp, 0o755)
    prefix = ph.run_prefix(os.getpid())
    ctx.podman = ph.Podman(ctx.tmp, prefix)
    # Should this run be killed, its MariaDB and temp dir go at once, its Pods, volumes
    # and secrets at the next run.
    ctx.reaper = Reaper(ctx.tmp)
    ctx.podman.cleanup_stale()
    ctx.db = None
    runner, t_start = Runner(), time.monotonic()
    try:
        if not runner.run("setup: scripts/build-image", setup, ctx, args):
            return 1
        why = probe(ctx)
        if why:
            print(f"SKIP: containers cannot run on this machine: {why}")
            return 77
        runner.run("1. the image", check_image, ctx)
        ready = runner.run("database on the host; the Secret; migrate with the Job's arguments", prepare, ctx)
        ctx.sts_port, ctx.web_port, ctx.web_counterd_port = ph.free_ports("a", "b", "c").values()
        ctx.variant = ph.Variant(prefix, ctx.db.dir if ctx.db else "", ctx.image)
        if ready and runner.run("2. replica 0 of the StatefulSet", check_statefulset, ctx):
            runner.run("3. podman kill under load, podman start: exact", check_kill_and_start, ctx)
            runner.run("4. SIGKILL under load, the restart policy: exact", check_crash_restart, ctx)
            runner.run("5. kube down with the WAL holding increments, play again: exact", check_down_and_play, ctx)
        if ready and runner.run("6. the nginx sidecar counts downloads from the shared log", check_sidecar, ctx):
            runner.run("6b. the sidecar SIGKILLed while nginx serves: exact", check_sidecar_crash, ctx)
            runner.run("7. the sidecar Pod down and up: exact", check_sidecar_down_and_play, ctx)
    finally:
        if runner.failed:
            for name in (getattr(ctx, "sts_ctr", None), f"{getattr(ctx, 'web_pod', '')}-slotted-counterd"):
                if name:
                    r = ctx.podman.run("logs", "--tail", "30", name, check=False)
                    print(f"---- podman logs {name} ----\n{(r.stdout + r.stderr).decode(errors='replace')}")
        ctx.podman.cleanup()
        if ctx.db is not None:
            ctx.db.stop()
        shutil.rmtree(ctx.tmp, ignore_errors=True)
        ctx.reaper.done()
    size = f"; image {ctx.image_size / 1e6:.0f} MB" if hasattr(ctx, "image_size") else ""
    print(f"{runner.passed} passed, {runner.failed} failed ({time.monotonic() - t_start:.0f}s{size})")
    return 0 if runner.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
