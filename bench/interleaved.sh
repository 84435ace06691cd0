#!/usr/bin/env bash
# Old against new in one session (issue 24): builds BASE (a commit, default
# the merge base with the upstream main the renovation started from) and
# the working tree in release mode, then runs each benchmark with both
# builds as variants of the same rounds, old and new alternating, medians
# of ROUNDS:
#   hot_path          crates/dev/benches/hot_path (criterion), each build's
#                     bench binary run in turn, ROUNDS times; per benchmark
#                     the median of the criterion point estimates
#   coverage_overhead bench/coverage_overhead.sh with COVERAGE_BENCH_BASE
#   memory_overhead   bench/memory_overhead.sh with MEMORY_BENCH_BASE
#   record            bench/record.sh with RECORD_BENCH_BASE (slowdowns only)
#
# Usage: bench/interleaved.sh [BASE [ROUNDS]]     (default f247fb7, 3)
#   INTERLEAVED_ONLY="hot_path coverage"  only these (hot_path coverage
#                                         memory record)
# The base is built in a git worktree under target/interleaved/ with its
# own target directory (kept, so a second run builds nothing).
set -euo pipefail
cd "$(dirname "$0")/.."
base_rev=${1:-f247fb7}
rounds=${2:-3}
only=${INTERLEAVED_ONLY:-hot_path coverage memory record}
root=$PWD
tree=$root/target/interleaved/tree
btarget=$root/target/interleaved/target

rev=$(git rev-parse --verify "$base_rev^{commit}")
if [ ! -d "$tree" ]; then
  git worktree add -q --detach "$tree" "$rev"
else
  git -C "$tree" checkout -q --detach "$rev"
fi
echo "interleaved: base $(git -C "$tree" log -1 --format='%h %s' | cut -c1-72)"
echo "interleaved: new  $(git log -1 --format='%h %s' | cut -c1-72)$(git diff --quiet HEAD || echo ' (+ uncommitted changes)')"

build() { # tree target-dir -> hot_path bench binary on stdout
  (cd "$1" && CARGO_TARGET_DIR=$2 cargo build --release -q -p profdev -p profdev-coverage >&2 &&
    CARGO_TARGET_DIR=$2 cargo bench -p profdev-dev --bench hot_path --no-run 2>&1 |
    sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -n1)
}
hb_base=$(build "$tree" "$btarget")
hb_new=$(build "$root" "$root/target")
case $hb_base in /*) ;; *) hb_base=$tree/$hb_base ;; esac
case $hb_new in /*) ;; *) hb_new=$root/$hb_new ;; esac

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

if [[ " $only " == *" hot_path "* ]]; then
  echo
  echo "== hot_path: criterion point estimates (ns per iteration), $rounds rounds, base and new alternating"
  declare -A est
  for r in $(seq "$rounds"); do
    for side in base new; do
      bin=$hb_new
      [ $side = base ] && bin=$hb_base
      # criterion prints "NAME\n time: [lo est hi]" (or "NAME time: [...]"),
      # then, against its last run, "change:\n time: [-1.2% ...]": skipped
      "$bin" --bench --noplot --warm-up-time 1 --measurement-time 3 2>/dev/null |
        awk '/^[a-z]/ && !/time:/ {name=$1} /time:/ && !/%/ { if ($1 != "time:") name=$1;
             for (i=1;i<=NF;i++) if ($i ~ /^\[/) { v=substr($i,2); u=$(i+1); v2=$(i+2); u2=$(i+3); break }
             mult = (u2=="ns")?1:(u2=="µs"||u2=="us")?1000:(u2=="ms")?1e6:(u2=="s")?1e9:(u2=="ps")?0.001:1;
             printf "%s %.3f\n", name, v2*mult }' >"$root/target/interleaved/hp.$side.$r"
      while read -r n v; do est[$side.$n]+="$v "; done <"$root/target/interleaved/hp.$side.$r"
    done
  done
  printf '| benchmark | base ns | new ns | new/base |\n|---|---|---|---|\n'
  for n in $(cut -d' ' -f1 "$root/target/interleaved/hp.new.1" | awk '!seen[$0]++'); do
    b=$(echo ${est[base.$n]} | tr ' ' '\n' | median)
    x=$(echo ${est[new.$n]} | tr ' ' '\n' | median)
    printf '| %s | %.1f | %.1f | %.3f |\n' "$n" "$b" "$x" "$(echo "$x / $b" | bc -l)"
  done
fi

if [[ " $only " == *" coverage "* ]]; then
  echo
  echo "== coverage_overhead: launch and attach, new and @base, $rounds rounds interleaved"
  COVERAGE_BENCH_BASE=$btarget/release COVERAGE_BENCH_VARIANTS="native launch launch@base attach attach@base" \
    bench/coverage_overhead.sh "$rounds"
fi
if [[ " $only " == *" memory "* ]]; then
  echo
  echo "== memory_overhead: mprof new and @base, $rounds rounds interleaved"
  MEMORY_BENCH_BASE=$btarget/release MEMORY_BENCH_VARIANTS="native mprof mprof@base" \
    bench/memory_overhead.sh "$rounds"
fi
if [[ " $only " == *" record "* ]]; then
  echo
  echo "== record: profdev record -g new and @base, $rounds rounds interleaved"
  RECORD_BENCH_BASE=$btarget/release RECORD_BENCH_QUICK=1 bench/record.sh "$rounds"
fi
