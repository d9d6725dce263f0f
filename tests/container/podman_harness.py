"""podman for tests/container/container_test.py: the test's own containers.conf, the
Kubernetes manifests made into what `podman kube play` 4.3 can run on this machine,
the nginx image of the sidecar example, and the clean-up of everything the run made.

What the harness changes in the manifests, and why (a cluster gets them unchanged):
- The StatefulSet becomes its replica 0 as a Pod (kube play runs no StatefulSet): the
  template, named as the StatefulSet names its Pods, with each volumeClaimTemplate as
  the claim the StatefulSet would make (`<template>-<pod>`; podman makes a named volume
  of a claimName, which `kube down` keeps). The Deployment gets one replica.
- Every name the run makes (Pods, ConfigMaps, Secrets, emptyDir volumes: kube play 4.3
  makes a named volume of each of the last three, which every Pod naming one alike
  shares) starts with the run's prefix, so that runs never meet.
- The database is the host's MariaDB, reached through its Unix socket (a hostPath
  volume): it listens on 127.0.0.1 only. Each daemon config's mysql.host becomes that
  socket, and shutdown_timeout 5 s (a stop with the database down waits no longer).
- The claim's volume is made beforehand as a fresh ext4 volume looks under the Pod's
  fsGroup (root:10001, mode 2775, lost+found), not as podman would fill it from the
  image (the image's directory, 10001's, 0700).
- The StatefulSet's Pod gets a host name other than its name, so that its instance_id
  can only be its name through SLOTTED_COUNTERD_INSTANCE_ID (the downward API).
- Ports are published on 127.0.0.1 (hostPort, hostIP) at free ports.
- The Secret is made with `podman secret create` from a Secret document whose data is
  the password itself: kube play 4.3 mounts a Secret's data as stored, not decoded.
- nginx is a local image (no registry here) laid out as the official one is.
"""
import copy
import os
import re
import subprocess
import sys
import time

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ops"))
from ops_test import Failure, free_port  # noqa: E402

# crun fails here ("cgroups in hybrid mode not supported") and podman's default rlimits
# are above this machine's hard limits (setrlimit RLIMIT_NOFILE: Operation not permitted).
CONTAINERS_CONF = """[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
"""
DB_MOUNT = "/run/slotted-test-db"
# Bumped when the test's nginx image changes: its tag changes with it.
NGINX_RECIPE = "1"
NGINX_CONF = """user www-data;
worker_processes 2;
error_log /var/log/nginx/error.log notice;
pid /run/nginx.pid;
events {
    worker_connections 1024;
}
http {
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log /var/log/nginx/access.log combined;
    sendfile on;
    include /etc/nginx/conf.d/*.conf;
}
"""
DOWNLOAD_IDS = (1, 2, 3)


def run_prefix(pid):
    """What the names a run makes start with."""
    return f"sct{pid}-"


class Podman:
    def __init__(self, tmp, prefix):
        self.prefix = prefix
        self.conf = os.path.join(tmp, "containers.conf")
        with open(self.conf, "w") as f:
            f.write(CONTAINERS_CONF)
        self.env = dict(os.environ, CONTAINERS_CONF=self.conf)

    def run(self, *args, check=True, timeout=180, input=None):
        r = subprocess.run(["podman", *args], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout, input=input)
        if check and r.returncode != 0:
            raise Failure(f"podman {' '.join(args)} exited {r.returncode}: "
                          f"{noise_free(r.stderr.decode(errors='replace'))[-1500:]}")
        return r

    def out(self, *args, **kw):
        return self.run(*args, **kw).stdout.decode().strip()

    def daemon_pid(self, container):
        """The daemon's pid on the host: the child of the container's init (tini)."""
        init = int(self.out("inspect", "--format", "{{.State.Pid}}", container))
        with open(f"/proc/{init}/task/{init}/children") as f:
            kids = f.read().split()
        if len(kids) != 1:
            raise Failure(f"{container}: init {init} has children {kids}, expected the daemon alone")
        return int(kids[0])

    def claim_volume(self, name, image, gid):
        """A named volume as a cluster gives a claim to a Pod with fsGroup `gid`."""
        if self.run("volume", "exists", name, check=False).returncode == 0:
            return
        self.run("volume", "create", name)
        # The first mount copies the mount point's content and owner up from the image,
        # once: done here at an empty directory, so that the layout below stays.
        self.run("run", "--rm", "--pull=never", "-v", f"{name}:/mnt", "--entrypoint", "/bin/true", image)
        root = self.out("volume", "inspect", "--format", "{{.Mountpoint}}", name)
        os.mkdir(os.path.join(root, "lost+found"), 0o700)
        os.chown(root, 0, gid)
        os.chmod(root, 0o2775)

    def cleanup_stale(self):
        """What runs that were killed left: the names of runs whose process is gone."""
        names = []
        for kind in ("pod", "volume", "secret"):
            names += self.run(kind, "ls", "--format", "{{.Name}}", check=False).stdout.decode().split()
        for pid in {int(m.group(1)) for m in map(re.compile(r"sct(\d+)-").search, names) if m}:
            if not os.path.exists(f"/proc/{pid}"):
                self.cleanup(run_prefix(pid))

    def cleanup(self, prefix=None):
        """Removes the pods, volumes and secrets whose names hold the prefix (a claim's
        volume is <template>-<pod>)."""
        prefix = prefix or self.prefix
        for kind in ("pod", "volume", "secret"):
            names = self.run(kind, "ls", "--format", "{{.Name}}", check=False).stdout.decode().split()
            mine = [n for n in names if prefix in n]
            if mine:
                args = [kind, "rm", "-f", *mine] if kind != "secret" else [kind, "rm", *mine]
                self.run(*args, check=False, timeout=120)


def noise_free(text):
    """podman's complaints that do not matter here (no systemd for healthcheck timers,
    no aardvark-dns)."""
    return "\n".join(line for line in text.splitlines()
                     if "healthcheck" not in line and "aardvark-dns" not in line)


def load_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def test_config(text, db_mount=DB_MOUNT):
    """A ConfigMap's daemon config, pointed at the host's MariaDB socket."""
    cfg = yaml.safe_load(text)
    mysql = {k: v for k, v in cfg["mysql"].items() if k not in ("host", "port", "tls")}
    cfg["mysql"] = dict(mysql, socket=f"{db_mount}/sock")
    cfg["shutdown_timeout"] = "5s"
    return yaml.safe_dump(cfg, sort_keys=False)


class Variant:
    """Manifests renamed under the run's prefix and made runnable by kube play here."""

    def __init__(self, prefix, db_dir, image):
        self.prefix = prefix
        self.db_dir = db_dir
        self.image = image

    def name(self, n):
        return self.prefix + n

    def configmaps(self, docs):
        out = []
        for d in docs:
            d = copy.deepcopy(d)
            d["metadata"]["name"] = self.name(d["metadata"]["name"])
            if "slotted-counterd.yaml" in d.get("data", {}):
                d["data"]["slotted-counterd.yaml"] = test_config(d["data"]["slotted-counterd.yaml"])
            out.append(d)
        return out

    def pod_spec(self, spec, ports):
        """The template's spec with renamed volumes, the database socket and published
        ports (ports: container port name -> host port)."""
        spec = copy.deepcopy(spec)
        renamed = {}
        for v in spec.get("volumes", []):
            if "emptyDir" in v:
                renamed[v["name"]] = v["name"] = self.name(v["name"])
            if "configMap" in v:
                v["configMap"]["name"] = self.name(v["configMap"]["name"])
            if "secret" in v:
                v["secret"]["secretName"] = self.name(v["secret"]["secretName"])
        spec["volumes"].append({"name": "slotted-test-db", "hostPath": {"path": self.db_dir, "type": "Directory"}})
        for c in spec["containers"]:
            for m in c.get("volumeMounts", []):
                m["name"] = renamed.get(m["name"], m["name"])
            if c["image"].split("/")[-1].startswith("slotted-counterd:"):
                c["volumeMounts"].append({"name": "slotted-test-db", "mountPath": DB_MOUNT})
            for p in c.get("ports", []):
                if p.get("name") in ports:
                    p.update(hostPort=ports[p["name"]], hostIP="127.0.0.1")
        return spec

    def statefulset_pod(self, sts, ports):
        """Replica 0 of the StatefulSet, as a Pod with the claims it would get (their
        names are the pod's claims)."""
        pod = self.name(f"{sts['metadata']['name']}-0")
        t = sts["spec"]["template"]
        spec = self.pod_spec(t["spec"], ports)
        # Not its name (as it would be in a cluster): the instance_id then shows that it
        # comes from the downward API, not from the host name.
        spec["hostname"] = "slotted-test-host"
        self.claims = []
        for claim in sts["spec"].get("volumeClaimTemplates", []):
            self.claims.append(f"{claim['metadata']['name']}-{pod}")
            spec["volumes"].append({"name": claim["metadata"]["name"],
                                    "persistentVolumeClaim": {"claimName": self.claims[-1]}})
        return pod, {"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": pod, "labels": t["metadata"]["labels"],
                                  "annotations": t["metadata"].get("annotations", {})},
                     "spec": spec}

    def deployment(self, dep, ports, images):
        """One replica; images: container name -> local image."""
        dep = copy.deepcopy(dep)
        dep["metadata"]["name"] = self.name(dep["metadata"]["name"])
        dep["spec"]["replicas"] = 1
        spec = self.pod_spec(dep["spec"]["template"]["spec"], ports)
        for c in spec["containers"]:
            c["image"] = images.get(c["name"], c["image"])
        dep["spec"]["template"]["spec"] = spec
        # kube play names a Deployment's Pods <name>-pod-<replica>.
        return f"{dep['metadata']['name']}-pod-0", dep


def create_secret(podman, secret_doc, prefix):
    """The Secret as kube play 4.3 mounts it: each value stored as it is."""
    values = dict(secret_doc.get("stringData", {}))
    doc = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": prefix + secret_doc["metadata"]["name"]},
           "data": values}
    podman.run("secret", "create", doc["metadata"]["name"], "-", input=yaml.safe_dump(doc).encode())


def write_yaml(path, docs):
    with open(path, "w") as f:
        yaml.safe_dump_all(docs, f, sort_keys=False)
    return path


def nginx_image(podman, base_image, tmp):
    """A local nginx laid out as the official image is (its nginx.conf includes
    conf.d/*.conf; access.log and error.log go to stdout and stderr), serving files at
    /downloads/<id>/pkg.tar.gz; made from the product image's Debian root with
    nginx-light (from the Debian archive), once per recipe."""
    tag = f"localhost/slotted-counterd-test-nginx:{NGINX_RECIPE}"
    if podman.run("image", "exists", tag, check=False).returncode == 0:
        return tag, "cached"
    t0 = time.monotonic()
    root = os.path.join(tmp, "nginx-root")
    mnt = podman.out("image", "mount", base_image)
    try:
        subprocess.run(["cp", "-a", mnt, root], check=True)
    finally:
        podman.run("image", "unmount", base_image, check=False)
    subprocess.run(["cp", "/etc/resolv.conf", f"{root}/etc/resolv.conf"], check=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for argv in (["apt-get", "update", "-qq"],
                 ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "nginx-light"]):
        r = subprocess.run(["chroot", root, *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            raise Failure(f"{' '.join(argv)} in the nginx image's root failed: {r.stdout.decode()[-1500:]}")
    with open(f"{root}/etc/nginx/nginx.conf", "w") as f:
        f.write(NGINX_CONF)
    with open(f"{root}/etc/nginx/conf.d/default.conf", "w") as f:
        f.write("server { listen 80; }\n")
    subprocess.run(f"rm -rf {root}/etc/nginx/sites-enabled/* {root}/var/lib/apt/lists/* {root}/var/log/nginx/*"
                   f" && : > {root}/etc/resolv.conf && ln -s /dev/stdout {root}/var/log/nginx/access.log"
                   f" && ln -s /dev/stderr {root}/var/log/nginx/error.log", shell=True, check=True)
    for i in DOWNLOAD_IDS:
        os.makedirs(f"{root}/usr/share/nginx/html/downloads/{i}")
        with open(f"{root}/usr/share/nginx/html/downloads/{i}/pkg.tar.gz", "w") as f:
            f.write(f"package {i}\n")
    subprocess.run(["tar", "--numeric-owner", "-C", root, "-cf", f"{root}.tar", "."], check=True)
    podman.run("import", "--quiet", "--change", "USER 0:0", "--change", "WORKDIR /",
               "--change", "ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin", "--change", "STOPSIGNAL SIGQUIT",
               "--change", 'ENTRYPOINT ["nginx", "-g", "daemon off;"]', f"{root}.tar", tag)
    subprocess.run(["rm", "-rf", root, f"{root}.tar"], check=True)
    return tag, f"built in {time.monotonic() - t0:.0f}s"


def free_ports(*names):
    return {n: free_port() for n in names}
