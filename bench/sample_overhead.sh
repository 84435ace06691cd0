#!/usr/bin/env bash
# Benchmark: a CPU-bound workload's slowdown under `profdev sample -F 1000`
# and under `perf record -a -F 1000` (Debian's linux-perf), against no
# profiling, measured in one run; then the time `profdev kprof` takes on a
# full-kernel kpdata, against `perf report` on the same run's perf.data.
#
# Usage: bench/sample_overhead.sh [ROUNDS]      (as root; default 5 rounds)
#
# Recipe: the workload is `sha256sum` over a 256 MiB file in /dev/shm (user
# mode, CPU bound, no I/O), run 4 times, timed inside the profiled command
# so that profiler start-up and post-processing are not counted as slowdown;
# the whole command's wall time (profiler included) is reported too. Rounds
# interleave the three variants so drift hits all of them alike; medians
# are compared.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
command -v perf >/dev/null || { echo "bench: perf not found (apt-get install linux-perf)" >&2; exit 1; }
cargo build --release -q -p profdev
profdev=$PWD/target/release/profdev
work=$(mktemp -d)
trap 'rm -rf "$work" /dev/shm/profdev-bench.dat' EXIT
head -c 256M /dev/urandom >/dev/shm/profdev-bench.dat

cat >"$work/workload.sh" <<'W'
#!/bin/sh
s=$(date +%s%N)
for i in 1 2 3 4; do sha256sum /dev/shm/profdev-bench.dat >/dev/null; done
e=$(date +%s%N)
echo $(( (e - s) / 1000 )) >"$1"
W
chmod +x "$work/workload.sh"

now() { date +%s%N; }
declare -A inner outer
for r in $(seq "$rounds"); do
  for v in none profdev perf; do
    s=$(now)
    case $v in
      none) "$work/workload.sh" "$work/t" ;;
      profdev) "$profdev" sample -F 1000 -o "$work/pd" -- "$work/workload.sh" "$work/t" >"$work/pd.txt" 2>"$work/pd.err" ;;
      perf) perf record -q -a -e cpu-clock -F 1000 -o "$work/perf.data" -- "$work/workload.sh" "$work/t" >/dev/null 2>&1 ;;
    esac
    e=$(now)
    inner[$v]+="$(cat "$work/t") "
    outer[$v]+="$(( (e - s) / 1000 )) "
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
declare -A mi mo
for v in none profdev perf; do
  mi[$v]=$(echo "${inner[$v]}" | median)
  mo[$v]=$(echo "${outer[$v]}" | median)
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }

echo "workload: 4 x sha256sum of 256 MiB, $rounds rounds, medians, $(nproc) CPUs, $(uname -r)"
printf '%-28s %12s %10s %14s %10s\n' variant "workload µs" "slowdown" "command µs" "ratio"
for v in none profdev perf; do
  printf '%-28s %12s %10s %14s %10s\n' "$v" "${mi[$v]}" "$(ratio "${mi[$v]}" "${mi[none]}")" "${mo[$v]}" "$(ratio "${mo[$v]}" "${mo[none]}")"
done
echo "profdev/perf workload-time ratio: $(ratio "${mi[profdev]}" "${mi[perf]}")"
echo "profdev/perf whole-command ratio: $(ratio "${mo[profdev]}" "${mo[perf]}")"

# Formatting a full-kernel profile: profdev kprof on the kpdata just
# written, against perf report on the perf.data of the same workload.
words=$(( $(stat -c %s "$work/pd/kpdata") / 4 ))
syms=$(wc -l </proc/kallsyms)
t() { local s; s=$(now); "$@" >/dev/null 2>&1; echo $(( ($(now) - s) / 1000 )); }
kp=(); pr=()
for r in $(seq "$rounds"); do
  kp+=("$(t "$profdev" kprof /proc/kallsyms "$work/pd/kpdata")")
  pr+=("$(t perf report -i "$work/perf.data" --stdio --sort sym)")
done
k=$(echo "${kp[*]}" | median); p=$(echo "${pr[*]}" | median)
echo "profdev kprof on a full-kernel kpdata ($words buckets, $syms symbols): $k µs"
echo "perf report --stdio --sort sym on the same workload: $p µs"
echo "profdev kprof / perf report time ratio: $(ratio "$k" "$p")"
