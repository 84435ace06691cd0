#!/usr/bin/env bash
# profdev record -g against perf record (issue 16 part 5): the workload's
# slowdown, bytes per sample, and the export times of a 1M-sample
# recording. As root; needs gcc and linux-perf.
#   bench/record.sh [ROUNDS]
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

secs() { # the wall time of "$@" in seconds, its output discarded
  local t0 t1
  t0=$(date +%s.%N)
  "$@" >/dev/null 2>&1
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc -l
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

declare -A times
for r in $(seq "$rounds"); do
  times[bare]+="$(secs ./calltree $arg) "
  rm -f p.data p.data.old
  times[profdev]+="$(secs "$profdev" record -g -F $hz -o p.data -- ./calltree $arg) "
  times[perf_dwarf]+="$(secs perf record -q --call-graph dwarf -F $hz -e cpu-clock -o dwarf.data -- ./calltree $arg) "
  times[perf_fp]+="$(secs perf record -q -g -F $hz -e cpu-clock -o fp.data -- ./calltree_fp $arg) "
done
bare=$(echo ${times[bare]} | tr ' ' '\n' | median)
echo "workload: calltree $arg at $hz Hz, $rounds rounds, median wall seconds (slowdown)"
for k in bare profdev perf_dwarf perf_fp; do
  m=$(echo ${times[$k]} | tr ' ' '\n' | median)
  printf '  %-11s %8.3f  (%.3f)\n' "$k" "$m" "$(echo "$m / $bare" | bc -l)"
done

samples() { perf script -i "$1" -F tid 2>/dev/null | wc -l; }
rm -f p.data p.data.old
"$profdev" record -g -F $hz -o p.data -- ./calltree $arg 2>record.err >/dev/null
ps=$(grep -o '[0-9]* samples' record.err | head -1 | cut -d' ' -f1)
pb=$(stat -c %s p.data)
db=$(stat -c %s dwarf.data); ds=$(samples dwarf.data)
fb=$(stat -c %s fp.data); fs=$(samples fp.data)
echo "bytes per sample (file size / samples):"
printf '  %-28s %8d bytes / %6d samples = %8.1f\n' "profdev record -g" "$pb" "$ps" "$(echo "$pb / $ps" | bc -l)"
printf '  %-28s %8d bytes / %6d samples = %8.1f\n' "perf record --call-graph dwarf" "$db" "$ds" "$(echo "$db / $ds" | bc -l)"
printf '  %-28s %8d bytes / %6d samples = %8.1f\n' "perf record -g (frame ptrs)" "$fb" "$fs" "$(echo "$fb / $fs" | bc -l)"
echo "profdev folded heaviest stack:"
"$profdev" export folded -i p.data | sort -t' ' -k2 -n | tail -1

cd - >/dev/null
echo "export speed (1M samples x 20 frames, crates/formats/examples/export_speed.rs):"
cargo run --release -q -p profdev-formats --example export_speed
