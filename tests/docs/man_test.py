#!/usr/bin/env python3
"""The man pages and the configuration reference against the code.

    python3 tests/docs/man_test.py --daemon build/slotted-counterd --source . \
        --config-keys build/tests/config_keys

- slotted-counterd(8) (packaging/slotted-counterd.8) names every option the built
  binary's --help prints;
- docs/configuration.md's key table names every key of the config's key table
  (daemon/config/config_keys.cpp, printed by tests/docs/config_keys), which drives the
  parser and plan_reload(), and no other; its type, default, reload and integer bounds
  columns are the table's;
- packaging/slotted-counterd.yaml.5 is what scripts/gen-man makes of that table;
- config/slotted-counterd.yaml passes the built binary's --check-config, and names only
  keys of the table; so does every YAML config shown in README.md and docs/.
Needs no database. Prints one line per check and ends with "N passed, M failed".
"""
import argparse
import os
import re
import subprocess
import sys

try:
    import yaml
except ImportError:  # an interpreter without PyYAML (e.g. a pyenv one): Debian's has it
    if sys.executable != "/usr/bin/python3" and os.path.exists("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    raise

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ops"))
from ops_test import Failure, Runner  # noqa: E402

def read(*parts):
    with open(os.path.join(*parts)) as f:
        return f.read()


def code_keys(ctx):
    """The config's key table (daemon/config/config_keys.cpp), as tests/docs/config_keys
    prints it: key -> {type, default, reload, bounds}."""
    out = subprocess.run([ctx.config_keys], stdout=subprocess.PIPE, check=True, timeout=30).stdout
    keys = {}
    for line in out.decode().splitlines():
        key, type_, default, reload, bounds = line.split("\t")
        keys[key] = {"type": type_, "default": default, "reload": reload, "bounds": bounds}
    return keys


def documented_code_keys(ctx):
    """The keys of the code table the reference documents: all but sections, whose
    leaves it documents (counters[].buckets by counters[].buckets.hour and .day)."""
    keys = code_keys(ctx)
    return {k: v for k, v in keys.items() if not any(o.startswith(k + ".") for o in keys)}


def table_rows(source):
    text = read(source, "docs", "configuration.md")
    section = text.split("\n## Keys\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0].strip("`")] = cells
    return rows


def check_options(ctx):
    out = subprocess.run([ctx.daemon, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         timeout=10).stdout.decode()
    options = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*|-h)\b", out))
    if "--config" not in options:
        raise Failure(f"--help prints no --config: {out!r}")
    page = read(ctx.source, "packaging", "slotted-counterd.8").replace("\\-", "-")
    options_section = page.split(".SH OPTIONS", 1)[1].split(".SH ", 1)[0]
    synopsis = page.split(".SH SYNOPSIS", 1)[1].split(".SH ", 1)[0]
    command_line = read(ctx.source, "docs", "configuration.md").split("## Command line", 1)[1].split("\n## ", 1)[0]

    def lacking(text):
        return sorted(o for o in options if o != "-h" and not re.search(r"(?<![\w-])" + re.escape(o) + r"\b", text))
    problems = []
    for where, text in (("the man page's OPTIONS", options_section), ("the man page's SYNOPSIS", synopsis),
                        ("configuration.md, Command line", command_line)):
        if lacking(text):
            problems.append(f"options --help prints that {where} lacks: {lacking(text)}")
    # Every option with a value takes --option=value too (issue 40: --adopt=NAME was refused).
    for option, value in (("--adopt", "x"), ("--grant-host", "h"), ("--mysql-user", "u"),
                          ("--mysql-password-file", "/nonexistent"), ("--config", "/nonexistent")):
        r = subprocess.run([ctx.daemon, f"{option}={value}", "--version"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=10)
        if b"unknown argument" in r.stdout:
            problems.append(f"{option}={value} is refused as unknown")
    if problems:
        raise Failure("; ".join(problems))
    return f"{len(options)} options: {' '.join(sorted(options))}"


def unquoted(cell):
    return cell.replace("`", "")


def check_keys(ctx):
    accepted = set(documented_code_keys(ctx))
    documented = set(table_rows(ctx.source))
    problems = []
    if accepted - documented:
        problems.append(f"in the key table (daemon/config/config_keys.cpp), not in docs/configuration.md: {sorted(accepted - documented)}")
    if documented - accepted:
        problems.append(f"in docs/configuration.md, not in the key table (daemon/config/config_keys.cpp): {sorted(documented - accepted)}")
    if problems:
        raise Failure("; ".join(problems))
    return f"{len(accepted)} keys"


def check_columns(ctx):
    """Type, default, reload and (integers) bounds: the documented ones are the table's."""
    code = documented_code_keys(ctx)
    wrong = []
    for key, cells in table_rows(ctx.source).items():
        row = code.get(key)
        if row is None:
            continue  # check_keys reports it
        said = cells[4] or "refused"  # mysql.password: refused, nothing to reload
        if said != row["reload"]:
            wrong.append(f"{key}: documented reload {said}, the key table says {row['reload']}")
        if unquoted(cells[1]) != row["type"]:
            wrong.append(f"{key}: documented type {cells[1]!r}, the key table says {row['type']!r}")
        if unquoted(cells[2]) != row["default"]:
            wrong.append(f"{key}: documented default {cells[2]!r}, the key table says {row['default']!r}")
        if row["bounds"] and not unquoted(cells[3]).startswith(row["bounds"]):
            wrong.append(f"{key}: documented bounds {cells[3]!r}, the key table says {row['bounds']}")
    if wrong:
        raise Failure("; ".join(wrong))
    return f"{len(code)} rows agree with the key table"


def check_generated_page(ctx):
    r = subprocess.run([sys.executable, os.path.join(ctx.source, "scripts", "gen-man"), "--check"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
    if r.returncode != 0:
        raise Failure(r.stdout.decode())
    page = read(ctx.source, "packaging", "slotted-counterd.yaml.5").replace("\\-", "-")
    missing = [k for k in table_rows(ctx.source) if f".B {k}\n" not in page]
    if missing:
        raise Failure(f"keys missing from slotted-counterd.yaml.5: {missing}")
    return "packaging/slotted-counterd.yaml.5 is current"


def yaml_paths(node, prefix=""):
    if isinstance(node, dict):
        for k, v in node.items():
            path = f"{prefix}{k}"
            yield path
            yield from yaml_paths(v, path + ".")
    elif isinstance(node, list):
        for item in node:
            yield from yaml_paths(item, prefix[:-1] + "[].")


def check_example(ctx):
    example = os.path.join(ctx.source, "config", "slotted-counterd.yaml")
    r = subprocess.run([ctx.daemon, "--config", example, "--check-config"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=60)
    if r.returncode != 0:
        raise Failure(f"--check-config exited {r.returncode}: {r.stdout.decode()[-1500:]}")
    documented = set(table_rows(ctx.source))
    sections = {"listen", "http", "mysql", "mysql.tls", "flush", "rollup", "wal", "idempotency",
                "log", "counters[].rollup", "counters[].buckets"}
    with open(example) as f:
        paths = set(yaml_paths(yaml.safe_load(f)))
    unknown = sorted(p for p in paths - sections if p not in documented)
    if unknown:
        raise Failure(f"the example names keys docs/configuration.md does not: {unknown}")
    # It claims every key: each documented key shows up in it, set or in a comment
    # (issue 40: log_sources, counters[].top and counters[].dedupe were missing).
    with open(example) as f:
        text = f.read()
    absent = sorted(k for k in documented if not k.endswith(".password") and not re.search(
        r"(?<![\w.])" + re.escape(k.split(".")[-1].replace("[]", "")) + ":", text))
    if absent:
        raise Failure(f"documented keys the example shows nowhere, not even in a comment: {absent}")
    return f"--check-config exits 0; {len(paths)} key paths, all documented; every documented key shown"


def check_doc_configs(ctx):
    """Every YAML config shown in README.md and docs/*.md passes --check-config (the
    database pointed at a closed port, secrets at a scratch file)."""
    import socket
    import tempfile
    files = [os.path.join(ctx.source, "README.md")] + sorted(
        os.path.join(ctx.source, "docs", f) for f in os.listdir(os.path.join(ctx.source, "docs"))
        if f.endswith(".md"))
    top = {k.split(".")[0].split("[")[0] for k in table_rows(ctx.source)}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]  # closed again when the block ends
    checked, problems = 0, []
    with tempfile.TemporaryDirectory() as tmp:
        secret = os.path.join(tmp, "secret")
        with open(secret, "w") as f:
            f.write("x\n")
        for path in files:
            text = read(path)
            blocks = re.findall(r"```yaml\n(.*?)```", text, re.S) + \
                re.findall(r"<<'YAML'\n(.*?)\nYAML\n", text, re.S)  # heredocs in shell blocks
            for block in blocks:
                try:
                    doc = yaml.safe_load(block)
                except yaml.YAMLError as e:
                    problems.append(f"{os.path.basename(path)}: a yaml block does not parse: {e}")
                    continue
                if not isinstance(doc, dict) or not set(doc) <= top:
                    continue  # not a daemon config
                mysql = doc.setdefault("postgresql" if "postgresql" in doc else "mysql", {})
                mysql.pop("socket", None)
                mysql.pop("hosts", None)
                mysql.update({"host": "127.0.0.1", "port": closed_port})
                if "password_file" in mysql:
                    mysql["password_file"] = secret
                if doc.get("http", {}).get("auth_token_file"):
                    doc["http"]["auth_token_file"] = secret
                conf = os.path.join(tmp, "c.yaml")
                with open(conf, "w") as f:
                    yaml.safe_dump(doc, f)
                r = subprocess.run([ctx.daemon, "--config", conf, "--check-config"], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, timeout=60)
                checked += 1
                if r.returncode != 0:
                    problems.append(f"{os.path.basename(path)}: {block.strip()[:80]!r}: "
                                    f"{r.stdout.decode()[-300:]}")
    if problems:
        raise Failure("; ".join(problems))
    return f"{checked} config blocks pass --check-config"


# Pages issue 22 adds in parallel; linked already.
PENDING_PAGES = {"docs/production.md", "docs/adopting.md"}


def slug(heading):
    """GitHub's anchor for a heading."""
    h = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return h.replace(" ", "-")


def check_links(ctx):
    """Every relative link in README.md, CONTRIBUTING.md, CHANGELOG.md and docs/*.md points
    at a file that exists, and its #anchor at a heading of that file."""
    pages = ["README.md", "CONTRIBUTING.md", "CHANGELOG.md"] + sorted(
        "docs/" + f for f in os.listdir(os.path.join(ctx.source, "docs")) if f.endswith(".md"))
    broken, n = [], 0
    for page in pages:
        text = read(ctx.source, page)
        text = re.sub(r"```.*?```", "", text, flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            n += 1
            path, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if resolved in PENDING_PAGES and not os.path.exists(os.path.join(ctx.source, resolved)):
                continue
            full = os.path.join(ctx.source, resolved)
            if not os.path.exists(full):
                broken.append(f"{page}: {target} (no {resolved})")
                continue
            if anchor and resolved.endswith(".md"):
                heads = {slug(h) for h in re.findall(r"^#+ (.*)$", read(full), re.M)}
                if anchor not in heads:
                    broken.append(f"{page}: {target} (no heading #{anchor})")
    if broken:
        raise Failure("; ".join(broken))
    return f"{n} links resolve"


def check_readme_pointers(ctx):
    """What is shipped to users (the config, the units, the man pages, docs/) points at
    sections by the page that holds them now; README.md keeps no reference sections, so a
    "README: Section" pointer is stale (issue 40)."""
    files = ["config/slotted-counterd.yaml", "systemd/slotted-counterd.service", "systemd/slotted-counterd.socket",
             "packaging/slotted-counterd.8"] + sorted(
        "docs/" + f for f in os.listdir(os.path.join(ctx.source, "docs")) if f.endswith(".md"))
    heads = set(re.findall(r"^#+ (.*)$", read(ctx.source, "README.md"), re.M))
    stale = []
    for f in files:
        for n, line in enumerate(read(ctx.source, f).splitlines(), 1):
            for m in re.finditer(r"\bREADME[:,] ?\(?([A-Z][\w -]+)", line):
                if m.group(1).strip() not in heads:
                    stale.append(f"{f}:{n}: README: {m.group(1).strip()}")
    if stale:
        raise Failure("pointers to README sections that do not exist: " + "; ".join(stale))
    return f"{len(files)} shipped files, no stale README pointer"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--config-keys", required=True,
                    help="tests/docs/config_keys: prints the config's key table")
    args = ap.parse_args()

    class Ctx:
        pass
    ctx = Ctx()
    ctx.daemon = os.path.abspath(args.daemon)
    ctx.source = os.path.abspath(args.source)
    ctx.config_keys = os.path.abspath(args.config_keys)
    runner = Runner()
    runner.run("man 8: every --help option", check_options, ctx)
    runner.run("configuration.md: every key of the key table, no other", check_keys, ctx)
    runner.run("configuration.md: type, default, bounds and reload columns", check_columns, ctx)
    runner.run("man 5: generated from configuration.md", check_generated_page, ctx)
    runner.run("example config: accepted and documented", check_example, ctx)
    runner.run("docs: every config shown is accepted", check_doc_configs, ctx)
    runner.run("docs: every relative link resolves", check_links, ctx)
    runner.run("shipped files: no stale README section pointer", check_readme_pointers, ctx)
    print(f"{runner.passed} passed, {runner.failed} failed", flush=True)
    return 1 if runner.failed else 0


if __name__ == "__main__":
    sys.exit(main())
