#!/usr/bin/env bash
# Benchmark: the slowdown of coverage mode (launch: every module of the
# program counted, block by block, exactly) against the native run, next
# to valgrind's cachegrind (--cache-sim=no) and callgrind, on CPU-bound
# real programs, in one script run, with the geometric mean.
#
# Usage: bench/coverage_overhead.sh [ROUNDS]      (default 1 round)
#   COVERAGE_BENCH_VARIANTS="native launch"  only these variants
#   COVERAGE_BENCH_LAUNCH=PATH               another build of the harness
#                                            (to compare two commits)
#
# Workloads:
#   xz       xz -9 -T1 of 3 MB of base64 text
#   python   /usr/bin/python3 summing squares in a loop (10,000,000 steps)
#   sqlite   sqlite3 :memory: running a recursive CTE (1,000,000 rows)
#   cc       cc -O2 -c of a generated C file (cc1, as: an exec chain)
# Each variant is timed as a whole command (for coverage: planning every
# module, the run, and collecting the counts). The launch variant is the
# engine's harness (target/release/profdev-coverage-run, what `profdev
# cprof CMD` runs); valgrind is Debian's (apt-get install valgrind), skipped
# when missing. Rounds interleave the variants; medians are shown.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-1}
cargo build --release -q -p profdev-coverage
launch=${COVERAGE_BENCH_LAUNCH:-$PWD/target/release/profdev-coverage-run}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
head -c 2250000 /dev/urandom | base64 >"$work/in.txt"
python=/usr/bin/python3
for i in $(seq 1 400); do
  echo "int f$i(int x) { int s = 0; for (int k = 0; k < x; k++) s += k * $i ^ (s >> 3); return s; }"
done >"$work/gen.c"

variants=(native launch)
command -v valgrind >/dev/null && variants+=(cachegrind callgrind) || echo "bench: valgrind not found: skipped" >&2
if [ -n "${COVERAGE_BENCH_VARIANTS:-}" ]; then
  read -r -a variants <<<"$COVERAGE_BENCH_VARIANTS"
fi
echo "bench: load average $(cut -d' ' -f1-3 /proc/loadavg) at the start" >&2
workloads=(xz python sqlite cc)

run() { # variant, command...
  local v=$1; shift
  case $v in
    native) "$@" ;;
    launch) "$launch" -- "$@" 2>>"$work/launch.log" ;;
    cachegrind) valgrind -q --trace-children=yes --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null "$@" ;;
    callgrind) valgrind -q --trace-children=yes --tool=callgrind --callgrind-out-file=/dev/null "$@" ;;
  esac
}

cmd_of() {
  case $1 in
    xz) echo "xz -9 -T1 -c $work/in.txt" ;;
    python) echo "$python -c s=0\\nfor\\ i\\ in\\ range(2000000):\\ s+=i*i\\nprint(s)" ;;
    sqlite) echo "sqlite3 :memory:" ;;
    cc) echo "cc -O2 -c -o $work/gen.o $work/gen.c" ;;
  esac
}

one() { # variant workload -> seconds
  local v=$1 w=$2 t0 t1
  t0=$(date +%s.%N)
  case $w in
    xz) run "$v" xz -9 -T1 -c "$work/in.txt" >/dev/null ;;
    python) run "$v" "$python" -c $'s=0\nfor i in range(10000000): s+=i*i\nprint(s)' >/dev/null ;;
    sqlite) echo "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<1000000) SELECT sum(x*x%7) FROM c;" | run "$v" sqlite3 :memory: >/dev/null ;;
    cc) run "$v" cc -O2 -c -o "$work/gen.o" "$work/gen.c" ;;
  esac
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc -l
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

declare -A secs
for w in "${workloads[@]}"; do
  for r in $(seq 1 "$rounds"); do
    for v in "${variants[@]}"; do
      secs[$w.$v]+="$(one "$v" "$w") "
    done
  done
done

printf '%-8s' workload
for v in "${variants[@]}"; do printf ' %12s' "$v"; done
printf '\n'
declare -A logsum
for w in "${workloads[@]}"; do
  base=$(tr ' ' '\n' <<<"${secs[$w.native]}" | grep . | median)
  printf '%-8s' "$w"
  for v in "${variants[@]}"; do
    m=$(tr ' ' '\n' <<<"${secs[$w.$v]}" | grep . | median)
    ratio=$(echo "$m / $base" | bc -l)
    logsum[$v]=$(echo "${logsum[$v]:-0} + l($ratio)" | bc -l)
    printf ' %6.2fs %4.2fx' "$m" "$ratio"
  done
  printf '\n'
done
printf '%-8s' geomean
for v in "${variants[@]}"; do
  printf ' %12.2fx' "$(echo "e(${logsum[$v]} / ${#workloads[@]})" | bc -l)"
done
printf '\n'
grep -h "breakpoints were taken" "$work/launch.log" | sed 's/^/launch: /' || true
echo "bench: load average $(cut -d' ' -f1-3 /proc/loadavg) at the end" >&2
