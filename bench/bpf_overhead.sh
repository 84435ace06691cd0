#!/usr/bin/env bash
# Benchmark: does counting kpdata in the kernel (`profdev sample --bpf`)
# pay? A CPU-bound workload's slowdown at -F 1000 and -F 10000 under
#   none     no profiling
#   ring     `profdev sample` (samples through the perf mmap rings)
#   bpf      `profdev sample --bpf` (in-kernel BPF histogram, no rings)
#   perf     `perf record -a -e cpu-clock` (Debian's linux-perf)
# measured in one run.
#
# Usage: bench/bpf_overhead.sh [ROUNDS]      (as root; default 3 rounds)
#
# Recipe: as bench/sample_overhead.sh: `sha256sum` of a 256 MiB file in
# /dev/shm, run 4 times, timed inside the profiled command so profiler
# start-up and post-processing are not counted; the whole command's wall
# time is reported too. Rounds interleave the variants so drift hits all of
# them alike; medians are compared against `none`.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
command -v perf >/dev/null || { echo "bench: perf not found (apt-get install linux-perf)" >&2; exit 1; }
cargo build --release -q -p profdev
profdev=${CARGO_TARGET_DIR:-$PWD/target}/release/profdev
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
variants="none ring bpf perf"
declare -A inner outer
for r in $(seq "$rounds"); do
  for f in 1000 10000; do
    for v in $variants; do
      s=$(now)
      case $v in
        none) "$work/workload.sh" "$work/t" ;;
        ring) "$profdev" sample -F $f -o "$work/pd" -- "$work/workload.sh" "$work/t" >"$work/pd.txt" 2>"$work/pd.err" ;;
        bpf) "$profdev" sample --bpf -F $f -o "$work/pb" -- "$work/workload.sh" "$work/t" >"$work/pb.txt" 2>"$work/pb.err" ;;
        perf) perf record -q -a -e cpu-clock -F $f -o "$work/perf.data" -- "$work/workload.sh" "$work/t" >/dev/null 2>&1 ;;
      esac
      e=$(now)
      inner[$v.$f]+="$(cat "$work/t") "
      outer[$v.$f]+="$(( (e - s) / 1000 )) "
    done
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
echo "workload: 4 x sha256sum of 256 MiB, $rounds rounds, medians, $(nproc) CPUs, $(uname -r)"
for f in 1000 10000; do
  echo
  echo "-F $f"
  printf '%-8s %12s %10s %14s %10s\n' variant "workload µs" "slowdown" "command µs" "ratio"
  declare -A mi mo
  for v in $variants; do
    mi[$v]=$(echo "${inner[$v.$f]}" | median)
    mo[$v]=$(echo "${outer[$v.$f]}" | median)
  done
  for v in $variants; do
    printf '%-8s %12s %10s %14s %10s\n' "$v" "${mi[$v]}" "$(ratio "${mi[$v]}" "${mi[none]}")" "${mo[$v]}" "$(ratio "${mo[$v]}" "${mo[none]}")"
  done
  echo "bpf/ring workload-time ratio: $(ratio "${mi[bpf]}" "${mi[ring]}"); bpf/perf: $(ratio "${mi[bpf]}" "${mi[perf]}")"
  echo "bpf/ring whole-command ratio: $(ratio "${mo[bpf]}" "${mo[ring]}"); bpf/perf: $(ratio "${mo[bpf]}" "${mo[perf]}")"
  unset mi mo
done
