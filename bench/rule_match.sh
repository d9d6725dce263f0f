#!/bin/sh
# Rule patterns matched by boost::regex and by RE2 side by side (bench/RESULTS.md, issue
# 39, Linear-time matching). Usage: bench/rule_match.sh [SCALE]
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
g++ -O2 -std=c++20 "$here/bench/rule_match_bench.cpp" -o "$tmp/bench" -lre2
taskset -c 0 "$tmp/bench" "${1:-1}"
