#!/usr/bin/env bash
# bench/test_processes.sh: what a process per test costs against a process per suite,
# measured side by side with one build (issue 41: the full run's time).
#
#   bench/test_processes.sh BUILD_DIR [ROUNDS] [SUITE_REGEX]
#
# Runs the same tests of BUILD_DIR/tests/unit_tests, then of integration_tests (only the
# suites matching SUITE_REGEX, default a few that start MariaDB and PostgreSQL), two at a
# time as ctest -j 2 does, each way in turn (A B B A per round): A, one process per test
# (each integration test starts its own servers); B, one process per suite (its tests
# share them). Prints the wall clock and the CPU time (user + system, children
# included) of each, and the ratios. Run it with nothing else busy on the machine.
set -euo pipefail
build=${1:?usage: bench/test_processes.sh BUILD_DIR [ROUNDS] [SUITE_REGEX]}
rounds=${2:-1}
suites=${3:-'^(Rollup|Ledger|Transaction|BucketsOnEngines|Pipeline)$'}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export SLOTTED_REQUIRE_POSTGRESQL=1
export PATH="$PATH:/usr/sbin:/sbin"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# "Suite.Test" per line, and "Suite" per line, of a binary (suites filtered by $2).
list() {
  "$1" --gtest_list_tests 2>/dev/null | sed 's/  #.*//' | awk -v re="$2" '
    /^[^ ]/ { suite = substr($1, 1, length($1) - 1); keep = suite ~ re; if (keep) print suite > "/dev/stderr"; next }
    keep && /^  / { print suite "." $1 }'
}
# Runs each line of file $2 as --gtest_filter=LINE(.*) of binary $1, two at a time.
run_each() {
  local binary=$1 lines=$2 suffix=$3
  xargs -P 2 -I{} sh -c "\"$binary\" --gtest_filter='{}$suffix' >/dev/null 2>&1 || echo 'FAILED: {}' >&2" <"$lines"
}
# CPU ticks of this shell and the children it waited for (utime + stime + cutime + cstime;
# read in this shell into TICKS: a $(...) would read its own subshell's).
ticks() {
  local st
  read -r -a st </proc/$BASHPID/stat
  TICKS=$((st[13] + st[14] + st[15] + st[16]))
}
# Wall and CPU seconds of one way: prints "WALL CPU".
measure() {
  local start end t0 t1
  ticks
  t0=$TICKS
  start=$(date +%s.%N)
  "$@"
  end=$(date +%s.%N)
  ticks
  t1=$TICKS
  echo "$(echo "$end - $start" | bc) $(echo "($t1 - $t0) / $(getconf CLK_TCK)" | bc -l)"
}

for kind in unit_tests integration_tests; do
  binary="$build/tests/$kind"
  re='.*'
  [ "$kind" = integration_tests ] && re=$suites
  list "$binary" "$re" >"$work/tests" 2>"$work/suites"
  echo "$kind: $(wc -l <"$work/tests") tests in $(wc -l <"$work/suites") suites"
  declare -A wall=() cpu=()
  for ((r = 1; r <= rounds; r++)); do
    for way in A B B A; do
      if [ "$way" = A ]; then
        read -r w c < <(measure run_each "$binary" "$work/tests" "")
      else
        read -r w c < <(measure run_each "$binary" "$work/suites" ".*")
      fi
      printf '  round %d %s: wall %6.1f s, cpu %6.1f s\n' "$r" "$way" "$w" "$c"
      wall[$way]=$(echo "${wall[$way]:-0} + $w" | bc -l)
      cpu[$way]=$(echo "${cpu[$way]:-0} + $c" | bc -l)
    done
  done
  printf '  per suite / per test: wall %.2f, cpu %.2f\n' \
    "$(echo "${wall[B]} / ${wall[A]}" | bc -l)" "$(echo "${cpu[B]} / ${cpu[A]}" | bc -l)"
  unset wall cpu
done
