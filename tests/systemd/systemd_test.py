#!/usr/bin/env python3
"""The Debian package under a real systemd 252 as PID 1.

    python3 tests/systemd/systemd_test.py --source . --build-dir build/asan/package-release \\
        --daemon build/asan/slotted-counterd

Builds the .deb with scripts/build-package (Release, prefix /usr, no tests), boots a
Debian 12 root with systemd as PID 1 in its own cgroup, PID, mount, UTS and IPC
namespaces (the network namespace is shared), installs the package there with apt and
checks, with the shipped unit unchanged: READY=1 and a dynamic user; the state directory
0700; the password through LoadCredential=; the final flush on stop; SIGKILL and
Restart=on-failure with the WAL; the watchdog; systemctl reload; the security exposure;
journald priorities; nginx's access log read through the shipped read-access-logs.conf
drop-in across the nginx package's logrotate file and a restart; purge. MariaDB runs on the host, on 127.0.0.1.

The Debian root comes from debootstrap (the mirror is read from this machine's apt
sources), cached read-only under --cache (default /var/cache/slotted-counterd-test) in
a directory named after everything that goes into it, and booted on a throwaway
overlay. Everything is torn down by pid; the namespaces die with this script even when
it is killed (a parent-death signal), so no mount outlives it.

Needs root, debootstrap, unshare, nsenter, setpriv, mariadbd. Exits 77 (skipped) when
not root. Prints one line per check and ends with "N passed, M failed".
"""

import argparse
import ctypes
import fcntl
import glob
import hashlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ops"))
from ops_test import MariaDB, Failure, Runner, exposure_within_limit, free_port, http, log, tail, wait_for  # noqa: E402

SUITE = "bookworm"
INCLUDE = "systemd,dbus"
# Bumped when the way the base root is made changes: the cache key changes with it.
RECIPE = "1"
UNIT = "slotted-counterd.service"
DB_PASSWORD = "s3cret-counterd-pw"
PR_SET_PDEATHSIG = 1

# Units that would touch the host (kernel tunables, modules, consoles, the host's
# devices) or do nothing useful in a test boot.
MASKED = [
    "systemd-sysctl.service", "systemd-modules-load.service", "systemd-binfmt.service",
    "proc-sys-fs-binfmt_misc.automount", "proc-sys-fs-binfmt_misc.mount",
    "getty@tty1.service", "console-getty.service", "getty.target", "serial-getty@.service",
    "systemd-remount-fs.service", "systemd-tmpfiles-setup-dev.service",
    "systemd-tmpfiles-setup-dev-early.service", "systemd-firstboot.service",
    "systemd-hwdb-update.service", "sys-kernel-config.mount", "sys-kernel-debug.mount",
    "sys-kernel-tracing.mount", "sys-fs-fuse-connections.mount", "dev-hugepages.mount",
    "dev-mqueue.mount", "systemd-journald-audit.socket", "apt-daily.timer",
    "apt-daily-upgrade.timer", "dpkg-db-backup.timer", "e2scrub_all.timer",
    "e2scrub_reap.service", "fstrim.timer", "systemd-logind.service",
]
# Capabilities the inner systemd must not have.
DROPPED_CAPS = ["sys_module", "sys_time", "syslog", "sys_rawio", "wake_alarm", "block_suspend",
                "mac_admin", "mac_override", "audit_control", "audit_read", "sys_pacct"]


# --------------------------------------------------------------------------- host side


def debian_mirror():
    """The Debian archive this machine's apt uses for SUITE (deb822 or one-line form)."""
    found = []
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        with open(path) as f:
            for stanza in re.split(r"\n\s*\n", f.read()):
                fields = {}
                for line in stanza.splitlines():
                    m = re.match(r"^([A-Za-z-]+):\s*(.*)$", line)
                    if m and not line.startswith("#"):
                        fields[m.group(1).lower()] = m.group(2).split()
                if ("deb" in fields.get("types", []) and SUITE in fields.get("suites", [])
                        and "no" not in fields.get("enabled", [])):
                    found += fields.get("uris", [])
    for path in ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list")):
        try:
            with open(path) as f:
                for line in f:
                    words = re.sub(r"\[[^]]*\]", "", line.split("#")[0]).split()
                    if len(words) >= 3 and words[0] == "deb" and words[2] == SUITE:
                        found.append(words[1])
        except OSError:
            pass
    if not found:
        raise Failure(f"no apt source for {SUITE} in /etc/apt/sources.list{{,.d/*}}")
    return found[0].rstrip("/")


def ensure_base_root(cache, mirror):
    """The cached debootstrap root for (suite, packages, mirror, recipe); made once."""
    key = hashlib.sha256(json.dumps([SUITE, "minbase", INCLUDE, mirror, RECIPE]).encode()).hexdigest()[:16]
    os.makedirs(cache, mode=0o700, exist_ok=True)
    base = os.path.join(cache, f"base-{key}")
    with open(os.path.join(cache, "lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one debootstrap at a time
        if os.path.exists(os.path.join(base, "complete")):
            return base, "cached"
        for stale in glob.glob(os.path.join(cache, "base-*")):
            log(f"removing stale base root {stale}")
            shutil.rmtree(stale, ignore_errors=True)
        tmp = base + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        t0 = time.monotonic()
        log(f"debootstrap {SUITE} from {mirror} (once per machine)")
        r = subprocess.run(["debootstrap", "--variant=minbase", f"--include={INCLUDE}", SUITE,
                            os.path.join(tmp, "root"), mirror],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
        if r.returncode != 0:
            raise Failure(f"debootstrap failed: {r.stdout.decode(errors='replace')[-2000:]}")
        with open(os.path.join(tmp, "complete"), "w") as f:
            f.write(f"{SUITE} {INCLUDE} {mirror} recipe {RECIPE}\n")
        os.rename(tmp, base)
        return base, f"built in {time.monotonic() - t0:.0f}s"


def cgroup2_mount():
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            sep = parts.index("-")
            if parts[sep + 1] == "cgroup2":
                return parts[4]
    raise Failure("no cgroup2 mount in /proc/self/mountinfo")


def remove_cgroup_tree(path):
    """rmdir, depth first; a cgroup with processes left in it stays (and is reported)."""
    for dirpath, dirnames, _ in sorted(os.walk(path), key=lambda w: -w[0].count("/")):
        try:
            os.rmdir(dirpath)
        except OSError:
            pass
    return not os.path.exists(path)


def pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def reap(parent, state_file):
    """Runs detached (--reap): once `parent` is gone, removes what it left behind when
    it was killed (SIGKILL skips its own teardown). The namespaces are already gone
    with it (parent-death signal); left are the cgroup tree, the directories and the
    MariaDB server, all listed in `state_file` as they come up."""
    try:
        fd = os.pidfd_open(parent)
        select.select([fd], [], [])
    except ProcessLookupError:
        pass
    except OSError:  # no pidfd: poll
        while pid_alive(parent):
            time.sleep(1)
    try:
        with open(state_file) as f:
            state = json.load(f)
    except (OSError, ValueError):
        return 0  # a finished run removes the file: nothing to do
    for pid, marker in state.get("kill", []):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():  # the same process, not a reused pid
                    os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + 60
    for cg in state.get("cgroups", []):
        while os.path.exists(cg) and not remove_cgroup_tree(cg) and time.monotonic() < deadline:
            time.sleep(0.5)
    for d in state.get("dirs", []):
        shutil.rmtree(d, ignore_errors=True)
    os.remove(state_file)
    return 0


class Reaper:
    """Tells the detached reaper what to remove should this process be killed."""

    def __init__(self, tmp):
        self.file = os.path.join(tempfile.gettempdir(), f"slotted-systemd-test-{os.getpid()}.reap.json")
        self.state = {"kill": [], "cgroups": [], "dirs": [tmp]}
        self.save()
        subprocess.Popen([sys.executable, os.path.abspath(__file__), "--reap", str(os.getpid()), self.file],
                         start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)

    def add(self, kind, value):
        self.state[kind].append(value)
        self.save()

    def save(self):
        with open(self.file + ".new", "w") as f:
            json.dump(self.state, f)
        os.rename(self.file + ".new", self.file)

    def done(self):
        os.remove(self.file)


def clean_leftovers(cg_root):
    """Cgroups and overlay directories of earlier runs that were killed."""
    for cg in glob.glob(os.path.join(cg_root, "slotted-systemd-test-*")):
        owner = int(cg.rsplit("-", 1)[1])
        if not pid_alive(owner):
            remove_cgroup_tree(cg)
    for d in glob.glob(os.path.join(tempfile.gettempdir(), "slotted-systemd-test-*")):
        try:
            owner = int(d.rsplit("-", 1)[1].split(".")[0])
        except ValueError:
            continue
        if not pid_alive(owner):
            shutil.rmtree(d, ignore_errors=True)


# The first process in the new namespaces (PID 1 there) sets the root up, then
# becomes systemd. pivot_root, not chroot: under chroot the kernel refuses the unit's
# user namespace (PrivateUsers=yes fails with 217/USER).
INNER = r"""
set -eu
R="$WORK/root"
mount -t overlay overlay -o "lowerdir=$BASE,upperdir=$WORK/upper,workdir=$WORK/work" "$R"
mount -t proc proc "$R/proc"
for p in sys sysrq-trigger; do
  [ -e "$R/proc/$p" ] || continue
  mount --bind "$R/proc/$p" "$R/proc/$p"
  mount -o remount,bind,ro "$R/proc/$p"
done
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$R/sys"
mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 "$R/sys/fs/cgroup"
mount -t tmpfs -o mode=755,size=16m,nosuid tmpfs "$R/dev"
for d in null zero full random urandom tty; do
  touch "$R/dev/$d"
  mount --bind "/dev/$d" "$R/dev/$d"
done
mkdir "$R/dev/pts" "$R/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=620,nosuid,noexec devpts "$R/dev/pts"
ln -s pts/ptmx "$R/dev/ptmx"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$R/dev/shm"
mount -t tmpfs -o mode=755,nosuid,nodev,size=64m tmpfs "$R/run"
hostname slotted-test
cd "$R"
mkdir -p .oldroot
pivot_root . .oldroot
umount -l /.oldroot
rmdir /.oldroot
# systemd leaves mount propagation to a container manager: shared, as on a host, so
# that the mounts it moves into place (credentials) reach the services.
mount --make-rshared /
exec /usr/bin/env -i container=slotted-test PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  /usr/bin/setpriv --bounding-set "$DROP" /lib/systemd/systemd --system
"""


class Machine:
    """A booted Debian root; run() executes a command inside it."""

    def __init__(self, base, cg_root):
        self.base = os.path.join(base, "root")
        self.work = tempfile.mkdtemp(prefix=f"slotted-systemd-test-{os.getpid()}.")
        for d in ("upper", "work", "root"):
            os.mkdir(os.path.join(self.work, d))
        self.cgroup = os.path.join(cg_root, f"slotted-systemd-test-{os.getpid()}")
        self.console = os.path.join(self.work, "console.log")
        self.proc = None
        self.pid1 = None

    def prepare(self):
        """Masks the units that touch the host (in the overlay's upper layer)."""
        etc = os.path.join(self.work, "upper", "etc", "systemd", "system")
        os.makedirs(etc)
        for unit in MASKED:
            os.symlink("/dev/null", os.path.join(etc, unit))

    def boot(self):
        os.mkdir(self.cgroup)
        cgroup_procs = os.path.join(self.cgroup, "cgroup.procs")
        libc = ctypes.CDLL(None, use_errno=True)

        def in_own_cgroup():
            # The new cgroup namespace's root is the cgroup this process is in.
            with open(cgroup_procs, "w") as f:
                f.write(str(os.getpid()))
            # If this script dies, so does unshare, and with it (--kill-child) PID 1.
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "WORK": self.work, "BASE": self.base,
               "DROP": ",".join("-" + c for c in DROPPED_CAPS)}
        with open(self.console, "wb") as out:
            self.proc = subprocess.Popen(
                ["unshare", "--cgroup", "--pid", "--fork", "--mount", "--uts", "--ipc",
                 "--propagation", "private", "--kill-child=SIGKILL", "/bin/sh", "-c", INNER],
                env=env, preexec_fn=in_own_cgroup, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT)

        def child():
            if self.proc.poll() is not None:
                return -1
            with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
                kids = f.read().split()
            if not kids:
                return None
            with open(f"/proc/{kids[0]}/comm") as f:
                return int(kids[0]) if f.read().strip() == "systemd" else None
        self.pid1 = wait_for("systemd to be PID 1", child, 30, interval=0.05)
        if self.pid1 == -1:
            self.pid1 = None
            raise Failure(f"unshare exited {self.proc.returncode}:\n{tail(self.console, 30)}")
        state = wait_for("systemd to finish booting", self._booted, 120, interval=0.5)
        if state == "dead":
            raise Failure(f"the machine died while booting:\n{tail(self.console, 30)}")
        if state == "degraded":
            failed = self.run(["systemctl", "--failed", "--no-legend"], check=False).stdout.strip()
            state += f" ({failed})"
        return state

    def _booted(self):
        r = self.run(["systemctl", "is-system-running"], check=False, timeout=10)
        state = r.stdout.strip()
        if state in ("running", "degraded"):
            return state
        if self.proc.poll() is not None:
            return "dead"
        return None

    def run(self, argv, check=True, timeout=120, input=None):
        """Runs argv in the machine's namespaces, with a clean environment."""
        cmd = ["nsenter", "-t", str(self.pid1), "-m", "-u", "-i", "-p", "-C", "--",
               "/usr/bin/env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8",
               "DEBIAN_FRONTEND=noninteractive", "SYSTEMD_PAGER=", "SYSTEMD_COLORS=0"] + argv
        r = subprocess.run(cmd, input=input, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout, text=input is None or isinstance(input, str))
        if check and r.returncode != 0:
            raise Failure(f"{' '.join(argv)} exited {r.returncode}: {r.stdout[-1500:]!s}{r.stderr[-1500:]!s}")
        return r

    def sh(self, script, **kw):
        return self.run(["/bin/sh", "-c", script], **kw)

    def write(self, path, data, mode="0644"):
        self.run(["/bin/sh", "-c", f'umask 077; cat > "{path}" && chmod {mode} "{path}"'], input=data)

    def show(self, prop):
        return self.run(["systemctl", "show", "-P", prop, UNIT]).stdout.strip()

    def teardown(self):
        """SIGRTMIN+4 asks systemd to power off; SIGKILL to PID 1 if it does not."""
        problems = []
        if self.proc is not None and self.proc.poll() is None:
            if self.pid1 and pid_alive(self.pid1):
                os.kill(self.pid1, signal.SIGRTMIN + 4)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                problems.append("systemd did not power off within 60s; killed")
                if self.pid1:
                    try:
                        os.kill(self.pid1, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                self.proc.wait(timeout=30)
        # The PID namespace is gone with its PID 1, the mount namespace with it; the
        # kernel may take a moment to let go of the cgroups.
        try:
            wait_for("the machine's cgroup to go", lambda: remove_cgroup_tree(self.cgroup), 30, interval=0.2)
        except Failure as e:
            problems.append(str(e))
        with open("/proc/self/mountinfo") as f:
            if self.work in f.read():
                problems.append(f"mounts under {self.work} are left on the host")
        shutil.rmtree(self.work, ignore_errors=True)
        return problems


# --------------------------------------------------------------------------- checks


class Ctx:
    pass


def base_url(ctx):
    return f"http://127.0.0.1:{ctx.port}"


def daemon_config(ctx, level="info", extra=""):
    return f"""# written by tests/systemd/systemd_test.py
instance_id: systemd-test
listen: {{address: 127.0.0.1, port: {ctx.port}}}
http: {{threads: 2}}
mysql:
  host: 127.0.0.1
  port: {ctx.db.port}
  user: counterd
  password_file: /run/credentials/slotted-counterd.service/db-password
  database: app
  connect_timeout: 2s
accept_undeclared_types: true
flush: {{interval: 1h, max_retry_backoff: 1s}}
wal: {{dir: /var/lib/slotted-counterd, fsync: always}}
shutdown_timeout: 20s
log: {{level: {level}}}
{extra}"""


def post_increments(ctx, items):
    body = "\n".join(json.dumps({"record_type": t, "record_id": i, "delta": d}) for t, i, d in items)
    status, payload, _ = http("POST", base_url(ctx) + "/v1/increments", body, "application/x-ndjson")
    return status


def table_totals(ctx):
    r = ctx.db.sql("SELECT record_type, record_id, SUM(count) FROM app.slotted_counters "
                   "GROUP BY record_type, record_id")
    if r.returncode != 0:
        raise Failure(f"reading the table failed: {r.stderr.decode(errors='replace')}")
    totals = {}
    for line in r.stdout.decode().splitlines()[1:]:
        t, i, c = line.split("\t")
        totals[(int(t), int(i))] = int(c)
    return totals


def expect_exact(ctx, acknowledged, uncertain=None):
    """The table holds every acknowledged increment once. `uncertain`: per key, the
    deltas of requests that got no answer (the connection died with the daemon); each
    may or may not have been applied, as a client must assume."""
    uncertain = uncertain or {}
    totals = table_totals(ctx)
    bad = {}
    for k in set(acknowledged) | set(totals):
        got, want = totals.get(k, 0), acknowledged.get(k, 0)
        if not (want <= got <= want + uncertain.get(k, 0)):
            bad[k] = (want, got)
    if bad:
        raise Failure(f"table differs from the acknowledged sums at {len(bad)} keys, e.g. "
                      f"{list(bad.items())[:5]} (key: (acknowledged, table))")
    extra = sum(totals.values()) - sum(acknowledged.values())
    return sum(acknowledged.values()), extra


def check_install(ctx):
    m = ctx.machine
    m.write(f"/root/{os.path.basename(ctx.deb)}", open(ctx.deb, "rb").read())
    t0 = time.monotonic()
    m.run(["apt-get", "update", "-qq"], timeout=300)
    m.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", f"/root/{os.path.basename(ctx.deb)}"],
          timeout=600)
    took = time.monotonic() - t0
    enabled = m.run(["systemctl", "is-enabled", UNIT], check=False).stdout.strip()
    active = m.run(["systemctl", "is-active", UNIT], check=False).stdout.strip()
    if enabled != "enabled" or active != "inactive":
        raise Failure(f"after install the unit is {enabled}/{active}; expected enabled/inactive "
                      "(not started: no database password yet)")
    conffiles = m.run(["dpkg-query", "-W", "-f=${Conffiles}", "slotted-counterd"]).stdout
    if "/etc/slotted-counterd/slotted-counterd.yaml" not in conffiles:
        raise Failure(f"the config is not a conffile: {conffiles!r}")
    for f in ("/usr/bin/slotted-counterd", "/usr/lib/systemd/system/slotted-counterd.service",
              "/usr/share/man/man8/slotted-counterd.8.gz", "/usr/share/man/man5/slotted-counterd.yaml.5.gz",
              "/usr/share/doc/slotted-counterd/README.md", "/usr/share/doc/slotted-counterd/docs/install.md",
              "/usr/share/doc/slotted-counterd/examples/slotted-counterd.json"):
        if m.run(["test", "-e", f], check=False).returncode != 0:
            raise Failure(f"{f} is missing after install")
    m.run(["/usr/bin/slotted-counterd", "--config", "/etc/slotted-counterd/slotted-counterd.yaml",
           "--check-config"])
    return f"apt-get update + install in {took:.0f}s; enabled, not started; conffile; man page"


def check_conffile_starts(ctx):
    """The installed conffile starts on a fresh database with only the operator's edits
    (docs/production.md): the database's port, the credential and a fresh database set,
    the listen port a free one (this machine shares the host's network); --migrate from a
    shell as an administrator given on the command line; the printed GRANTs; start;
    ready; it counts. The conffile is put back afterwards."""
    m = ctx.machine
    conf = "/etc/slotted-counterd/slotted-counterd.yaml"
    original = m.run(["cat", conf]).stdout
    edited = original
    for old, new in (("\n  port: 8080\n", f"\n  port: {ctx.port}\n"),
                     ("\n  port: 3306\n", f"\n  port: {ctx.db.port}\n"),
                     ('\n  password_file: ""',
                      "\n  password_file: /run/credentials/slotted-counterd.service/db-password"),
                     ("\n  database: app", "\n  database: conffile_db")):
        if edited.count(old) != 1:
            raise Failure(f"the installed conffile has not exactly one {old.strip()!r}")
        edited = edited.replace(old, new)
    admin_pw = "s3cret-admin-pw"
    r = ctx.db.sql("CREATE DATABASE conffile_db; "
                   f"CREATE USER 'cfadmin'@'127.0.0.1' IDENTIFIED BY '{admin_pw}'; "
                   "GRANT ALL ON conffile_db.* TO 'cfadmin'@'127.0.0.1'")
    if r.returncode != 0:
        raise Failure(f"creating the admin user failed: {r.stderr.decode()}")
    m.write(conf, edited)
    m.write("/root/db-admin-password", admin_pw + "\n", mode="0600")
    m.write("/etc/slotted-counterd/db-password", DB_PASSWORD + "\n", mode="0600")
    try:
        m.run(["/usr/bin/slotted-counterd", "--config", conf, "--migrate",
               "--mysql-user", "cfadmin", "--mysql-password-file", "/root/db-admin-password"])
        grants = m.run(["/usr/bin/slotted-counterd", "--config", conf, "--print-grants",
                        "--grant-host", "127.0.0.1"]).stdout
        r = ctx.db.sql(grants)
        if r.returncode != 0:
            raise Failure(f"the printed GRANTs failed: {r.stderr.decode()}\n{grants}")
        m.run(["systemctl", "start", UNIT], timeout=60)
        wait_for("/readyz 200 with the conffile", lambda: http("GET", base_url(ctx) + "/readyz", timeout=2)[0] == 200,
                 20, interval=0.2)
        status = post_increments(ctx, [(123, 1, 3)])
        if status != 202:
            raise Failure(f"POST of the example counter answered {status}")

        def counted():
            r = ctx.db.sql("SELECT COALESCE(SUM(count), 0) FROM conffile_db.slotted_counters")
            return r.returncode == 0 and r.stdout.decode().split()[-1] == "3"
        wait_for("the increment in conffile_db.slotted_counters", counted, 20, interval=0.2)
        if "denied" in journal(ctx):
            raise Failure(f"a permission error in the journal:\n{journal(ctx)[-1500:]}")
    finally:
        m.run(["systemctl", "stop", UNIT], check=False, timeout=60)
        m.write(conf, original)
    return (f"conffile + port/credential/database edits: --migrate as admin from a shell, "
            f"{len(grants.splitlines())} printed GRANTs, ready, counting")


def configure(ctx, level="info"):
    ctx.machine.write("/etc/slotted-counterd/slotted-counterd.yaml", daemon_config(ctx, level))


def check_start(ctx):
    m = ctx.machine
    m.write("/etc/slotted-counterd/db-password", DB_PASSWORD + "\n", mode="0600")
    configure(ctx)
    m.run(["systemctl", "start", UNIT], timeout=60)
    # Type=notify: start returned after READY=1, which is sent once listening.
    status, _, _ = http("GET", base_url(ctx) + "/healthz", timeout=2)
    if status != 200:
        raise Failure(f"/healthz answered {status} right after systemctl start returned")
    pid = m.show("MainPID")
    uid = m.sh(f"awk '/^Uid:/ {{print $2}}' /proc/{pid}/status").stdout.strip()
    user = m.show("User")
    if not uid or uid == "0":
        raise Failure(f"the daemon runs as uid {uid!r}")
    mode = m.run(["stat", "-L", "-c", "%a %U", "/var/lib/slotted-counterd"]).stdout.split()
    if mode[0] != "700":
        raise Failure(f"/var/lib/slotted-counterd is {mode[0]}, expected 700")
    return f"READY before start returned; MainPID {pid} uid {uid} (dynamic, User={user or 'dynamic'}); state dir 0700"


def check_credential(ctx):
    # The MariaDB user has a password; a reachable database means it arrived.
    wait_for("/readyz 200 (database reached with the credential)",
             lambda: http("GET", base_url(ctx) + "/readyz", timeout=2)[0] == 200, 20, interval=0.2)
    r = ctx.machine.run(["test", "-e", "/run/credentials/slotted-counterd.service/db-password"], check=False)
    if r.returncode != 0:
        raise Failure("no credential in /run/credentials/slotted-counterd.service")
    return "LoadCredential=db-password reached the daemon; /readyz 200 against a password-protected user"


def check_stop_flushes(ctx):
    m = ctx.machine
    items = [(5, i, i % 7 + 1) for i in range(1, 2001)]
    for chunk in range(0, len(items), 500):
        if post_increments(ctx, items[chunk:chunk + 500]) != 202:
            raise Failure("increments were not accepted")
    for t, i, d in items:
        ctx.acknowledged[(t, i)] = ctx.acknowledged.get((t, i), 0) + d
    if table_totals(ctx):
        raise Failure("rows were flushed before the stop (flush.interval is 1h)")
    t0 = time.monotonic()
    m.run(["systemctl", "stop", UNIT], timeout=90)
    took = time.monotonic() - t0
    result, code = m.show("Result"), m.show("ExecMainStatus")
    if result != "success" or code != "0":
        raise Failure(f"stop ended with Result={result} ExecMainStatus={code}")
    if took > 20:
        raise Failure(f"systemctl stop took {took:.1f}s (TimeoutStopSec=45s)")
    total, _ = expect_exact(ctx, ctx.acknowledged)
    return f"stop took {took:.1f}s, exit 0; {len(items)} counters, total {total}, exactly in the table"


def check_sigkill_restart(ctx):
    m = ctx.machine
    m.run(["systemctl", "start", UNIT], timeout=60)
    restarts0 = int(m.show("NRestarts"))
    pid0 = m.show("MainPID")
    lock = threading.Lock()
    stop = threading.Event()
    errors = []

    def client(n):
        i = 0
        while not stop.is_set():
            i += 1
            key = (6, n * 1_000_000 + i % 300)
            try:
                status = post_increments(ctx, [(key[0], key[1], 1)])
            except Exception:  # noqa: BLE001 - refused while the daemon is down
                status = 0
            if status == 202:
                with lock:
                    ctx.acknowledged[key] = ctx.acknowledged.get(key, 0) + 1
            elif status == 0:
                with lock:
                    ctx.uncertain[key] = ctx.uncertain.get(key, 0) + 1
            elif status not in (0, 503):  # 0: refused while it was down
                errors.append(status)
            if status != 202:
                time.sleep(0.05)
    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(4)]
    for t in threads:
        t.start()
    try:
        wait_for("acknowledged load", lambda: sum(1 for k in ctx.acknowledged if k[0] == 6) >= 300, 30)
        m.run(["systemctl", "kill", "-s", "SIGKILL", UNIT])
        wait_for("Restart=on-failure to bring it back",
                 lambda: int(m.show("NRestarts")) > restarts0 and m.show("ActiveState") == "active", 60,
                 interval=0.2)
        with lock:
            at_restart = sum(ctx.acknowledged.values())
        wait_for("increments acknowledged by the restarted daemon",
                 lambda: sum(ctx.acknowledged.values()) > at_restart + 100, 30)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)
    if errors:
        raise Failure(f"unexpected answers during the kill: {sorted(set(errors))}")
    status, body, _ = http("POST", base_url(ctx) + "/v1/flush", timeout=30)
    if status != 200:
        raise Failure(f"POST /v1/flush after the restart answered {status}: {body[:300]}")
    total, extra = expect_exact(ctx, ctx.acknowledged, ctx.uncertain)
    return (f"SIGKILLed MainPID {pid0}, restarted as {m.show('MainPID')}; every acknowledged increment once "
            f"(total {total}; {extra} of {sum(ctx.uncertain.values())} unanswered requests were applied)")


def check_watchdog(ctx):
    m = ctx.machine
    if m.show("WatchdogUSec") in ("0", "infinity", ""):
        raise Failure("no watchdog armed")
    first = int(m.show("WatchdogTimestampMonotonic"))
    wait_for("WatchdogTimestamp to advance (WATCHDOG=1 every WatchdogSec/2)",
             lambda: int(m.show("WatchdogTimestampMonotonic")) > first, 40, interval=0.5)
    restarts0 = int(m.show("NRestarts"))
    pid = m.show("MainPID")
    t0 = time.monotonic()
    m.run(["kill", "-STOP", pid])
    wait_for("the watchdog to kill the stopped daemon and Restart= to bring it back",
             lambda: int(m.show("NRestarts")) > restarts0 and m.show("ActiveState") == "active"
             and m.show("MainPID") != pid, 150, interval=0.5)
    took = time.monotonic() - t0
    log_text = m.run(["journalctl", "-u", UNIT, "--no-pager", "-o", "cat"]).stdout
    if "Watchdog timeout" not in log_text:
        raise Failure("the journal does not show a watchdog timeout")
    return f"pings advance WatchdogTimestamp; SIGSTOPped daemon killed by the watchdog and restarted in {took:.0f}s"


def journal(ctx, *args):
    return ctx.machine.run(["journalctl", "-u", UNIT, "--no-pager", "-o", "cat", *args]).stdout


def check_reload(ctx):
    m = ctx.machine
    pid = m.show("MainPID")
    configure(ctx, level="debug")
    m.run(["systemctl", "reload", UNIT])
    wait_for("the reload to apply log.level", lambda: "reload: applied log.level" in journal(ctx), 20, 0.3)
    if post_increments(ctx, [(7, 1, 3)]) != 202:
        raise Failure("increment refused after reload")
    ctx.acknowledged[(7, 1)] = ctx.acknowledged.get((7, 1), 0) + 3
    if http("POST", base_url(ctx) + "/v1/flush", timeout=30)[0] != 200:
        raise Failure("flush failed after reload")
    wait_for("a debug line (log level debug applied)", lambda: "debug flushed" in journal(ctx), 20, 0.3)

    # A broken config is refused; the daemon runs on.
    m.write("/etc/slotted-counterd/slotted-counterd.yaml", "flush: {slots: 0}\nno_such_key: 1\n")
    m.run(["systemctl", "reload", UNIT])
    wait_for("the broken config to be refused", lambda: "reload refused" in journal(ctx), 20, 0.3)
    if m.show("ActiveState") != "active" or m.show("MainPID") != pid:
        raise Failure(f"after a refused reload: {m.show('ActiveState')}, MainPID {m.show('MainPID')} (was {pid})")
    if http("GET", base_url(ctx) + "/readyz", timeout=2)[0] != 200:
        raise Failure("not ready after a refused reload")
    # journald got the priorities: -p err holds the refusal and no info line.
    errors = journal(ctx, "-p", "err")
    if "reload refused" not in errors or "listening on" in errors:
        raise Failure(f"journalctl -p err does not select by the daemon's levels:\n{errors[-1500:]}")
    configure(ctx)
    m.run(["systemctl", "reload", UNIT])
    return f"log level debug applied live (MainPID {pid} unchanged); broken config refused; journalctl -p err selects"


def check_bad_config_at_start(ctx):
    m = ctx.machine
    named_before = journal(ctx).count("no_such_key")
    m.write("/etc/slotted-counterd/slotted-counterd.yaml", "flush: {slots: 0}\nno_such_key: 1\n")
    r = m.run(["systemctl", "restart", UNIT], check=False, timeout=60)
    if r.returncode == 0:
        raise Failure("systemctl restart with a broken config succeeded")
    # Without RestartPreventExitStatus=2 the unit would sit in auto-restart and start
    # again every RestartSec; with it, it is failed at once.
    wait_for("the unit to settle after the failed start",
             lambda: m.show("ActiveState") == "failed" or m.show("SubState") == "auto-restart", 20, 0.2)
    state = (m.show("ActiveState"), m.show("SubState"), m.show("Result"), m.show("ExecMainStatus"))
    if state != ("failed", "failed", "exit-code", "2"):
        raise Failure(f"after a start with a broken config: ActiveState, SubState, Result, ExecMainStatus = {state} "
                      "(want failed, failed, exit-code, 2: a config error must not be restarted)")
    if journal(ctx).count("no_such_key") <= named_before:
        raise Failure("the journal does not name the config error of the failed start")
    configure(ctx)
    m.run(["systemctl", "reset-failed", UNIT])
    m.run(["systemctl", "start", UNIT], timeout=60)
    if m.show("ActiveState") != "active":
        raise Failure(f"not active again with the good config: {m.show('ActiveState')}")
    return "exit 2 at start: unit failed at once, no restart loop; the journal names the errors; starts again when fixed"


def check_security(ctx):
    r = ctx.machine.run(["systemd-analyze", "security", "--no-pager", UNIT], check=False)
    return f"live exposure {exposure_within_limit(r.stdout + r.stderr)}"


def check_purge(ctx):
    m = ctx.machine
    m.run(["apt-get", "purge", "-y", "-qq", "slotted-counterd"], timeout=300)
    left = m.sh("ls -d /etc/slotted-counterd /var/lib/slotted-counterd /var/lib/private/slotted-counterd "
                "/usr/lib/systemd/system/slotted-counterd.service "
                "/etc/systemd/system/multi-user.target.wants/slotted-counterd.service "
                "/var/lib/systemd/deb-systemd-helper-enabled/slotted-counterd.service.dsh-also "
                "/var/lib/systemd/deb-systemd-helper-masked/slotted-counterd.service 2>/dev/null; true").stdout.split()
    if left:
        raise Failure(f"left after purge: {left}")
    if m.run(["systemctl", "cat", UNIT], check=False).returncode == 0:
        raise Failure("systemd still knows the unit after purge")
    return "no files, state or enablement left"


# ------------------------------------------------------------- socket activation (issue 22)

SOCKET_UNIT = "slotted-counterd.socket"
HTTP_SOCK = "/run/slotted-counterd/http.sock"
LOAD_CLIENT = "/usr/local/bin/restart_load"


def check_socket_unit(ctx):
    """The socket unit is installed and enabled; www-data exists (Debian's base-passwd).
    The test's TCP port replaces 8080 through a drop-in, as docs/production.md shows."""
    m = ctx.machine
    if m.run(["getent", "group", "www-data"], check=False).returncode != 0:
        raise Failure("no www-data group in the Debian root (SocketGroup=www-data needs it)")
    enabled = m.run(["systemctl", "is-enabled", SOCKET_UNIT], check=False).stdout.strip()
    if enabled != "enabled":
        raise Failure(f"{SOCKET_UNIT} is {enabled!r} after install, expected enabled")
    m.run(["mkdir", "-p", f"/etc/systemd/system/{SOCKET_UNIT}.d"])
    m.write(f"/etc/systemd/system/{SOCKET_UNIT}.d/test-port.conf",
            f"[Socket]\nListenStream=\nListenStream={HTTP_SOCK}\nListenStream=127.0.0.1:{ctx.port}\n")
    m.run(["systemctl", "daemon-reload"])
    # The load client, built here and run inside the machine (as www-data).
    binary = os.path.join(ctx.tmp, "restart_load")
    src = os.path.join(ctx.source, "bench", "restart_load.c")
    r = subprocess.run(["cc", "-O2", "-o", binary, src, "-lpthread"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    if r.returncode != 0:
        raise Failure(f"building bench/restart_load.c failed: {r.stdout.decode()[-1500:]}")
    m.write(LOAD_CLIENT, open(binary, "rb").read(), mode="0755")
    return f"{SOCKET_UNIT} enabled; www-data exists; TCP 127.0.0.1:{ctx.port} by a drop-in"


def start_load(ctx, user, record, rate, seconds, tag):
    """Runs restart_load inside the machine as `user` in a thread; returns (thread,
    result dict, progress reader, stopper)."""
    m = ctx.machine
    stop_file, progress = f"/tmp/{tag}.stop", f"/tmp/{tag}.progress"
    m.run(["rm", "-f", stop_file, progress])
    out = {}

    def run():
        r = m.run(["setpriv", "--reuid", user, "--regid", user, "--clear-groups", LOAD_CLIENT,
                   "--unix", HTTP_SOCK, "--rate", str(rate), "--threads", "4", "--seconds", str(seconds),
                   "--stop-file", stop_file, "--progress", progress, "--record-type", str(record[0]),
                   "--record-id", str(record[1])], check=False, timeout=seconds + 90)
        out["rc"], out["text"] = r.returncode, r.stdout + r.stderr
        mm = re.search(r"RESTART_LOAD (.*)", r.stdout)
        if mm:
            out.update({k: float(v) for k, v in (w.split("=") for w in mm.group(1).split())})

    t = threading.Thread(target=run, daemon=True)
    t.start()

    def ok_so_far():
        r = m.run(["cat", progress], check=False)
        return int(r.stdout.strip() or 0) if r.returncode == 0 else 0

    def finish():
        m.run(["touch", stop_file])
        t.join(timeout=120)
        if "requests" not in out:
            raise Failure(f"restart_load gave no figures: rc {out.get('rc')} {out.get('text', '')[-1500:]}")
        return out
    return ok_so_far, finish


def flushed_total(ctx, record):
    status, body, _ = http("POST", base_url(ctx) + "/v1/flush", timeout=30)
    if status != 200:
        raise Failure(f"POST /v1/flush answered {status}: {body[:300]}")
    return table_totals(ctx).get(record, 0)


def check_restart_under_load(ctx):
    """A client running as www-data posts over the Unix socket while the service is
    restarted three times: every request answered 2xx, the table exact."""
    m = ctx.machine
    m.run(["systemctl", "start", UNIT], timeout=60)
    st = m.run(["stat", "-c", "%F %U %G %a", HTTP_SOCK]).stdout.strip()
    if st != "socket root www-data 660":
        raise Failure(f"{HTTP_SOCK} is {st!r}, expected 'socket root www-data 660'")
    if "passed by systemd" not in journal(ctx):
        raise Failure("the daemon does not log the sockets systemd passed")
    # Not in the group: refused by the socket's mode.
    r = m.run(["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups", LOAD_CLIENT, "--unix",
               HTTP_SOCK, "--rate", "10", "--threads", "1", "--seconds", "1"], check=False)
    if "ok=0" not in r.stdout or "refused=0" in r.stdout:
        raise Failure(f"user nobody was not refused on {HTTP_SOCK}: {r.stdout}{r.stderr}")
    socket_since = m.run(["systemctl", "show", "-P", "ActiveEnterTimestampMonotonic", SOCKET_UNIT]).stdout.strip()
    record = (8, 1)
    before = flushed_total(ctx, record)
    ok_so_far, finish = start_load(ctx, "www-data", record, 400, 240, "restarts")
    pids = [m.show("MainPID")]
    try:
        wait_for("the load to be answered", lambda: ok_so_far() >= 200, 30, 0.2)
        for _ in range(3):
            mark = ok_so_far()
            m.run(["systemctl", "restart", UNIT], timeout=90)
            pids.append(m.show("MainPID"))
            wait_for("answers from the restarted daemon", lambda: ok_so_far() >= mark + 300, 30, 0.2)
    finally:
        res = finish()
    if len(set(pids)) != 4:
        raise Failure(f"MainPIDs across the restarts: {pids} (expected four different)")
    if res["ok"] != res["requests"]:
        raise Failure(f"not every request answered 2xx through the restarts: {res}")
    got = flushed_total(ctx, record) - before
    if got != res["ok"]:
        raise Failure(f"the table holds {got} for {record}, the client had {res['ok']:.0f} acknowledged")
    ctx.acknowledged[record] = ctx.acknowledged.get(record, 0) + int(res["ok"])
    after = m.run(["systemctl", "show", "-P", "ActiveEnterTimestampMonotonic", SOCKET_UNIT]).stdout.strip()
    if after != socket_since:
        raise Failure("the socket unit was restarted with the service")
    return (f"www-data client, 3 restarts (MainPID {' -> '.join(pids)}): {res['requests']:.0f} requests, all 2xx, "
            f"table exact; longest answer {res['max_us'] / 1000:.0f} ms; user nobody refused by the mode 0660")


def check_token_rotation(ctx):
    """http.auth_token_file through LoadCredential=: a new token takes a restart
    (credentials are copied at start); the old token then gets 401, the new one 202."""
    m = ctx.machine
    cred = "/run/credentials/slotted-counterd.service/auth-token"
    dropin = f"/etc/systemd/system/{UNIT}.d"
    m.run(["mkdir", "-p", dropin])
    m.write(f"{dropin}/auth-token.conf", "[Service]\nLoadCredential=auth-token:/etc/slotted-counterd/auth-token\n")
    old, new = "old-token-" + "a" * 24, "new-token-" + "b" * 24
    m.write("/etc/slotted-counterd/auth-token", old + "\n", mode="0600")
    cfg = daemon_config(ctx)
    if "http: {threads: 2}" not in cfg:
        raise Failure("the test config changed: no 'http: {threads: 2}' line to extend")
    m.write("/etc/slotted-counterd/slotted-counterd.yaml",
            cfg.replace("http: {threads: 2}", f"http: {{threads: 2, auth_token_file: {cred}}}"))
    m.run(["systemctl", "daemon-reload"])
    m.run(["systemctl", "restart", UNIT], timeout=90)
    body = json.dumps({"record_type": 8, "record_id": 2, "delta": 1})

    def post(token):
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        req = urllib.request.Request(base_url(ctx) + "/v1/increments", data=body.encode(), method="POST",
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    try:
        seen = [post(None), post(old)]
        m.write("/etc/slotted-counterd/auth-token", new + "\n", mode="0600")
        reloads = journal(ctx).count("reload: applied")
        m.run(["systemctl", "reload", UNIT])
        wait_for("the reload", lambda: journal(ctx).count("reload: applied") > reloads, 20, 0.3)
        seen.append(post(old))  # a reload does not see a new credential: the old token works on
        if "a new token takes `systemctl restart slotted-counterd`" not in journal(ctx):
            raise Failure("the reload does not say that a credential's new token takes a restart")
        m.run(["systemctl", "restart", UNIT], timeout=90)
        seen += [post(old), post(new)]
        if seen != [401, 202, 202, 401, 202]:
            raise Failure(f"no token, old, old after reload, old after restart, new after restart: {seen} "
                          "(expected [401, 202, 202, 401, 202])")
        ctx.acknowledged[(8, 2)] = ctx.acknowledged.get((8, 2), 0) + 3
    finally:
        m.run(["rm", "-rf", dropin, "/etc/slotted-counterd/auth-token"])
        configure(ctx)
        m.run(["systemctl", "daemon-reload"])
        m.run(["systemctl", "restart", UNIT], timeout=90)
    return "old token 401 and new token 202 after `systemctl restart`; a reload keeps the old one (documented)"


def bench_restart(ctx):
    """--bench: the same steady load over the Unix socket, without and with a restart."""
    m = ctx.machine
    rate, seconds = 1000, 12
    figures = {}
    for label, restart in (("no restart", False), ("restart", True)):
        record = (9, 1 if not restart else 2)
        before = flushed_total(ctx, record)
        ok_so_far, finish = start_load(ctx, "www-data", record, rate, seconds, f"bench-{restart}")
        took = None
        try:
            wait_for("the load to be answered", lambda: ok_so_far() >= rate, 30, 0.1)
            if restart:
                t0 = time.monotonic()
                m.run(["systemctl", "restart", UNIT], timeout=90)
                took = time.monotonic() - t0
            mark = ok_so_far()
            wait_for("more answers", lambda: ok_so_far() >= mark + 2 * rate, 30, 0.1)
        finally:
            res = finish()
        got = flushed_total(ctx, record) - before
        ctx.acknowledged[record] = ctx.acknowledged.get(record, 0) + int(res["ok"])
        res["exact"] = got == res["ok"]
        res["restart_s"] = took
        figures[label] = res
    lines = []
    for label, r in figures.items():
        lines.append(f"{label}: {r['requests']:.0f} requests in {r['seconds']:.1f}s at {rate}/s, "
                     f"refused {r['refused']:.0f}, no answer {r['no_answer']:.0f}, non-2xx {r['non2xx']:.0f}, "
                     f"p50 {r['p50_us'] / 1000:.1f} ms, p99 {r['p99_us'] / 1000:.1f} ms, "
                     f"max {r['max_us'] / 1000:.1f} ms, table exact {r['exact']}"
                     + (f", systemctl restart took {r['restart_s']:.2f}s" if r["restart_s"] else ""))
    print("BENCH restart under load (Unix socket, one connection per request, as www-data):\n  "
          + "\n  ".join(lines), flush=True)
    bad = [label for label, r in figures.items() if r["ok"] != r["requests"] or not r["exact"]]
    if bad:
        raise Failure(f"requests not all answered 2xx, or the table not exact, in: {bad}")
    return "; ".join(lines)


NGINX_SITE = """server {{
    listen 127.0.0.1:{port};
    root /var/www/downloads;
    access_log /var/log/nginx/access.log;
}}
"""


def check_nginx_logrotate(ctx):
    """Debian's nginx and the nginx package's own logrotate file: the access log is
    www-data:adm 0640, read through the shipped read-access-logs.conf drop-in; two
    `logrotate -f` and a `systemctl restart` under load, every 200 counted once."""
    m = ctx.machine
    # Installed without starting (policy-rc.d): its default site would take port 80 of
    # the network namespace this machine shares with the host. systemd-sysv: without
    # /sbin/init, invoke-rc.d (the logrotate file's postrotate) blocks every action and
    # nginx would never reopen its log.
    m.write("/usr/sbin/policy-rc.d", "#!/bin/sh\nexit 101\n", mode="0755")
    try:
        m.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "nginx-light", "logrotate",
               "systemd-sysv"], timeout=600)
    finally:
        m.run(["rm", "-f", "/usr/sbin/policy-rc.d"])
    port = free_port()
    m.run(["rm", "-f", "/etc/nginx/sites-enabled/default"])
    m.write("/etc/nginx/sites-enabled/downloads", NGINX_SITE.format(port=port))
    ids = range(1, 6)
    m.sh("for i in " + " ".join(map(str, ids)) + "; do mkdir -p /var/www/downloads/d/$i; "
         "echo x > /var/www/downloads/d/$i/f.tgz; done")
    m.run(["systemctl", "restart", "nginx"], timeout=60)
    st = m.run(["stat", "-c", "%U %G %a", "/var/log/nginx/access.log"]).stdout.strip()
    if st != "www-data adm 640":
        raise Failure(f"/var/log/nginx/access.log is {st!r}, expected 'www-data adm 640'")
    dropin = "/etc/systemd/system/slotted-counterd.service.d/read-access-logs.conf"
    m.run(["install", "-D", "-m", "0644", "/usr/share/doc/slotted-counterd/examples/read-access-logs.conf",
           dropin])
    record_type = 9
    cfg = daemon_config(ctx, extra=(
        f"counters: [{{name: downloads, record_type: {record_type}}}]\n"
        "log_sources:\n"
        "  - path: /var/log/nginx/access.log\n"
        "    rules: [{counter: downloads, path: '^/d/([0-9]+)/'}]\n"))
    m.write("/etc/slotted-counterd/slotted-counterd.yaml",
            cfg.replace("flush: {interval: 1h,", "flush: {interval: 200ms,"))
    try:
        m.run(["systemctl", "daemon-reload"])
        m.run(["systemctl", "restart", UNIT], timeout=90)
        ok = {i: 0 for i in ids}
        failed = []
        stop = threading.Event()

        def client():
            n = 0
            while not stop.is_set():
                i = ids[n % len(ids)]
                n += 1
                try:
                    status, _, _ = http("GET", f"http://127.0.0.1:{port}/d/{i}/f.tgz", timeout=5)
                except Exception as e:  # noqa: BLE001
                    failed.append(repr(e))
                    continue
                if status == 200:
                    ok[i] += 1
                else:
                    failed.append(status)

        t = threading.Thread(target=client)
        t.start()
        try:
            def served(n):
                mark = sum(ok.values())
                wait_for(f"{n} more downloads served", lambda: sum(ok.values()) >= mark + n, 60, 0.05)
            served(300)
            m.run(["logrotate", "-f", "/etc/logrotate.d/nginx"], timeout=60)
            served(300)
            m.run(["systemctl", "restart", UNIT], timeout=90)
            served(300)
            m.run(["logrotate", "-f", "/etc/logrotate.d/nginx"], timeout=60)
            served(300)
        finally:
            stop.set()
            t.join()
        if failed:
            raise Failure(f"{len(failed)} downloads failed, e.g. {failed[:3]}")
        want = {(record_type, i): n for i, n in ok.items()}

        def counted():
            totals = table_totals(ctx)
            return {k: v for k, v in totals.items() if k[0] == record_type}
        try:
            wait_for("every download counted", lambda: counted() == want, 60, 0.2)
        except Failure:
            raise Failure(f"the table holds {counted()}, nginx served {want}")
        rotated = m.sh("ls /var/log/nginx/").stdout.split()
        if "access.log.1" not in rotated or "access.log.2.gz" not in rotated:
            raise Failure(f"logrotate did not rotate twice: {rotated}")
        metrics = http("GET", base_url(ctx) + "/metrics")[1].decode()
        for kind in ("file_lost", "open_denied", "read_error"):
            line = f'slotted_counterd_log_events_total{{kind="{kind}",source="/var/log/nginx/access.log"}}'
            value = [ln.split()[-1] for ln in metrics.splitlines() if ln.startswith(line)]
            if value != ["0"]:
                raise Failure(f"{line} is {value}")
        return (f"nginx on 127.0.0.1:{port}, access.log www-data:adm 0640 read by the dynamic user; "
                f"{sum(ok.values())} downloads through 2 rotations (the package's logrotate file) "
                f"and a restart, each counted once; {' '.join(sorted(rotated))}")
    finally:
        m.run(["rm", "-f", dropin], check=False)
        m.run(["systemctl", "daemon-reload"], check=False)
        m.run(["systemctl", "stop", "nginx"], check=False)
        configure(ctx)


def check_purge_socket(ctx):
    m = ctx.machine
    left = m.sh(f"ls -d /usr/lib/systemd/system/{SOCKET_UNIT} /etc/systemd/system/sockets.target.wants/{SOCKET_UNIT} "
                f"/var/lib/systemd/deb-systemd-helper-enabled/{SOCKET_UNIT}.dsh-also "
                f"/var/lib/systemd/deb-systemd-helper-masked/{SOCKET_UNIT} {HTTP_SOCK} 2>/dev/null; true").stdout.split()
    if left:
        raise Failure(f"left after purge: {left}")
    if m.run(["systemctl", "is-active", SOCKET_UNIT], check=False).stdout.strip() == "active":
        raise Failure(f"{SOCKET_UNIT} still active after purge")
    return "socket unit, its enablement and its socket file gone"


# ------------------------------------------------- README, word for word (issue 40)

README_DB_CONF = "/etc/mysql/mariadb.conf.d/99-slotted-test.cnf"


def readme_blocks(source):
    """The shell blocks of README.md's "Five minutes" section, in order: the install
    block, the count block, the SQL block."""
    with open(os.path.join(source, "README.md")) as f:
        section = f.read().split("## Five minutes", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    if len(blocks) != 3:
        raise Failure(f"README.md's Five minutes section has {len(blocks)} sh blocks, expected 3")
    return blocks


def readme_script(ctx, block):
    """A README block as the test runs it: word for word, but for the listen port (this
    machine shares the host's network, where 8080 may be taken: the socket unit's
    test-port drop-in moves it) and `set -e`, so that a failing line stops it."""
    return "set -e\ncd /root\n" + block.replace("localhost:8080", f"localhost:{ctx.port}")


def check_readme_install(ctx):
    """README's install block, run as written in the Debian root (as a new user on a
    fresh Debian 12 would: apt-get install of the .deb and mariadb-server, the account,
    the password, the config, --migrate, start, /readyz), then its count block and its
    SQL. MariaDB runs inside the machine, as the README has it; only its TCP port is
    off (the host's network is shared), the README uses its Unix socket."""
    m = ctx.machine
    install, count, sql = readme_blocks(ctx.source)
    m.run(["mkdir", "-p", os.path.dirname(README_DB_CONF)])
    m.write(README_DB_CONF, "[mysqld]\nskip-networking\n")
    # The "Do you want to continue? [Y/n]" a person answers.
    m.write("/etc/apt/apt.conf.d/99-slotted-test-yes", 'APT::Get::Assume-Yes "true";\n')
    m.run(["systemctl", "stop", UNIT], check=False, timeout=60)
    m.run(["systemctl", "reset-failed", UNIT], check=False)
    m.run(["rm", "-f", "/etc/slotted-counterd/slotted-counterd.yaml"])
    r = m.run(["bash", "-c", readme_script(ctx, install)], check=False, timeout=900)
    if r.returncode != 0:
        raise Failure(f"the README's install block failed (exit {r.returncode}):\n{r.stdout[-1500:]}{r.stderr[-2500:]}")
    ready = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    shown = re.search(r"readyz\s+# (\{[^}]*\})", install).group(1)
    if json.loads(ready) != json.loads(shown):
        raise Failure(f"/readyz right after the README's start printed {ready!r}; the README shows {shown!r}")
    if f"WAL in /var/lib/slotted-counterd" not in journal(ctx):
        raise Failure(f"the README's config runs without the WAL in the state directory:\n{journal(ctx)[-1500:]}")
    # install.md's commands for a running service: --check-config from a shell, the Unix socket.
    with open(os.path.join(ctx.source, "docs", "install.md")) as f:
        install_md = f.read()
    for needle in ("--check-config", "--unix-socket"):
        block = [b for b in re.findall(r"```sh\n(.*?)```", install_md, re.S) if needle in b]
        if len(block) != 1:
            raise Failure(f"install.md has {len(block)} sh blocks with {needle}, expected 1")
        r = m.run(["bash", "-c", readme_script(ctx, block[0])], check=False, timeout=60)
        if r.returncode != 0:
            raise Failure(f"install.md's {needle} block failed (exit {r.returncode}): {r.stdout[-800:]}{r.stderr[-800:]}")
    r = m.run(["bash", "-c", readme_script(ctx, count)], check=False, timeout=60)
    # The daemon's answers end with no newline: the three are read as the objects printed.
    outs = re.findall(r"\{[^{}]*\}", r.stdout)
    wants = [ln[2:] for ln in count.splitlines() if ln.startswith("# {")]
    if r.returncode != 0 or len(outs) != 3 or [json.loads(o)["count" if "count" in o else "accepted"] for o in outs] \
            != [json.loads(w)["count" if "count" in w else "accepted"] for w in wants]:
        raise Failure(f"the README's count block printed {outs}, the README shows {wants}: {r.stderr[-800:]}")
    want_sql = [ln[2:] for ln in sql.splitlines() if ln.startswith("# ")][0]
    query = "\n".join(ln for ln in sql.splitlines() if ln.startswith("mariadb"))
    wait_for(f"the README's SQL to print {want_sql}",
             lambda: m.run(["bash", "-c", query], check=False).stdout.split()[-1:] == [want_sql], 20, 0.3)
    return "install block as written (apt-get, account, password, config, --migrate, start): ready; " \
        f"WAL in the state directory; the count block and the SQL print what the README shows ({want_sql})"


def readme_total(ctx, record_id):
    r = ctx.machine.run(["mariadb", "app", "-N", "-e", "SELECT COALESCE(SUM(count), 0) FROM slotted_counters "
                         f"WHERE record_type = 123 AND record_id = {record_id}"], check=False)
    return int(r.stdout.strip() or -1) if r.returncode == 0 else -1


def check_readme_sigkill(ctx):
    """The README's config, untouched: increments acknowledged while MariaDB is stopped
    (so they are pending, not flushed), then `systemctl kill -s SIGKILL`; Restart= brings
    the daemon back, MariaDB comes back, and the table holds every acknowledged increment
    exactly once: the WAL the README's config gets by default kept them."""
    m = ctx.machine
    m.run(["systemctl", "stop", "mariadb"], timeout=120)
    pid0, restarts0 = m.show("MainPID"), int(m.show("NRestarts"))
    acked, sent = 0, 0
    for i in range(50):
        sent += 1
        status, _, _ = http("POST", base_url(ctx) + "/v1/increments",
                            json.dumps({"record_type": "repo_downloads", "record_id": 4242, "delta": i + 1}),
                            "application/json", timeout=5)
        if status == 202:
            acked += i + 1
    if acked != sum(range(1, 51)):
        raise Failure(f"only {acked} of {sum(range(1, 51))} acknowledged while the database was down")
    m.run(["systemctl", "kill", "-s", "SIGKILL", UNIT])
    wait_for("Restart= to bring the daemon back", lambda: int(m.show("NRestarts")) > restarts0
             and m.show("ActiveState") == "active", 60, 0.2)
    m.run(["systemctl", "start", "mariadb"], timeout=120)
    wait_for(f"the table to hold the {acked} acknowledged while the database was down",
             lambda: readme_total(ctx, 4242) >= acked, 60, 0.5)
    http("POST", base_url(ctx) + "/v1/flush", timeout=30)
    got = readme_total(ctx, 4242)
    if got != acked:
        raise Failure(f"after SIGKILL and restart the table holds {got}, {acked} were acknowledged")
    # operations.md's --wal-salvage commands for the unit, as written: they find the WAL
    # in the state directory.
    with open(os.path.join(ctx.source, "docs", "operations.md")) as f:
        salvage = [b for b in re.findall(r"```sh\n(.*?)```", f.read(), re.S) if "--wal-salvage" in b]
    if len(salvage) != 1:
        raise Failure(f"operations.md has {len(salvage)} sh blocks with --wal-salvage, expected 1")
    block = "\n".join(line.strip() for line in salvage[0].splitlines())
    r = m.run(["bash", "-c", readme_script(ctx, block)], check=False, timeout=120)
    if r.returncode != 0 or m.show("ActiveState") != "active":
        raise Failure(f"operations.md's --wal-salvage block failed (exit {r.returncode}): {r.stdout[-600:]}{r.stderr[-900:]}")
    if "WAL salvage done: /var/lib/slotted-counterd" not in r.stdout + r.stderr:
        raise Failure(f"the salvage did not work on the state directory: {r.stderr[-900:]}")
    return (f"{acked} acknowledged while MariaDB was down, SIGKILL (MainPID {pid0} -> {m.show('MainPID')}): "
            f"exactly {got} in the table after the restart; operations.md's --wal-salvage on it")


def check_readme_wal_off(ctx):
    """An explicit `wal.dir: ""` (an operator who had turned it off, kept across an
    upgrade) keeps the WAL off, and the journal says so."""
    m = ctx.machine
    conf = "/etc/slotted-counterd/slotted-counterd.yaml"
    original = m.run(["cat", conf]).stdout
    try:
        m.write(conf, original + 'wal:\n  dir: ""\n')
        m.run(["systemctl", "restart", UNIT], timeout=90)
        if 'no WAL (wal.dir: "")' not in journal(ctx):
            raise Failure(f"with wal.dir: \"\" the journal does not say the WAL is off:\n{journal(ctx)[-1200:]}")
    finally:
        m.write(conf, original)
        m.run(["systemctl", "restart", UNIT], timeout=90)
    return 'wal.dir: "" keeps the WAL off and the journal says so at start'


# --------------------------------------------------------------------------- main


def build_package(source, out_dir):
    """The .deb as docs/install.md builds it: scripts/build-package, whose last line of
    stdout is the .deb's path (with -Werror: gcc warns of more at -O2 than in the Debug
    build, none allowed)."""
    os.makedirs(out_dir, exist_ok=True)
    r = subprocess.run([os.path.join(source, "scripts", "build-package"), out_dir, "-DSLOTTED_WERROR=ON"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise Failure(f"scripts/build-package failed: {r.stderr[-3000:]}")
    deb = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    debs = glob.glob(os.path.join(out_dir, "slotted-counterd_*.deb"))
    if debs != [deb] or not re.search(r"^/.*/slotted-counterd_[0-9.]+_[a-z0-9]+\.deb$", deb):
        raise Failure(f"expected the last line to be the one slotted-counterd_<version>_<arch>.deb in {out_dir}: "
                      f"{deb!r}, found {debs}")
    info = subprocess.run(["dpkg-deb", "-f", deb, "Depends"], stdout=subprocess.PIPE, text=True).stdout
    if "libc6" not in info or "libmariadb" not in info:
        raise Failure(f"Depends was not computed by shlibdeps: {info!r}")
    return deb, info.strip()


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--reap":
        return reap(int(sys.argv[2]), sys.argv[3])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", required=True)
    ap.add_argument("--build-dir", required=True, help="where scripts/build-package puts the .deb")
    ap.add_argument("--daemon", required=True, help="a slotted-counterd binary for --migrate on the host")
    ap.add_argument("--cache", default=os.environ.get("SLOTTED_SYSTEMD_TEST_CACHE",
                                                      "/var/cache/slotted-counterd-test"))
    ap.add_argument("--bench", action="store_true",
                    help="also measure systemctl restart under a steady load (bench/RESULTS.md)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("SKIP: needs root (namespaces, mounts, debootstrap)")
        return 77
    missing = [t for t in ("debootstrap", "unshare", "nsenter", "setpriv", "mariadbd", "mariadb-install-db",
                           "dpkg-shlibdeps") if not shutil.which(t)]
    if missing:
        print(f"FAIL setup: not installed: {', '.join(missing)} (scripts/install-deps)")
        print("0 passed, 1 failed")
        return 1

    # SIGTERM (a timeout) tears down like any failure; SIGKILL leaves the namespaces
    # to the parent-death signal and the leftovers to the next run.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    runner = Runner()
    ctx = Ctx()
    ctx.acknowledged = {}
    ctx.uncertain = {}
    ctx.source = os.path.abspath(args.source)
    ctx.tmp = tempfile.mkdtemp(prefix=f"slotted-systemd-test-{os.getpid()}.host.")
    reaper = Reaper(ctx.tmp)
    ctx.machine = ctx.db = None
    t_start = time.monotonic()
    cg_root = None
    try:
        def setup():
            nonlocal cg_root
            ctx.deb, depends = build_package(os.path.abspath(args.source), os.path.abspath(args.build_dir))
            ctx.base, how = ensure_base_root(args.cache, debian_mirror())
            cg_root = cgroup2_mount()
            clean_leftovers(cg_root)
            ctx.db = MariaDB(ctx.tmp)
            ctx.db.install()
            ctx.db.start()
            reaper.add("kill", [ctx.db.proc.pid, ctx.db.datadir])
            ctx.db.wait_up()
            ctx.port = free_port()
            r = ctx.db.sql(f"CREATE DATABASE app; CREATE USER 'counterd'@'127.0.0.1' IDENTIFIED BY '{DB_PASSWORD}'; "
                           "GRANT SELECT, INSERT, UPDATE, DELETE ON app.* TO 'counterd'@'127.0.0.1'")
            if r.returncode != 0:
                raise Failure(f"creating the database user failed: {r.stderr.decode()}")
            cfg = os.path.join(ctx.tmp, "migrate.yaml")
            with open(cfg, "w") as f:
                f.write(f"mysql: {{socket: {ctx.db.sock}, user: root, database: app}}\n")
            r = subprocess.run([args.daemon, "--config", cfg, "--migrate"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
            if r.returncode != 0:
                raise Failure(f"--migrate failed: {r.stdout.decode()[-1500:]}")
            ctx.machine = Machine(ctx.base, cg_root)
            reaper.add("cgroups", ctx.machine.cgroup)
            reaper.add("dirs", ctx.machine.work)
            ctx.machine.prepare()
            state = ctx.machine.boot()
            return f"{os.path.basename(ctx.deb)} (Depends: {depends}); base root {how}; systemd booted ({state})"

        if not runner.run("setup: package, Debian root, MariaDB, boot", setup):
            return 1
        steps = [
            ("install: apt-get install ./slotted-counterd_*.deb", check_install),
            ("socket unit installed and enabled; www-data; test port drop-in", check_socket_unit),
            ("0. the installed conffile starts on a fresh database", check_conffile_starts),
            ("1. start returns after READY=1; dynamic user; state dir 0700", check_start),
            ("2. password through LoadCredential=", check_credential),
            ("3. stop: the final flush writes everything exactly", check_stop_flushes),
            ("4. SIGKILL + Restart=on-failure with WAL fsync always: exact", check_sigkill_restart),
            ("5. watchdog armed, fed, and kills a stopped daemon", check_watchdog),
            ("6. reload: log level live, broken config refused, journald priorities", check_reload),
            ("7. a broken config at start: failed at once, not restarted", check_bad_config_at_start),
            ("8. systemd-analyze security on the live unit", check_security),
            ("9. socket activation: a www-data client through three restarts, all 2xx, exact",
             check_restart_under_load),
            ("10. auth token rotation under LoadCredential=: restart; old 401, new 202", check_token_rotation),
            ("10a. nginx + its logrotate file under load, a restart: every download once",
             check_nginx_logrotate),
        ]
        if args.bench:
            steps.append(("bench: systemctl restart under a steady load", bench_restart))
        steps += [
            ("11. README's install block word for word: ready, counting, WAL on", check_readme_install),
            ("12. README's config: SIGKILL with increments pending, exact after restart", check_readme_sigkill),
            ("13. README's config with wal.dir \"\": the WAL stays off", check_readme_wal_off),
            ("purge leaves nothing behind", check_purge),
            ("purge leaves no socket unit behind", check_purge_socket),
        ]
        for name, fn in steps:
            if not runner.run(name, fn, ctx):
                if name.startswith("install") or name.startswith("1."):
                    break
    finally:
        if ctx.machine is not None:
            if runner.failed:
                print("---- journal of the unit ----")
                try:
                    print(journal(ctx)[-4000:])
                except Exception:  # noqa: BLE001
                    pass
            hold = float(os.environ.get("SLOTTED_SYSTEMD_TEST_HOLD", "0"))
            if runner.failed and hold > 0 and ctx.machine.pid1:
                # For a person to look inside: nsenter -t PID -m -u -i -p -C
                print(f"holding the machine for {hold:.0f}s: PID 1 is {ctx.machine.pid1}", flush=True)
                try:
                    time.sleep(hold)
                except KeyboardInterrupt:
                    pass
            problems = ctx.machine.teardown()
            for p in problems:
                print(f"FAIL teardown: {p}", flush=True)
                runner.failed += 1
        if ctx.db is not None:
            ctx.db.stop()
        shutil.rmtree(ctx.tmp, ignore_errors=True)
        reaper.done()
    print(f"{runner.passed} passed, {runner.failed} failed ({time.monotonic() - t_start:.0f}s)")
    return 0 if runner.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
