#!/usr/bin/env bash
# Benchmark: the slowdown of coverage mode (launch: every module of the
# program counted, block by block, exactly; marks: launch in hit mode,
# what `profdev cprof CMD` without -f runs, recording only whether each
# block ran; attach: the same counting
# injected into the running program, as `startcp PID` does) against the
# native run, next to valgrind's cachegrind (--cache-sim=no) and
# callgrind, on CPU-bound real programs, in one script run, with the
# geometric mean.
#
# Usage: bench/coverage_overhead.sh [ROUNDS]      (default 1 round)
#   COVERAGE_BENCH_VARIANTS="native attach"  only these variants
#   COVERAGE_BENCH_LAUNCH=PATH               another build of the harness
#                                            (to compare two commits)
#   COVERAGE_BENCH_PROFDEV=PATH              another build of profdev (attach)
#   COVERAGE_BENCH_BASE=DIR                  a release directory of another
#                                            build (bench/interleaved.sh): adds
#                                            the variants launch@base and
#                                            attach@base, with a plan cache of
#                                            their own, interleaved with the rest
#                                            (marks@base and start@base too, when
#                                            named in COVERAGE_BENCH_VARIANTS)
#
#   COVERAGE_BENCH_WORKLOADS="static"      only these workloads
#   COVERAGE_BENCH_SCALE=N                   inputs N times as long (default
#                                            1: each native run about 2 s or
#                                            more on the 2-vCPU VM)
#
# Workloads (at scale 1):
#   xz       xz -9 -T1 of 6 MB of base64 text
#   python   /usr/bin/python3 summing squares in a loop (50,000,000 steps)
#   sqlite   sqlite3 :memory: running a recursive CTE (12,000,000 rows)
#   cc       cc -O2 -c of a generated C file of 1,200 functions (cc1, as:
#            an exec chain)
#   static   bench/static_collatz.c built with cc -static -O2 -g, the
#            Collatz steps of 1..12,000,000: a statically linked program,
#            which launch, marks and hits-lcov count through `profdev cprof` (-f for
#            launch; the ptrace route, patched at its first stop: the
#            harness's LD_PRELOAD cannot reach it) with its listing to
#            /dev/null; attach is `cprof -f -p` on it (patched through
#            ptrace too, followed until it exits); marks-attach, valgrind
#            and the @base variants are not run for it ("-"); the geometric
#            means are of the four classic workloads alone, so that every
#            column's is of the same set
#
# `hits-lcov` is `profdev cprof --hits --lcov FILE CMD` (target/release/
# profdev, every module): hit mode with each conditional jump's edges (a
# jump whose edge is not its target's only way in keeps a trampoline that
# stores a byte per edge), then the listing (to /dev/null) and the
# tracefile written, both in the time.
#
# `marks-attach` is the attach variant in hit mode (`profdev cprof -p PID`
# without -f, one-shot probes); `attach` counts (`cprof -f -p PID`).
#
# The `start` variant is start-up apart: the marks harness on the same
# program with a trivial input (xz of nothing, python3 -c pass, sqlite3
# of `select 1`, cc of an empty file) less the native run of it, in
# seconds (the plan cache warm, as for launch); not in the geometric mean.
# Each variant is timed as a whole command (for coverage: planning every
# module, the run, and collecting the counts). The launch variant is the
# engine's harness (target/release/profdev-coverage-run, what `profdev
# cprof -f CMD` runs; with --hits for marks); valgrind is Debian's (apt-get install valgrind), skipped
# when missing. Rounds interleave the variants; medians are shown.
#
# Plans and trampolines are kept on disk between runs (crate::cache): the
# script gives them a fresh directory of its own, fills it with one
# untimed launch run per workload first, and times `launch` and `attach`
# with it (what a user's second run of a program costs); `cold` is the
# launch harness with the cache off (PROFDEV_CACHE_DIR=off: every module
# planned and encoded in the timed run, what a first run costs).
#
# The attach variant starts the workload natively, waits (polling, bounded)
# until the process has exec'd the workload's binary (/proc/PID/exe), and
# runs `profdev cprof -p PID` on it (target/release/profdev, every module:
# the executable and every library, as launch; its listing to /dev/null,
# its stderr to the log). The time is the workload's, from its start to
# its exit: the attach (planning every module while the program runs on,
# then the stop, dlopen and patching with every thread held) and the
# counting are in it; cprof's listing after the exit is not (the script
# waits for cprof before the next run). What attach means for cc: attach
# mode does not follow exec (startcp counts the attached process and the
# children it forks, never the programs it or they exec), so attaching to
# the cc driver would count only the driver, which mostly waits. The
# script attaches to cc1, the compiler proper, as soon as the driver has
# started it (a child of the driver named cc1); the driver and `as` run
# natively, uncounted, and their time is in the measurement.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-1}
cargo build --release -q -p profdev-coverage -p profdev
launch=${COVERAGE_BENCH_LAUNCH:-$PWD/target/release/profdev-coverage-run}
profdev=${COVERAGE_BENCH_PROFDEV:-$PWD/target/release/profdev}
base=${COVERAGE_BENCH_BASE:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
scale=${COVERAGE_BENCH_SCALE:-1}
head -c $((4500000 * scale)) /dev/urandom | base64 >"$work/in.txt"
python=/usr/bin/python3
echo "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<$((12000000 * scale))) SELECT sum(x*x%7) FROM c;" >"$work/q.sql"
pyloop="s=0
for i in range($((50000000 * scale))): s+=i*i
print(s)"
: >"$work/empty.c"
cc1=$(cc -print-prog-name=cc1)
cc -static -O2 -g -o "$work/static_collatz" bench/static_collatz.c
for i in $(seq 1 $((1200 * scale))); do
  echo "int f$i(int x) { int s = 0; for (int k = 0; k < x; k++) s += k * $i ^ (s >> 3); return s; }"
done >"$work/gen.c"

export PROFDEV_CACHE_DIR="$work/cache"
variants=(native start cold launch marks attach marks-attach)
command -v valgrind >/dev/null && variants+=(cachegrind callgrind) || echo "bench: valgrind not found: skipped" >&2
[ -n "$base" ] && variants+=(launch@base attach@base)
if [ -n "${COVERAGE_BENCH_VARIANTS:-}" ]; then
  read -r -a variants <<<"$COVERAGE_BENCH_VARIANTS"
fi
echo "bench: load average $(cut -d' ' -f1-3 /proc/loadavg) at the start" >&2
workloads=(xz python sqlite cc static)
if [ -n "${COVERAGE_BENCH_WORKLOADS:-}" ]; then
  read -r -a workloads <<<"$COVERAGE_BENCH_WORKLOADS"
fi

run() { # variant, command...
  local v=$1; shift
  if [ "$1" = "$work/static_collatz" ]; then
    # A static program: cprof (the ptrace route) is what counts it.
    case $v in
      native) "$@" ;;
      launch) "$profdev" cprof -f -- "$@" 2>>"$work/launch.log" ;;
      cold) PROFDEV_CACHE_DIR=off "$profdev" cprof -f -- "$@" 2>>"$work/launch.log" ;;
      marks) "$profdev" cprof -- "$@" 2>>"$work/launch.log" ;;
      hits-lcov) "$profdev" cprof -q -o /dev/null --hits --lcov "$work/hits.info" -- "$@" 2>>"$work/launch.log" ;;
    esac
    return
  fi
  case $v in
    native) "$@" ;;
    launch) "$launch" -- "$@" 2>>"$work/launch.log" ;;
    marks) "$launch" --hits -- "$@" 2>>"$work/launch.log" ;;
    hits-lcov) "$profdev" cprof -q -o /dev/null --hits --lcov "$work/hits.info" "$@" 2>>"$work/launch.log" ;;
    launch@base) PROFDEV_CACHE_DIR="$work/cache-base" "$base/profdev-coverage-run" -- "$@" 2>>"$work/launch.log" ;;
    marks@base) PROFDEV_CACHE_DIR="$work/cache-base" "$base/profdev-coverage-run" --hits -- "$@" 2>>"$work/launch.log" ;;
    cold) PROFDEV_CACHE_DIR=off "$launch" -- "$@" 2>>"$work/launch.log" ;;
    cachegrind) valgrind -q --trace-children=yes --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null "$@" ;;
    callgrind) valgrind -q --trace-children=yes --tool=callgrind --callgrind-out-file=/dev/null "$@" ;;
  esac
}

workload() { # variant workload
  case $2 in
    xz) run "$1" xz -9 -T1 -c "$work/in.txt" >/dev/null ;;
    python) run "$1" "$python" -c "$pyloop" >/dev/null ;;
    sqlite) run "$1" sqlite3 :memory: <"$work/q.sql" >/dev/null ;;
    cc) run "$1" cc -O2 -c -o "$work/gen.o" "$work/gen.c" ;;
    static) run "$1" "$work/static_collatz" $((12000000 * scale)) >/dev/null ;;
  esac
}

# Wait until "$@" succeeds: polled every 2 ms, at most 10 s (then fail).
await() { # what, condition...
  local what=$1 deadline=$((SECONDS + 10))
  shift
  until "$@"; do
    if ((SECONDS > deadline)); then
      echo "bench: $what did not happen within 10 s" >&2
      return 1
    fi
    sleep 0.002
  done
}
execd() { [ "$(readlink "/proc/$1/exe" 2>/dev/null)" = "$2" ]; }
child_cc1() { target=$(pgrep -P "$1" -x cc1) && execd "$target" "$(readlink -f "$cc1")"; }
attach_failed=0

trivial() { # variant workload: the workload's program on a trivial input
  case $2 in
    xz) run "$1" xz -9 -T1 -c /dev/null >/dev/null ;;
    python) run "$1" "$python" -c pass ;;
    sqlite) run "$1" sqlite3 :memory: "select 1" >/dev/null ;;
    cc) run "$1" cc -O2 -c -o "$work/empty.o" "$work/empty.c" ;;
    static) run "$1" "$work/static_collatz" 1 >/dev/null ;;
  esac
}

one() { # variant workload -> seconds
  local v=$1 w=$2 t0 t1 pid cp bin cprof=$profdev
  if [ "${v%@base}" = start ]; then
    # Start-up alone: marks less native, on a trivial input.
    t0=$(date +%s.%N)
    trivial native "$w"
    t1=$(date +%s.%N)
    trivial "marks${v#start}" "$w"
    echo "$(date +%s.%N) - $t1 - ($t1 - $t0)" | bc -l
    return
  fi
  [ "$v" = attach@base ] && cprof=$base/profdev
  case $w.$v in
    # Not run (see static above): no time.
    static.marks-attach | static.*grind | static.*@base) return 0 ;;
  esac
  t0=$(date +%s.%N)
  if [ "${v%@base}" = attach ] || [ "$v" = marks-attach ]; then
    # A simple command in the background: the shell's child execs it, so
    # $! is the workload's process.
    case $w in
      xz) xz -9 -T1 -c "$work/in.txt" >/dev/null & bin=$(command -v xz) ;;
      python) "$python" -c "$pyloop" >/dev/null & bin=$python ;;
      sqlite) sqlite3 :memory: <"$work/q.sql" >/dev/null & bin=$(command -v sqlite3) ;;
      cc) cc -O2 -c -o "$work/gen.o" "$work/gen.c" & bin=$(command -v cc) ;;
      static) "$work/static_collatz" $((12000000 * scale)) >/dev/null & bin=$work/static_collatz ;;
    esac
    pid=$! target=$pid cp=
    bin=$(readlink -f "$bin")
    if await "$w's exec" execd "$pid" "$bin" && { [ "$w" != cc ] || await "cc1's start" child_cc1 "$pid"; }; then
      echo "== attach $w: process $target" >>"$work/attach.log"
      # attach counts (-f, what startcp does); marks-attach is the marks.
      if [ "${v%@base}" = marks-attach ]; then
        "$cprof" cprof -p "$target" >/dev/null 2>>"$work/attach.log" &
      else
        "$cprof" cprof -f -p "$target" >/dev/null 2>>"$work/attach.log" &
      fi
      cp=$!
    fi
    wait "$pid"
    t1=$(date +%s.%N)
    if [ -z "$cp" ] || ! wait "$cp"; then
      attach_failed=$((attach_failed + 1))
      echo "bench: attach to $w failed (see the log below)" >&2
    fi
  else
    workload "$v" "$w"
    t1=$(date +%s.%N)
  fi
  echo "$t1 - $t0" | bc -l
}

# (Nothing for no times: the column shows "-".)
median() { sort -g | awk '{a[NR]=$1} END {if (NR) print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# The cache filled: one untimed launch run per workload (and one in hit
# mode, whose plans are kept apart).
for w in "${workloads[@]}"; do
  workload launch "$w"
  [[ " ${variants[*]} " != *" marks "* && " ${variants[*]} " != *" start "* ]] || {
    workload marks "$w"
    trivial marks "$w"
  }
  [[ " ${variants[*]} " != *" hits-lcov "* ]] || workload hits-lcov "$w"
  [ -z "$base" ] || {
    workload launch@base "$w"
    workload marks@base "$w"
    trivial marks@base "$w"
  }
done

declare -A secs
for w in "${workloads[@]}"; do
  for r in $(seq 1 "$rounds"); do
    for v in "${variants[@]}"; do
      one "$v" "$w" >"$work/t"
      secs[$w.$v]+="$(cat "$work/t") "
    done
  done
done

printf '%-8s' workload
for v in "${variants[@]}"; do printf ' %12s' "$v"; done
printf '\n'
declare -A logsum logn
for w in "${workloads[@]}"; do
  base=$(tr ' ' '\n' <<<"${secs[$w.native]}" | grep . | median)
  printf '%-8s' "$w"
  for v in "${variants[@]}"; do
    m=$(tr ' ' '\n' <<<"${secs[$w.$v]}" | { grep . || true; } | median)
    if [ -z "$m" ]; then
      printf ' %12s' -
      continue
    fi
    if [ "${v%@base}" = start ]; then
      printf ' %11.3fs' "$m"
      continue
    fi
    ratio=$(echo "$m / $base" | bc -l)
    # The geomean is of the classic (dynamic) workloads alone: static runs
    # neither valgrind nor the @base variants, and would make the columns'
    # means of different sets.
    if [ "$w" != static ]; then
      logsum[$v]=$(echo "${logsum[$v]:-0} + l($ratio)" | bc -l)
      logn[$v]=$((${logn[$v]:-0} + 1))
    fi
    printf ' %6.2fs %4.2fx' "$m" "$ratio"
  done
  printf '\n'
done
printf '%-8s' geomean
for v in "${variants[@]}"; do
  if [ "${v%@base}" = start ]; then
    printf ' %12s' ""
    continue
  fi
  if [ -z "${logn[$v]:-}" ]; then
    printf ' %12s' -
    continue
  fi
  printf ' %12.2fx' "$(echo "e(${logsum[$v]} / ${logn[$v]})" | bc -l)"
done
printf '\n'
grep -h "breakpoints were taken" "$work/launch.log" | sed 's/^/launch: /' || true
if [ -f "$work/attach.log" ]; then
  # What cprof said, less its notes on sources, debug information and blocks
  # (the launch variant's are not shown either).
  grep -v "source file\|left out of the exports\|source files not found\|no debug information\|counting process\|blocks shorter than\|blocks could not be counted" \
    "$work/attach.log" | sed 's/^/attach: /' || true
fi
if ((attach_failed)); then
  echo "bench: $attach_failed attach runs failed: their times are of runs not counted" >&2
fi
echo "bench: load average $(cut -d' ' -f1-3 /proc/loadavg) at the end" >&2
