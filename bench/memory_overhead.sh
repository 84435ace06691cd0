#!/usr/bin/env bash
# Benchmark: the slowdown of `profdev mprof`, heaptrack, valgrind's massif
# and valgrind's dhat against the native run, on an allocation-heavy
# microbenchmark and on a real program, in one script run; and the peak
# memory (max RSS) of each, which shows what the accounting itself costs.
#
# Usage: bench/memory_overhead.sh [ROUNDS]      (default 3 rounds)
#   MEMORY_BENCH_BASE=DIR      a release directory of another build
#                              (bench/interleaved.sh): adds the variant
#                              mprof@base, interleaved with the rest (and
#                              mprof-stacks@base, if named in the variants)
#   MEMORY_BENCH_VARIANTS="native mprof"   only these variants
#                              (mprof-stacks: mprof capturing whole
#                              stacks, as --folded asks; mprof-sample:
#                              mprof --sample-bytes 524288)
#
# Workloads:
#   micro   bench/alloc_micro.c (cc -O2): two threads, each 10,000,000
#           malloc/free pairs of 16..527 bytes, 8 blocks live per thread,
#           all from the same line (the worst case for shared counters).
#   micro1  the same, one thread doing 20,000,000 pairs (no second thread
#           is ever created: the library takes no lock)
#   cxx     bench/alloc_new.cpp (c++ -O2): one thread, MEMORY_BENCH_OPS
#           pairs of C++'s operator new and delete at one line: each
#           allocation made through a wrapper whose caller is the site
#           (not in the default list; needs c++)
#   python  /usr/bin/python3 building a dict of 1,000,000 str -> list
#           entries, three times over (most of its small objects come
#           from pymalloc's arenas; its large and medium blocks from
#           malloc); about 2.5 s natively here.
#   cc      a compiler run: `cc -O2 -c` of a generated C file of 3,000
#           small functions (cc runs cc1 and as: three processes, each
#           followed), from a bash script that reports its time; about
#           3 s natively here. valgrind runs with --trace-children=yes
#           (every workload); heaptrack, which follows no child, runs the
#           bash script and, through gcc's -wrapper, cc1 and as, each
#           writing its file (the cc driver itself is not traced).
#   start   /usr/bin/python3 -c pass: next to nothing but start-up, so the
#           whole command's time over the native one is each tool's
#           fixed cost (start, load, report), shown in its own table, in
#           wall seconds and in CPU seconds (mprof's work done while CMD
#           runs, on another CPU, costs CPU and no wall time).
#   shim    `python3 -c pass` as found on PATH (where that is a pyenv
#           shim, as here: a chain of bash scripts, 40 processes, and a
#           python with DWARF): the fixed cost as a user meets it; the
#           same command as start where python3 on PATH is /usr/bin's.
#   chain   a shell script running 20 short processes (as a pyenv shim or
#           a build's wrapper scripts do): the fixed cost per process.
#   MEMORY_BENCH_WORKLOADS="start shim chain"   only these workloads
#   MEMORY_BENCH_OPS=N         malloc/free pairs per thread of micro (one
#                              thread does 2N in micro1); default 10000000
#                              (0.2 s natively here; 200000000 makes each
#                              native run take over 2 s)
# Each variant is timed twice: the program's own work (the time it
# reports itself, "elapsed SECONDS" on stderr: alloc_micro from main's
# start to its threads' end, dict.py its loop; under each tool, without
# the tool's start-up and end), and the whole command (profiler start-up,
# the program, and for mprof its report and tables; heaptrack's and
# valgrind's own output files are written but not analysed), in wall
# seconds and in CPU seconds (user + system of the command and all its
# processes: less moved by other load on a shared machine). Rounds interleave the variants; medians are shown. heaptrack and valgrind are Debian's
# (apt-get install heaptrack valgrind); a missing one is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
cargo build --release -q -p profdev
profdev=$PWD/target/release/profdev
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -g -pthread -o "$work/micro" bench/alloc_micro.c
if command -v c++ >/dev/null; then c++ -O2 -g -o "$work/cxx" bench/alloc_new.cpp; fi
python=/usr/bin/python3
cat >"$work/dict.py" <<'P'
import sys, time
t0 = time.monotonic()
for rep in range(3):
    d = {}
    for i in range(1000000):
        d[str(i)] = [i]
print("elapsed %.3f" % (time.monotonic() - t0), file=sys.stderr)
print(len(d))
P

ops=${MEMORY_BENCH_OPS:-10000000}
i=0
while [ $i -lt 3000 ]; do
  printf 'int f%d(int x, int y) { if (x > %d) x = x * %d + (y >> 3); else y ^= x - %d; return x * y + %d; }\n' $i $i $i $i $i
  i=$((i + 1))
done >"$work/gen.c"
cat >"$work/cc.sh" <<'P'
t0=${EPOCHREALTIME/./}
cc -O2 -c "$1" -o "$2" ${CC_WRAPPER:+-wrapper "$CC_WRAPPER"}
t1=${EPOCHREALTIME/./}
d=$((t1 - t0))
printf 'elapsed %d.%06d\n' $((d / 1000000)) $((d % 1000000)) >&2
P
cat >"$work/chain.sh" <<'P'
i=0
while [ $i -lt 20 ]; do /usr/bin/env true; i=$((i + 1)); done
P

variants=(native mprof mprof-stacks mprof-sample)
command -v heaptrack >/dev/null && variants+=(heaptrack) || echo "bench: heaptrack not found: skipped" >&2
command -v valgrind >/dev/null && variants+=(massif dhat) || echo "bench: valgrind not found: skipped" >&2
base=${MEMORY_BENCH_BASE:-}
[ -n "$base" ] && variants+=(mprof@base)
if [ -n "${MEMORY_BENCH_VARIANTS:-}" ]; then
  read -r -a variants <<<"$MEMORY_BENCH_VARIANTS"
fi

run() { # variant, command...
  local v=$1; shift
  case $v in
    native) "$@" ;;
    mprof) "$profdev" mprof -l "$@" ;;
    mprof-stacks) "$profdev" mprof -l --folded "$work/folded" "$@" ;;
    mprof-sample) "$profdev" mprof -l --sample-bytes 524288 "$@" ;;
    mprof@base) "$base/profdev" mprof -l "$@" ;;
    mprof-stacks@base) "$base/profdev" mprof -l --folded "$work/folded" "$@" ;;
    # heaptrack follows no child process: cc's (cc1, as) run under it
    # through gcc's -wrapper (as's file replaces cc1's: only time is compared).
    heaptrack) CC_WRAPPER="heaptrack,-o,$work/ht.sub" heaptrack -o "$work/ht" "$@" ;;
    massif) valgrind -q --trace-children=yes --tool=massif --massif-out-file="$work/massif.%p.out" "$@" ;;
    dhat) valgrind -q --trace-children=yes --tool=dhat --dhat-out-file="$work/dhat.%p.out" "$@" ;;
  esac
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

declare -A secs prog rss cpu
workloads=(micro micro1 python start shim chain)
if [ -n "${MEMORY_BENCH_WORKLOADS:-}" ]; then
  read -r -a workloads <<<"$MEMORY_BENCH_WORKLOADS"
fi
for w in "${workloads[@]}"; do
  case $w in
    micro) cmd=("$work/micro" "$ops") ;;
    micro1) cmd=("$work/micro" $((2 * ops)) 1) ;;
    cxx) cmd=("$work/cxx" "$ops") ;;
    python) cmd=("$python" "$work/dict.py") ;;
    cc) cmd=(/bin/bash "$work/cc.sh" "$work/gen.c" "$work/gen.o") ;;
    start) cmd=("$python" -c pass) ;;
    shim) cmd=(python3 -c pass) ;;
    chain) cmd=(/bin/sh "$work/chain.sh") ;;
  esac
  for r in $(seq "$rounds"); do
    for v in "${variants[@]}"; do
      rm -f "$work"/ht* "$work"/*.out "$work/err"
      /usr/bin/time -f "%e %M %U %S" -o "$work/time" bash -c '"$@" >/dev/null 2>"$0"' "$work/err" \
        bash -c "$(declare -f run); profdev=$profdev base=$base work=$work; run $v \"\$@\"" _ "${cmd[@]}"
      read -r e m u sy <"$work/time"
      secs[$w.$v]+="$e "
      cpu[$w.$v]+="$(echo "$u + $sy" | bc -l) "
      prog[$w.$v]+="$(sed -n 's/^elapsed //p' "$work/err" | tail -n1) "
      rss[$w.$v]+="$m "
    done
  done
done

printf '\n| workload | tool | program s (median of %s) | slowdown | whole command s | slowdown | CPU s (user+sys) | slowdown | max RSS (MiB) |\n|---|---|---|---|---|---|---|---|---|\n' "$rounds"
for w in "${workloads[@]}"; do
  case $w in start | shim | chain) continue ;; esac
  base=$(echo ${secs[$w.native]} | tr ' ' '\n' | median)
  pbase=$(echo ${prog[$w.native]} | tr ' ' '\n' | median)
  cbase=$(echo ${cpu[$w.native]} | tr ' ' '\n' | median)
  for v in "${variants[@]}"; do
    t=$(echo ${secs[$w.$v]} | tr ' ' '\n' | median)
    p=$(echo ${prog[$w.$v]} | tr ' ' '\n' | median)
    m=$(echo ${rss[$w.$v]} | tr ' ' '\n' | median)
    c=$(echo ${cpu[$w.$v]} | tr ' ' '\n' | median)
    printf '| %s | %s | %.2f | %.2fx | %.2f | %.2fx | %.2f | %.2fx | %.1f |\n' "$w" "$v" "$p" "$(echo "$p / $pbase" | bc -l)" \
      "$t" "$(echo "$t / $base" | bc -l)" "$c" "$(echo "$c / $cbase" | bc -l)" "$(echo "$m / 1024" | bc -l)"
  done
done
printf '\n| fixed cost: whole command s over native, wall / CPU (medians of %s) | start: /usr/bin/python3 -c pass | shim: python3 -c pass on PATH | chain: per process of 20 |\n|---|---|---|---|\n' "$rounds"
for v in "${variants[@]}"; do
  [ "$v" = native ] && continue
  row="| $v"
  for w in start shim chain; do
    if [ -z "${secs[$w.native]:-}" ]; then row+=" | -"; continue; fi
    n=$(echo ${secs[$w.native]} | tr ' ' '\n' | median)
    t=$(echo ${secs[$w.$v]} | tr ' ' '\n' | median)
    d=$(echo "$t - $n" | bc -l)
    cn=$(echo ${cpu[$w.native]} | tr ' ' '\n' | median)
    ct=$(echo ${cpu[$w.$v]} | tr ' ' '\n' | median)
    c=$(echo "$ct - $cn" | bc -l)
    [ $w = chain ] && d=$(echo "$d / 20" | bc -l) && c=$(echo "$c / 20" | bc -l)
    row+=$(printf ' | %.3f / %.3f' "$d" "$c")
  done
  echo "$row |"
done
echo
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
