#!/usr/bin/env python3
"""deploy/kubernetes/ read as a cluster would take it, without a cluster.

    python3 tests/container/manifests_test.py --source . --daemon build/asan/slotted-counterd

Every document is checked against the Kubernetes API models of python3-kubernetes (the
1.22 API: a field unknown there, misplaced or misspelled, or a required one missing, is
an error), then read across documents: selectors, Service and StatefulSet names, ports
named by probes, Services and monitors, volumes named by mounts, ConfigMaps and Secrets
named by volumes, the image and its user, the grace period against the preStop hook and
shutdown_timeout, the instance_id from the Pod name, and the paths of the daemon's
config against the volumes mounted there. Each daemon config passes --check-config.
The kustomizations list every file they should. No container, cluster or network.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

try:
    import yaml
    import kubernetes
    from kubernetes import client as k8s
except ImportError:
    # python3-kubernetes is Debian's, for Debian's interpreter: a python3 of another
    # installation (pyenv) first on PATH does not see it.
    if os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") and os.path.exists("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    print("FAIL setup: python3-kubernetes and python3-yaml are not installed (scripts/install-deps)")
    print("0 passed, 1 failed")
    sys.exit(1)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ops"))
from ops_test import Failure, Runner, free_port  # noqa: E402

DAEMON_CONTAINER = "slotted-counterd"
CONFIG_DIR = "/etc/slotted-counterd"
CONFIG_KEY = "slotted-counterd.yaml"
# Secrets the manifests name but leave to the operator (each file's comment says how).
CREATED_BY_HAND = {"slotted-counterd-admin": "migrate-job.yaml"}
MONITORING = "monitoring.coreos.com/v1"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
PORT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class Docs:
    def __init__(self, root):
        self.root = root
        self.items = []  # (relative file, document)
        for path in sorted(glob.glob(os.path.join(root, "**", "*.yaml"), recursive=True)):
            rel = os.path.relpath(path, root)
            if os.path.basename(rel) == "kustomization.yaml":
                continue
            with open(path) as f:
                for doc in yaml.safe_load_all(f):
                    if doc is not None:
                        self.items.append((rel, doc))

    def of_kind(self, kind):
        return [(f, d) for f, d in self.items if d.get("kind") == kind]

    def named(self, kind, name):
        return [d for _, d in self.of_kind(kind) if d["metadata"]["name"] == name]

    def workloads(self):
        """(file, kind, name, pod template spec, template labels) of every Pod template."""
        out = []
        for f, d in self.items:
            if d.get("kind") in ("StatefulSet", "Deployment", "Job"):
                t = d["spec"]["template"]
                out.append((f, d["kind"], d["metadata"]["name"], t["spec"], t["metadata"].get("labels", {})))
        return out


def model_name(doc):
    group_version = doc.get("apiVersion", "")
    version = group_version.split("/")[-1]
    return f"{version.capitalize()}{doc['kind']}"


class _Response:
    def __init__(self, data):
        self.data = data


def unknown_keys(original, back, where):
    """Keys of `original` that the model's round trip dropped: not fields of the API."""
    lost = []
    if isinstance(original, dict) and isinstance(back, dict):
        for k, v in original.items():
            if k not in back:
                lost.append(f"{where}.{k}")
            else:
                lost += unknown_keys(v, back[k], f"{where}.{k}")
    elif isinstance(original, list) and isinstance(back, list):
        for i, (a, b) in enumerate(zip(original, back)):
            lost += unknown_keys(a, b, f"{where}[{i}]")
    return lost


def check_api_models(ctx):
    api = k8s.ApiClient()
    problems, checked = [], 0
    for f, doc in ctx.docs.items:
        where = f"{f}: {doc.get('kind')} {doc.get('metadata', {}).get('name')}"
        if doc.get("apiVersion") == MONITORING:
            continue  # a CRD: check_monitors
        name = model_name(doc)
        if not hasattr(k8s, name):
            problems.append(f"{where}: no such kind in the API ({doc.get('apiVersion')})")
            continue
        try:
            obj = api.deserialize(_Response(json.dumps(doc)), name)
        except (ValueError, TypeError) as e:
            problems.append(f"{where}: {e}")
            continue
        problems += [f"{where}: unknown field {k}" for k in unknown_keys(doc, api.sanitize_for_serialization(obj), "")]
        meta = doc["metadata"]
        if not DNS_LABEL.match(meta["name"]) or len(meta["name"]) > 63:
            problems.append(f"{where}: the name is not a DNS label")
        for k, v in meta.get("labels", {}).items():
            if not isinstance(v, str) or len(v) > 63:
                problems.append(f"{where}: label {k}={v!r} is not a label value")
        for k, v in meta.get("annotations", {}).items():
            if not isinstance(v, str):
                problems.append(f"{where}: annotation {k} is not a string")
        checked += 1
    if problems:
        raise Failure("; ".join(problems))
    return f"{checked} documents valid against the API models of python3-kubernetes {kubernetes.__version__}"


def containers_of(spec):
    return spec.get("initContainers", []) + spec["containers"]


def check_pod_templates(ctx):
    problems = []
    for f, kind, name, spec, labels in ctx.docs.workloads():
        where = f"{f}: {kind} {name}"
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        if kind == "StatefulSet":
            doc = ctx.docs.named("StatefulSet", name)[0]
            for t in doc["spec"].get("volumeClaimTemplates", []):
                volumes[t["metadata"]["name"]] = {"name": t["metadata"]["name"], "persistentVolumeClaim": {}}
        for c in containers_of(spec):
            ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
            for pname in ports:
                if pname is not None and (not PORT_NAME.match(pname) or len(pname) > 15):
                    problems.append(f"{where}: port name {pname!r} is not an IANA service name")
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                port = c.get(probe, {}).get("httpGet", {}).get("port")
                if isinstance(port, str) and port not in ports:
                    problems.append(f"{where}: {c['name']} {probe} names port {port!r}, not one of {sorted(ports)}")
            for m in c.get("volumeMounts", []):
                if m["name"] not in volumes:
                    problems.append(f"{where}: {c['name']} mounts {m['name']!r}, which no volume is")
        for v in volumes.values():
            cm = v.get("configMap", {}).get("name")
            if cm and not ctx.docs.named("ConfigMap", cm):
                problems.append(f"{where}: volume {v['name']} names ConfigMap {cm!r}, which no file holds")
            secret = v.get("secret", {}).get("secretName")
            if secret and not ctx.docs.named("Secret", secret):
                hand = CREATED_BY_HAND.get(secret)
                if hand is None or f"kubectl create secret generic {secret}" not in ctx.text(hand):
                    problems.append(f"{where}: volume {v['name']} names Secret {secret!r}, which no file holds "
                                    "and no comment says how to create")
        annotations = ctx.template_annotations(kind, name)
        if annotations.get("prometheus.io/scrape") == "true":
            all_ports = {str(p["containerPort"]) for c in spec["containers"] for p in c.get("ports", [])}
            if annotations.get("prometheus.io/port") not in all_ports:
                problems.append(f"{where}: prometheus.io/port {annotations.get('prometheus.io/port')} is no container's port")
    if problems:
        raise Failure("; ".join(problems))
    return f"{len(ctx.docs.workloads())} Pod templates: mounts, volumes, ConfigMaps, Secrets, probe ports"


def check_selectors_and_services(ctx):
    problems = []
    for f, d in ctx.docs.items:
        kind = d.get("kind")
        if kind in ("StatefulSet", "Deployment"):
            labels = d["spec"]["template"]["metadata"].get("labels", {})
            sel = d["spec"]["selector"]["matchLabels"]
            if any(labels.get(k) != v for k, v in sel.items()):
                problems.append(f"{f}: {kind} selector {sel} does not select its template's labels {labels}")
        if kind == "StatefulSet":
            svc = ctx.docs.named("Service", d["spec"]["serviceName"])
            if not svc or svc[0]["spec"].get("clusterIP") != "None":
                problems.append(f"{f}: serviceName {d['spec']['serviceName']!r} is no headless Service")
        if kind in ("Service", "PodDisruptionBudget"):
            sel = d["spec"]["selector"] if kind == "Service" else d["spec"]["selector"]["matchLabels"]
            targets = [w for w in ctx.docs.workloads() if w[1] != "Job" and all(w[4].get(k) == v for k, v in sel.items())]
            if len(targets) != 1:
                problems.append(f"{f}: {kind} selector {sel} selects {len(targets)} workloads, not one")
            elif kind == "Service":
                names = {p.get("name") for c in targets[0][3]["containers"] for p in c.get("ports", [])}
                for p in d["spec"]["ports"]:
                    if isinstance(p.get("targetPort"), str) and p["targetPort"] not in names:
                        problems.append(f"{f}: targetPort {p['targetPort']!r} is no container port of {targets[0][2]}")
    if problems:
        raise Failure("; ".join(problems))
    return "StatefulSet and Deployment selectors, the headless Service, the PDB, target ports"


def check_monitors(ctx):
    problems, seen = [], []
    for f, d in ctx.docs.items:
        if d.get("apiVersion") != MONITORING:
            continue
        seen.append(d["kind"])
        sel = d["spec"]["selector"]["matchLabels"]
        if d["kind"] == "ServiceMonitor":
            svcs = [s for _, s in ctx.docs.of_kind("Service")
                    if all(s["metadata"].get("labels", {}).get(k) == v for k, v in sel.items())]
            ports = {p.get("name") for s in svcs for p in s["spec"]["ports"]}
            endpoints = d["spec"]["endpoints"]
        elif d["kind"] == "PodMonitor":
            pods = [w for w in ctx.docs.workloads() if all(w[4].get(k) == v for k, v in sel.items())]
            svcs = pods
            ports = {p.get("name") for w in pods for c in w[3]["containers"] for p in c.get("ports", [])}
            endpoints = d["spec"]["podMetricsEndpoints"]
        else:
            problems.append(f"{f}: unknown kind {d['kind']}")
            continue
        if not svcs:
            problems.append(f"{f}: {d['kind']} selects nothing")
        for e in endpoints:
            if e.get("port") not in ports or e.get("path") != "/metrics":
                problems.append(f"{f}: endpoint {e} is not /metrics on one of the ports {sorted(ports)}")
    if sorted(seen) != ["PodMonitor", "ServiceMonitor"]:
        problems.append(f"expected one ServiceMonitor and one PodMonitor, found {seen}")
    if problems:
        raise Failure("; ".join(problems))
    return "the ServiceMonitor selects the headless Service, the PodMonitor the sidecar's Pods; /metrics on named ports"


def duration_seconds(text):
    m = re.fullmatch(r"(\d+)(ms|s|m|h|d)", str(text))
    if not m:
        raise Failure(f"not a duration: {text!r}")
    return int(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def daemon_containers(ctx):
    """(file, kind, name, pod spec, the daemon's container, its config as a dict)."""
    out = []
    for f, kind, name, spec, _ in ctx.docs.workloads():
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for c in spec["containers"]:
            if not c["image"].split("/")[-1].startswith("slotted-counterd:"):
                continue
            mount = [m for m in c["volumeMounts"] if m["mountPath"] == CONFIG_DIR]
            if len(mount) != 1 or "configMap" not in volumes.get(mount[0]["name"], {}):
                raise Failure(f"{f}: {name}: no ConfigMap mounted at {CONFIG_DIR}")
            cm = ctx.docs.named("ConfigMap", volumes[mount[0]["name"]]["configMap"]["name"])[0]
            if CONFIG_KEY not in cm["data"]:
                raise Failure(f"{f}: ConfigMap {cm['metadata']['name']} has no key {CONFIG_KEY}")
            out.append((f, kind, name, spec, c, yaml.safe_load(cm["data"][CONFIG_KEY]), cm["data"][CONFIG_KEY]))
    return out


def check_daemon_containers(ctx):
    problems = []
    with open(os.path.join(ctx.source, "scripts", "build-image")) as f:
        uid = int(re.search(r"^uid=(\d+)$", f.read(), re.M).group(1))
    found = daemon_containers(ctx)
    for f, kind, name, spec, c, cfg, _ in found:
        where = f"{f}: {kind} {name}"
        if c["image"] != f"localhost/slotted-counterd:{ctx.version}":
            problems.append(f"{where}: image {c['image']}, scripts/build-image tags localhost/slotted-counterd:{ctx.version}")
        sc = {**spec.get("securityContext", {}), **c.get("securityContext", {})}
        if sc.get("runAsUser") != uid or sc.get("runAsNonRoot") is not True:
            problems.append(f"{where}: runs as {sc.get('runAsUser')}, not the image's user {uid} (runAsNonRoot)")
        writable = {m["mountPath"] for m in c["volumeMounts"] if not m.get("readOnly")}
        if not sc.get("readOnlyRootFilesystem"):
            problems.append(f"{where}: the root file system is writable")
        wal = cfg.get("wal", {}).get("dir")
        if kind != "Job" and wal not in writable:  # --migrate opens no WAL
            problems.append(f"{where}: wal.dir {wal!r} is no writable volume's mount ({sorted(writable)})")
        password = cfg.get("mysql", {}).get("password_file")
        if kind != "Job":
            mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
            secret_mount = os.path.dirname(password or "")
            vol = {v["name"]: v for v in spec["volumes"]}.get(mounts.get(secret_mount), {})
            secret = ctx.docs.named("Secret", vol.get("secret", {}).get("secretName"))
            if not secret or os.path.basename(password) not in secret[0].get("stringData", secret[0].get("data", {})):
                problems.append(f"{where}: mysql.password_file {password!r} is no key of a mounted Secret")
            env = {e["name"]: e for e in c.get("env", [])}
            ref = env.get("SLOTTED_COUNTERD_INSTANCE_ID", {}).get("valueFrom", {}).get("fieldRef", {})
            if ref.get("fieldPath") != "metadata.name" or "instance_id" in cfg:
                problems.append(f"{where}: the instance_id is not the Pod's name (SLOTTED_COUNTERD_INSTANCE_ID "
                                "from metadata.name, none in the ConfigMap)")
            pre = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
            pre_s = int(pre[1]) if len(pre) == 2 and pre[0] == "sleep" else 0
            need = pre_s + duration_seconds(cfg.get("shutdown_timeout", "30s")) + 10
            grace = spec.get("terminationGracePeriodSeconds", 30)
            if grace < need:
                problems.append(f"{where}: terminationGracePeriodSeconds {grace} < preStop {pre_s} s + "
                                f"shutdown_timeout + 10 s = {need:.0f}")
            if cfg.get("listen", {}).get("address") not in ("0.0.0.0", "::"):
                problems.append(f"{where}: listen.address {cfg.get('listen', {}).get('address')} is not every interface")
            ports = [p["containerPort"] for p in c.get("ports", [])]
            if cfg.get("listen", {}).get("port") not in ports:
                problems.append(f"{where}: listen.port is not the container's port {ports}")
        for src in cfg.get("log_sources", []):
            log_dir = os.path.dirname(src["path"])
            mine = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
            others = [m for o in spec["containers"] if o is not c for m in o.get("volumeMounts", [])
                      if m["name"] == mine.get(log_dir) and not m.get("readOnly")]
            if log_dir not in mine or not others:
                problems.append(f"{where}: log source {src['path']} is in no volume another container writes")
    if len(found) < 3:
        problems.append(f"expected the StatefulSet's, the sidecar's and the migrate Job's daemon, found {len(found)}")
    if problems:
        raise Failure("; ".join(problems))
    return (f"{len(found)} daemon containers: image :{ctx.version}, user {uid}, read-only root, WAL volume, "
            "password from the Secret, instance_id from the Pod name, grace period, log volume")


def check_configs(ctx):
    """Each ConfigMap's daemon config is valid for the daemon itself."""
    done = []
    with tempfile.TemporaryDirectory(prefix="slotted-manifests-") as tmp:
        password = os.path.join(tmp, "password")
        with open(password, "w") as f:
            f.write("x\n")
        seen = set()
        for f, kind, name, spec, c, cfg, text in daemon_containers(ctx):
            if text in seen:
                continue
            seen.add(text)
            path = os.path.join(tmp, f"{len(seen)}.yaml")
            # The database: a loopback port nothing listens on (no name to resolve).
            cfg = dict(cfg, mysql=dict(cfg["mysql"], host="127.0.0.1", port=free_port()))
            with open(path, "w") as out:
                yaml.safe_dump(cfg, out)
            r = subprocess.run([ctx.daemon, "--config", path, "--check-config", "--mysql-password-file", password],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
            if r.returncode != 0:
                raise Failure(f"{f}: the config of {name} fails --check-config:\n{r.stdout.decode()[-1500:]}")
            done.append(name)
    return f"--check-config passes for the configs of {', '.join(done)}"


def check_kustomizations(ctx):
    problems = []
    for path in sorted(glob.glob(os.path.join(ctx.root, "**", "kustomization.yaml"), recursive=True)):
        rel_dir = os.path.dirname(os.path.relpath(path, ctx.root))
        with open(path) as f:
            k = yaml.safe_load(f)
        listed = set(k.get("resources", []))
        for r in listed:
            if not os.path.isfile(os.path.join(os.path.dirname(path), r)):
                problems.append(f"{path}: {r} does not exist")
        here = {os.path.basename(p) for p in glob.glob(os.path.join(os.path.dirname(path), "*.yaml"))}
        expected = here - {"kustomization.yaml"} - ({"migrate-job.yaml"} if rel_dir == "" else set())
        if listed != expected:
            problems.append(f"{path}: lists {sorted(listed)}, expected {sorted(expected)}")
    if problems:
        raise Failure("; ".join(problems))
    return "deploy/kubernetes and sidecar/ list their files (not the migrate Job); monitors apart"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", required=True)
    ap.add_argument("--daemon", required=True, help="a slotted-counterd binary, for --check-config")
    args = ap.parse_args()

    class Ctx:
        pass

    ctx = Ctx()
    ctx.source = os.path.abspath(args.source)
    ctx.daemon = os.path.abspath(args.daemon)
    ctx.root = os.path.join(ctx.source, "deploy", "kubernetes")
    with open(os.path.join(ctx.source, "CMakeLists.txt")) as f:
        ctx.version = re.search(r"project\(slotted-counterd VERSION ([0-9.]+)", f.read()).group(1)

    def text(rel):
        with open(os.path.join(ctx.root, rel)) as f:
            return f.read()

    ctx.text = text
    runner = Runner()
    if not runner.run("every file parses as YAML", lambda: setattr(ctx, "docs", Docs(ctx.root))):
        print(f"{runner.passed} passed, {runner.failed} failed")
        return 1

    def template_annotations(kind, name):
        return ctx.docs.named(kind, name)[0]["spec"]["template"]["metadata"].get("annotations", {})

    ctx.template_annotations = template_annotations
    runner.run("API models: kinds, fields, required fields, names", check_api_models, ctx)
    runner.run("Pod templates: volumes, ConfigMaps, Secrets, probe ports", check_pod_templates, ctx)
    runner.run("selectors, the headless Service, the PDB", check_selectors_and_services, ctx)
    runner.run("ServiceMonitor and PodMonitor", check_monitors, ctx)
    runner.run("the daemon's containers", check_daemon_containers, ctx)
    runner.run("the ConfigMaps' configs pass --check-config", check_configs, ctx)
    runner.run("kustomizations", check_kustomizations, ctx)
    print(f"{runner.passed} passed, {runner.failed} failed")
    return 0 if runner.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
