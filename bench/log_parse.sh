#!/bin/sh
# log_sources' parse, match and count rate against mawk on the same 1,000,000-line
# combined log with 1,000 ids (bench/RESULTS.md). Usage: bench/log_parse.sh [LINES]
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
n=${1:-1000000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
g++ -O2 -std=c++20 -I"$here/daemon" "$here/bench/log_parse_bench.cpp" \
  "$here/daemon/logs/line_parser.cpp" "$here/daemon/config/rule_pattern.cpp" -o "$tmp/bench" -lre2
# 80% GET 200 downloads, the rest HEAD, 206, 404 and other paths.
mawk -v n="$n" 'BEGIN { srand(1); for (i = 0; i < n; i++) {
  r = rand(); id = int(rand() * 1000); m = "GET"; s = 200; p = "/downloads/" id "/pkg.tar.gz"
  if (r < 0.05) m = "HEAD"; else if (r < 0.10) s = 206; else if (r < 0.15) s = 404
  else if (r < 0.20) p = "/static/app.js"
  printf "203.0.113.%d - - [26/Nov/2026:10:%02d:%02d +0000] \"%s %s?mirror=eu HTTP/1.1\" %d 5120 \"-\" \"pip/24.0 CPython/3.12\"\n", i % 256, (i / 60) % 60, i % 60, m, p, s } }' > "$tmp/access.log"
ls -l "$tmp/access.log" | awk '{ print "file bytes", $5 }'
for run in 1 2 3; do
  taskset -c 0 "$tmp/bench" "$tmp/access.log" '^/downloads/([0-9]+)/'
  /usr/bin/time -f "mawk seconds %e" taskset -c 0 mawk '$9 == 200 && $6 == "\"GET" { c[$7]++ } END { print "mawk ids", length(c) }' "$tmp/access.log"
done
