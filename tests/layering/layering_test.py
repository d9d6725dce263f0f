#!/usr/bin/env python3
"""The include graph of daemon/ against its declared layers (daemon/LAYERS).

    python3 tests/layering/layering_test.py --source .

Reads every `#include "..."` line of daemon/ (no compiler, no build; quick) and fails:
- on a folder of daemon/ that daemon/LAYERS does not name (add it at its layer);
- on an include of a folder from a folder of a lower layer, or of another folder of the
  same layer (folders of one layer are independent of each other);
- on a cycle between folders (which the two rules above already forbid; checked on its
  own so that the message names the whole cycle);
- on a third-party header (`#include <...>`) outside the folder that wraps it:
  MySQL/MariaDB client headers (<mysql.h>, <mysql/...>, <errmsg.h>, <mysqld_error.h>)
  and libpq's (<libpq-fe.h>) only in db/, Boost.Beast (<boost/beast...>) only in http/, prometheus-cpp
  (<prometheus/...>) only in metrics/: the rest of the daemon sees our own types;
- on an include of db/ from http/ (the router reads through its backend interface);
- on SQL text (a string literal holding SELECT, INSERT INTO, UPDATE ... SET, DELETE
  FROM, CREATE TABLE) outside db/: every statement is built in db/, the other folders
  call its builders;
- on a plain std::mutex (or another std:: mutex type) outside daemon/util/: every mutex
  of the daemon is a util::mutex (util/thread_annotations.hpp), whose GUARDED_BY and
  REQUIRES clang checks (issue 41); comments may still name std::mutex;
- when CONTRIBUTING.md's Layout does not list daemon/LAYERS' layers, in its order.
An include is matched to daemon/<folder>/ by its first path component; includes with no
folder name a file of the including folder or a generated header (version.hpp).
Prints each offending include with its file and line, and ends with "N passed, M failed".
"""
import argparse
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
PLAIN_MUTEX = re.compile(
    r"\bstd::(recursive_|timed_|recursive_timed_|shared_|shared_timed_)?mutex\b")
SOURCES = (".hpp", ".cpp", ".h", ".cc", ".in")
SYSTEM_INCLUDE = re.compile(r'^\s*#\s*include\s+<([^>]+)>')
# (what, the pattern of its headers, the one folder that may include them)
THIRD_PARTY = (
    ("MySQL client", re.compile(r"^(mysql\.h$|mysql/|errmsg\.h$|mysqld_error\.h$)"), "db"),
    ("PostgreSQL client", re.compile(r"^(libpq-fe\.h$|libpq/|pg_config)"), "db"),
    ("Boost.Beast", re.compile(r"^boost/beast"), "http"),
    ("prometheus-cpp", re.compile(r"^prometheus/"), "metrics"),
)
# (folder, folder it must not include although the layers allow it, why)
FORBIDDEN = (("http", "db", "http/ reads through its backend interface (app/ wires db/)"),)
STRING_LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')
SQL_TEXT = re.compile(r"\b(SELECT\b|INSERT\s+INTO\b|UPDATE\s+\S+\s+SET\b|DELETE\s+FROM\b|"
                      r"CREATE\s+TABLE\b)")


def read_layers(path):
    """daemon/LAYERS: one layer a line, lowest first, naming its folders; # comments."""
    layers = {}
    level = 0
    with open(path) as f:
        for number, raw in enumerate(f, 1):
            words = raw.split("#", 1)[0].split()
            if not words:
                continue
            for folder in words:
                if folder in layers:
                    raise SystemExit(f"{path}:{number}: {folder} named twice")
                layers[folder] = level
            level += 1
    return layers


def folder_of(daemon, path):
    rel = os.path.relpath(path, daemon)
    parts = rel.split(os.sep)
    return parts[0] if len(parts) > 1 else "main"


def include_edges(daemon):
    """(from folder, to folder, file:line, include) for every include between folders."""
    folders = {d for d in os.listdir(daemon) if os.path.isdir(os.path.join(daemon, d))}
    edges = []
    for top, _, files in os.walk(daemon):
        for name in sorted(files):
            if not name.endswith(SOURCES):
                continue
            path = os.path.join(top, name)
            source = folder_of(daemon, path)
            with open(path, errors="replace") as f:
                for number, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m or "/" not in m.group(1):
                        continue
                    target = m.group(1).split("/", 1)[0]
                    if target in folders and target != source:
                        where = f"{os.path.relpath(path, os.path.dirname(daemon))}:{number}"
                        edges.append((source, target, where, m.group(1)))
    return folders, edges


def plain_mutexes(daemon):
    """file:line of each std:: mutex outside daemon/util/ (text after // left out)."""
    found = []
    for top, _, files in os.walk(daemon):
        if folder_of(daemon, os.path.join(top, "x")) == "util":
            continue
        for name in sorted(files):
            if not name.endswith(SOURCES):
                continue
            path = os.path.join(top, name)
            with open(path, errors="replace") as f:
                for number, line in enumerate(f, 1):
                    m = PLAIN_MUTEX.search(line.split("//", 1)[0])
                    if m:
                        where = f"{os.path.relpath(path, os.path.dirname(daemon))}:{number}"
                        found.append(f"{where}: {m.group(0)}: use util::mutex "
                                     "(util/thread_annotations.hpp) and mark what it guards")
    return found


def source_lines(daemon, skip=None):
    """(file:line, line) of every source line of daemon/ outside folder `skip`."""
    for top, _, files in os.walk(daemon):
        if skip and folder_of(daemon, os.path.join(top, "x")) == skip:
            continue
        for name in sorted(files):
            if name.endswith(SOURCES):
                path = os.path.join(top, name)
                with open(path, errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        yield (f"{os.path.relpath(path, os.path.dirname(daemon))}:{number}",
                               folder_of(daemon, path), line)


def third_party_includes(daemon):
    """file:line of each third-party header included outside its folder."""
    found = []
    for where, folder, line in source_lines(daemon):
        m = SYSTEM_INCLUDE.match(line)
        if not m:
            continue
        for what, pattern, owner in THIRD_PARTY:
            if pattern.search(m.group(1)) and folder != owner:
                found.append(f"{where}: #include <{m.group(1)}>: only daemon/{owner}/ includes "
                             f"{what} headers; {folder}/ uses our own types")
    return found


def sql_outside_db(daemon):
    """file:line of each string literal holding SQL text outside daemon/db/."""
    found = []
    for where, _, line in source_lines(daemon, skip="db"):
        code = line.split("//", 1)[0]
        if SYSTEM_INCLUDE.match(code) or INCLUDE.match(code):
            continue
        for literal in STRING_LITERAL.findall(code):
            m = SQL_TEXT.search(literal)
            if m:
                found.append(f"{where}: \"{literal[:40]}\": SQL text ({m.group(1)}) only "
                             "in daemon/db/")
                break
    return found


def find_cycle(graph):
    """One cycle of folders as a list (first == last), or None."""
    state = {}
    stack = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def contributing_layers(path):
    """The layers CONTRIBUTING.md's Layout lists: the lines of its `daemon/` entry that
    hold only folders (`name/ name/`), one layer a line, lowest first."""
    with open(path) as f:
        text = f.read()
    block = text.split("## Layout", 1)[-1].split("```")[1]
    layers, inside = [], False
    for line in block.splitlines():
        if line.startswith("daemon/"):
            inside = True
            continue
        if inside and line and not line.startswith(" "):
            break
        if inside and re.fullmatch(r"\s+([a-z]+/\s*)+", line):
            layers.append(re.findall(r"([a-z]+)/", line))
    return layers


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", required=True, help="the repository's root")
    args = parser.parse_args()
    daemon = os.path.join(os.path.abspath(args.source), "daemon")
    layers = read_layers(os.path.join(daemon, "LAYERS"))
    folders, edges = include_edges(daemon)
    checks = {"every folder named in daemon/LAYERS": [], "no include against the layers": [],
              "no cycle between folders": [],
              "no std:: mutex outside daemon/util/": plain_mutexes(daemon),
              "third-party headers only in their folder": third_party_includes(daemon),
              "no include a folder's rule forbids": [],
              "no SQL text outside daemon/db/": sql_outside_db(daemon),
              "CONTRIBUTING.md's Layout is daemon/LAYERS": []}

    named = checks["every folder named in daemon/LAYERS"]
    for folder in sorted((folders | {"main"}) - set(layers)):
        named.append(f"daemon/{folder}/ is not named in daemon/LAYERS: add it at its layer")
    for folder in sorted(set(layers) - folders - {"main"}):
        named.append(f"daemon/LAYERS names {folder}, which daemon/ does not have")

    order = checks["no include against the layers"]
    for source, target, where, include in edges:
        if source not in layers or target not in layers:
            continue
        if layers[target] > layers[source]:
            order.append(f"{where}: #include \"{include}\": {source} (layer {layers[source]}) "
                         f"includes {target}, of a higher layer ({layers[target]})")
        elif layers[target] == layers[source]:
            order.append(f"{where}: #include \"{include}\": {source} includes {target}, "
                         f"of its own layer ({layers[source]}): one of them belongs lower")

    for source, target, where, include in edges:
        for folder, forbidden, why in FORBIDDEN:
            if (source, target) == (folder, forbidden):
                checks["no include a folder's rule forbids"].append(
                    f"{where}: #include \"{include}\": {why}")

    graph = {}
    for source, target, _, _ in edges:
        graph.setdefault(source, set()).add(target)
    cycle = find_cycle(graph)
    if cycle:
        checks["no cycle between folders"].append("folder cycle: " + " -> ".join(cycle))

    listed = contributing_layers(os.path.join(os.path.abspath(args.source), "CONTRIBUTING.md"))
    declared = []
    for folder, level in sorted(layers.items(), key=lambda item: item[1]):
        if folder == "main":
            continue
        if len(declared) <= level:
            declared.append([])
        declared[level].append(folder)
    if [sorted(layer) for layer in listed] != [sorted(layer) for layer in declared]:
        checks["CONTRIBUTING.md's Layout is daemon/LAYERS"].append(
            f"CONTRIBUTING.md lists {listed}; daemon/LAYERS declares {declared}")

    failed = 0
    for name, failures in checks.items():
        print(("FAIL " if failures else "ok   ") + name)
        for line in failures:
            print("     " + line)
        failed += bool(failures)
    print(f"{len(edges)} includes between {len(folders)} folders read")
    print(f"{len(checks) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
