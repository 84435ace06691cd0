#!/usr/bin/env bash
# Benchmark: the CPU time `profdev top --batch` spends against `perf top
# --stdio` (Debian's linux-perf) at the same rate, over the same duration,
# system wide, while a CPU-bound workload runs; reports the ratio.
#
# Usage: bench/top_overhead.sh [SECONDS] [ROUNDS] [HZ...]
#        (as root; defaults: 10 seconds, 3 rounds, 1000, 4000 and 1000g Hz;
#        a rate ending in g runs both with -g: callchains, and for profdev
#        an 8 KiB user stack copy unwound with .eh_frame, for perf the
#        kernel's frame-pointer chains)
#
# Recipe: the workload is `sha256sum` of an endless stream of zeros (one
# process, user mode, CPU bound) plus `dd` feeding it (kernel mode), so both
# profilers see kernel and user samples of a process with shared libraries.
# Each profiler runs SECONDS seconds refreshing every second: profdev top as
# `--batch -n SECONDS -d 1 -F HZ -a` (it ends by itself), perf top as
# `perf top --stdio -F HZ -e cpu-clock -d 1 -a` stopped by SIGINT after
# SECONDS seconds (`timeout -s INT`); output to /dev/null for both, and
# stdin an idle pipe (`sleep |`): perf top --stdio reads keys from stdin
# and, given /dev/null, spins on its end of file (4.8 s of CPU instead of
# 1.4 s in 10 s here), which would flatter profdev. The CPU time counted is the profiler's user + system
# time as its parent sees it (bash's `times` of the waited children, which
# include perf's own threads), start-up (reading kallsyms) included. Rounds
# interleave the two so drift hits both alike; medians are compared.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
rounds=${2:-3}
shift $(( $# > 2 ? 2 : $# ))
rates=("$@")
[ ${#rates[@]} -gt 0 ] || rates=(1000 4000 1000g)
command -v perf >/dev/null || { echo "bench: perf not found (apt-get install linux-perf)" >&2; exit 1; }
cargo build --release -q -p profdev
profdev=$PWD/target/release/profdev
work=$(mktemp -d)

# The workload, for the whole benchmark.
(dd if=/dev/zero bs=64k status=none | sha256sum >/dev/null) &
load=$!
trap 'pkill -P $load 2>/dev/null; kill $load 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT

# CPU seconds (user + system) of the children waited for so far.
# (`times` runs in this shell, not in a $(...) subshell, which has no children.)
children_cpu() {
  local t
  times >"$work/times"
  t=$(tail -1 "$work/times")
  awk -v t="$t" 'BEGIN {
    split(t, f, " "); s = 0
    for (i = 1; i <= 2; i++) { m = f[i]; sub(/m.*/, "", m); x = f[i]; sub(/^[0-9]+m/, "", x); sub(/s$/, "", x); s += m * 60 + x }
    printf "%.3f", s }'
}

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "system wide, $secs s per run, $rounds rounds, medians; $(nproc) CPUs, $(uname -r), perf $(perf version 2>/dev/null | awk '{print $3}')"
printf '%-8s %18s %18s %10s\n' "rate" "profdev top CPU s" "perf top CPU s" "ratio"
for rate in "${rates[@]}"; do
  hz=${rate%g}
  g=(); [ "$hz" = "$rate" ] || g=(-g)
  pd="" pf=""
  for r in $(seq "$rounds"); do
    children_cpu >"$work/a"; a=$(cat "$work/a")
    sleep $((secs + 2)) | "$profdev" top --batch -n "$secs" -d 1 -F "$hz" -a "${g[@]}" >"$work/pd.txt" 2>"$work/pd.err"
    children_cpu >"$work/b"; b=$(cat "$work/b")
    sleep $((secs + 2)) | { timeout -s INT "$secs" perf top --stdio -F "$hz" -e cpu-clock -d 1 -a "${g[@]}" >/dev/null 2>&1 || true; }
    children_cpu >"$work/c"; c=$(cat "$work/c")
    pd+="$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b - a }') "
    pf+="$(awk -v b="$b" -v c="$c" 'BEGIN { printf "%.3f", c - b }') "
  done
  mpd=$(echo "$pd" | median)
  mpf=$(echo "$pf" | median)
  printf '%-8s %18s %18s %10s\n' "$hz Hz${g[*]:+ -g}" "$mpd" "$mpf" \
    "$(awk -v a="$mpd" -v b="$mpf" 'BEGIN { printf "%.3f", a / b }')"
  echo "  rounds: profdev [$pd] perf [$pf]"
done
# What profdev top saw, for the record: its last snapshot's health line.
grep '^health: ' "$work/pd.txt" | tail -1
