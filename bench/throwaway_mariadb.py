"""A throwaway MariaDB on a unix socket under a temp dir, for the Python benchmarks.

    with throwaway_mariadb("256M") as db:
        db.sql("CREATE DATABASE app")
        db.socket  # for a daemon config
"""
import contextlib, shutil, signal, subprocess, tempfile, time


class Server:
    def __init__(self, socket):
        self.socket = socket

    def sql(self, text, local_infile=False):
        """Runs statements (from stdin, so they may be long); returns the output, tab-separated.
        local_infile: allow LOAD DATA LOCAL INFILE."""
        extra = ["--local-infile=1"] if local_infile else []
        return subprocess.run(["mariadb", "--no-defaults", "-S", self.socket, "-uroot", "-N", *extra], input=text,
                              capture_output=True, text=True, check=True).stdout


@contextlib.contextmanager
def throwaway_mariadb(buffer_pool="256M"):
    tmp = tempfile.mkdtemp(prefix="slotted-bench-db-")
    db = None
    try:
        sock = f"{tmp}/sock"
        subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={tmp}/data", f"--tmpdir={tmp}",
                        "--auth-root-authentication-method=normal", "--skip-test-db", "--user=root"],
                       check=True, capture_output=True)
        db = subprocess.Popen(["mariadbd", "--no-defaults", f"--datadir={tmp}/data", f"--tmpdir={tmp}",
                               f"--socket={sock}",
                               "--skip-networking", "--user=root", f"--innodb-buffer-pool-size={buffer_pool}",
                               f"--log-error={tmp}/err.log"])
        for _ in range(300):
            if subprocess.run(["mariadb", "--no-defaults", "-S", sock, "-uroot", "-e", "SELECT 1"],
                              capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        yield Server(sock)
    finally:
        if db:
            db.send_signal(signal.SIGTERM)
            db.wait(60)
        shutil.rmtree(tmp, ignore_errors=True)
