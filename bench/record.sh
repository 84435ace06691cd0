#!/usr/bin/env bash
# profdev record -g against perf record (issue 16 part 5): the workload's
# slowdown, bytes per sample, and the export times of a 1M-sample
# recording. As root; needs gcc and linux-perf.
#   bench/record.sh [ROUNDS]
#   RECORD_BENCH_BASE=DIR   a release directory of another build
#                           (bench/interleaved.sh): adds the variant
#                           profdev@base, interleaved with the rest
#   RECORD_BENCH_QUICK=1    the slowdowns only (no sizes, no export speed)
# Prints the load average before and after: on a shared machine the wall
# times (and so the slowdowns) carry the other work's noise; the CPU
# times (user + system of the command and its children) carry less.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
hz=1000
cargo build --release -q -p profdev
profdev=$PWD/target/release/profdev
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
gcc -O1 -g -o "$w/calltree" crates/cli/tests/fixtures/calltree.c
gcc -O1 -g -fno-omit-frame-pointer -o "$w/calltree_fp" crates/cli/tests/fixtures/calltree.c
arg=3000
cd "$w"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs"

# "WALL CPU" seconds of "$@", its output discarded; CPU is the user and
# system time of the command and everything it waited for.
run() {
  local TIMEFORMAT='%R %U %S' t
  t=$( { time "$@" >/dev/null 2>&1; } 2>&1 )
  echo "$t" | awk '{printf "%.3f %.3f\n", $1, $2 + $3}'
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

declare -A wall cpu
variants="bare bare_fp profdev perf_dwarf perf_fp"
base=${RECORD_BENCH_BASE:-}
[ -z "$base" ] || variants+=" profdev@base"
for r in $(seq "$rounds"); do
  for v in $variants; do
    rm -f p.data p.data.old
    case $v in
      bare) t=$(run ./calltree $arg) ;;
      bare_fp) t=$(run ./calltree_fp $arg) ;;
      profdev) t=$(run "$profdev" record -g -F $hz -o p.data -- ./calltree $arg) ;;
      profdev@base) t=$(run "$base/profdev" record -g -F $hz -o p.data -- ./calltree $arg) ;;
      perf_dwarf) t=$(run perf record -q --call-graph dwarf -F $hz -e cpu-clock -o dwarf.data -- ./calltree $arg) ;;
      perf_fp) t=$(run perf record -q -g -F $hz -e cpu-clock -o fp.data -- ./calltree_fp $arg) ;;
    esac
    wall[$v]+="${t% *} "
    cpu[$v]+="${t#* } "
  done
done
echo "workload: calltree $arg at $hz Hz, $rounds rounds interleaved; medians in seconds"
echo "(slowdown: against bare, or bare_fp for perf -g which records the frame-pointer build)"
bw=$(echo ${wall[bare]} | tr ' ' '\n' | median)
bc_=$(echo ${cpu[bare]} | tr ' ' '\n' | median)
fw=$(echo ${wall[bare_fp]} | tr ' ' '\n' | median)
fc=$(echo ${cpu[bare_fp]} | tr ' ' '\n' | median)
printf '  %-11s %8s %8s %8s %8s\n' variant wall slowdown cpu "cpu ratio"
for v in $variants; do
  mw=$(echo ${wall[$v]} | tr ' ' '\n' | median)
  mc=$(echo ${cpu[$v]} | tr ' ' '\n' | median)
  case $v in bare_fp|perf_fp) rw=$fw; rc=$fc ;; *) rw=$bw; rc=$bc_ ;; esac
  printf '  %-11s %8.3f %8.3f %8.3f %8.3f\n' "$v" "$mw" "$(echo "$mw / $rw" | bc -l)" "$mc" "$(echo "$mc / $rc" | bc -l)"
done
echo "  (all rounds, wall: profdev ${wall[profdev]}; perf_dwarf ${wall[perf_dwarf]}; perf_fp ${wall[perf_fp]}; bare ${wall[bare]})"
[ -z "${RECORD_BENCH_QUICK:-}" ] || exit 0

samples() { perf script -i "$1" -F tid 2>/dev/null | wc -l; }
rm -f p.data p.data.old
"$profdev" record -g -F $hz -o p.data -- ./calltree $arg 2>record.err >/dev/null
ps=$(grep -o '[0-9]* samples' record.err | head -1 | cut -d' ' -f1)
pb=$(stat -c %s p.data)
db=$(stat -c %s dwarf.data); ds=$(samples dwarf.data)
fb=$(stat -c %s fp.data); fs=$(samples fp.data)
echo "bytes per sample (file size / samples):"
printf '  %-28s %9d bytes / %6d samples = %8.1f\n' "profdev record -g" "$pb" "$ps" "$(echo "$pb / $ps" | bc -l)"
printf '  %-28s %9d bytes / %6d samples = %8.1f\n' "perf record --call-graph dwarf" "$db" "$ds" "$(echo "$db / $ds" | bc -l)"
printf '  %-28s %9d bytes / %6d samples = %8.1f\n' "perf record -g (frame ptrs)" "$fb" "$fs" "$(echo "$fb / $fs" | bc -l)"
grep 'unwind\|user stacks' record.err | sed 's/^/  /' || true
echo "profdev folded heaviest stack:"
"$profdev" export folded -i p.data | sort -t' ' -k2 -n | tail -1

cd - >/dev/null
echo "export speed (1M samples x 20 frames, crates/formats/examples/export_speed.rs):"
cargo run --release -q -p profdev-formats --features export --example export_speed 1000000 "$w/big.data"
echo "profdev export FORMAT -i big.data -o - >/dev/null (read and write), wall and CPU seconds:"
for f in folded svg pprof firefox perf-script gmon kpdata proc-profile otlp; do
  printf '  %-13s %s\n' "$f" "$(run "$profdev" export "$f" -i "$w/big.data" -o -)"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
