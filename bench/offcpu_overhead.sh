#!/usr/bin/env bash
# Benchmark: what recording off-CPU time costs a switch-heavy workload.
# `profdev record -g --off-cpu` against `perf sched record` (Debian's
# linux-perf: the scheduler's tracepoints, system wide) and libbpf-tools'
# `offcputime` (Debian's libbpf-tools: in-kernel aggregation by BPF), and
# for reference the on-CPU sampling alone, `profdev record -g` and `perf
# record -F 1000 -g` (both sample the command's threads at 1000 Hz), each
# against the native run, measured in one run. (This perf is built without BPF
# skeletons, so its own `record --off-cpu` records nothing here.)
#
# Usage: bench/offcpu_overhead.sh [ROUNDS] [WORK]    (as root; default 5 rounds, WORK 430000)
#
# Recipe: bench/switchy.c computes for WORK loop steps, then hands a byte
# to a second thread through a pipe and waits for it to come back, 20,000
# times: with WORK 430000 about 10,000 context switches a second on this
# VM (the script prints the rate it measured). The rounds' time is
# measured inside the program, so profiler start-up and post-processing
# do not count as slowdown; the whole command's wall time is reported
# too. Variants interleave within each round; medians are compared.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
work_steps=${2:-430000}
for t in perf offcputime gcc; do
  command -v "$t" >/dev/null || { echo "bench: $t not found (apt-get install linux-perf libbpf-tools gcc)" >&2; exit 1; }
done
cargo build --release -q -p profdev
profdev=$PWD/target/release/profdev
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -g -fno-omit-frame-pointer -pthread bench/switchy.c -o "$work/switchy"
run=("$work/switchy" 20000 "$work_steps")

# offcputime runs system wide beside the workload: started first, the
# workload runs once its BPF programs are attached (its descriptors), and
# it is stopped with SIGINT (it prints its stacks then).
offcpu() {
  offcputime >"$work/offcpu.txt" 2>"$work/offcpu.err" &
  local pid=$! n=0
  until ls -l "/proc/$pid/fd" 2>/dev/null | grep -q 'bpf-link\|bpf-prog'; do
    n=$((n + 1))
    [ "$n" -gt 300 ] && { echo "bench: offcputime did not attach: $(cat "$work/offcpu.err")" >&2; exit 1; }
    sleep 0.1
  done
  "${run[@]}" 2>"$work/t"
  kill -INT "$pid"
  wait "$pid" || true
}

now() { date +%s%N; }
variants="native perf-record profdev-cpu profdev-offcpu perf-sched offcputime"
declare -A inner outer rate lost
for r in $(seq "$rounds"); do
  for v in $variants; do
    s=$(now)
    case $v in
      native) "${run[@]}" 2>"$work/t" ;;
      perf-record) perf record -q -e cpu-clock -F 1000 -g -o "$work/perf.data" -- "${run[@]}" 2>"$work/t.all" >/dev/null ;;
      profdev-cpu) "$profdev" record -g -o "$work/cpu.data" -- "${run[@]}" 2>"$work/t.all" ;;
      profdev-offcpu) "$profdev" record --off-cpu -o "$work/off.data" -- "${run[@]}" 2>"$work/t.all" ;;
      perf-sched) perf sched record -o "$work/sched.data" -- "${run[@]}" 2>"$work/t.all" >/dev/null ;;
      offcputime) offcpu ;;
    esac
    e=$(now)
    if [ -f "$work/t.all" ]; then
      grep -E '^[0-9]+ [0-9]+$' "$work/t.all" >"$work/t"
      l=$(sed -n 's/.* \([0-9]*\) lost.*/\1/p' "$work/t.all" | head -1)
      lost[$v]+="${l:-0} "
      rm -f "$work/t.all"
    fi
    read -r us cs <"$work/t"
    inner[$v]+="$us "
    rate[$v]+="$(( cs * 1000000 / us )) "
    outer[$v]+="$(( (e - s) / 1000 )) "
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
echo "workload: switchy 20000 $work_steps, $rounds rounds, medians, $(nproc) CPUs, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-16s %12s %10s %12s %14s %8s %8s\n' variant "rounds µs" slowdown "switches/s" "command µs" ratio lost
declare -A mi
for v in $variants; do
  mi[$v]=$(echo "${inner[$v]}" | median)
  mo=$(echo "${outer[$v]}" | median)
  [ "$v" = native ] && mo_native=$mo
  printf '%-16s %12s %10s %12s %14s %8s %8s\n' "$v" "${mi[$v]}" "$(ratio "${mi[$v]}" "${mi[native]}")" \
    "$(echo "${rate[$v]}" | median)" "$mo" "$(ratio "$mo" "$mo_native")" "$(echo "${lost[$v]:-}" | median)"
done
echo "profdev --off-cpu / profdev -g (what off-CPU adds), rounds time: $(ratio "${mi[profdev-offcpu]}" "${mi[profdev-cpu]}")"
echo "profdev -g / perf record -g (the on-CPU sampling), rounds time: $(ratio "${mi[profdev-cpu]}" "${mi[perf-record]}")"
echo "profdev --off-cpu / perf sched record, rounds time: $(ratio "${mi[profdev-offcpu]}" "${mi[perf-sched]}")"
echo "profdev --off-cpu / offcputime, rounds time: $(ratio "${mi[profdev-offcpu]}" "${mi[offcputime]}")"
