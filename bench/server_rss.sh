#!/bin/sh
# bench/server_rss.sh [SECONDS]   (default 3600; as root)
#
# Does the device server's memory stay bounded? Builds profdev (release),
# mounts a server on a fresh directory, switches on every device (kprof
# start, kgmon begin, prof at `interval 1` = 1 kHz, prf loaded with
# /proc/kallsyms and on: prf's clock is the seed's fixed 100 Hz), and runs
# for SECONDS a workload of many short-lived processes (a shell loop of
# fork+exec: true, sh -c, tr, date, ls) beside one CPU-bound loop
# (sha256sum), both at nice 19. Every 60 s it reads every data file of the
# mount as a user would (kpdata, gmon.out, gmonparam, prf to its size, and
# the prof histograms). Every 10 s it records the server's VmRSS and
# VmHWM (/proc/PID/status) in a CSV; at the end it prints min, max and
# final RSS and the verdict against the 50 MB bound.
#
# Output directory: $OUT, else a new /tmp/profdev-rss.XXXXXX (kept).
# sh reads a script as it runs it: for a long run, run a copy
# (PROFDEV_ROOT=$PWD sh /tmp/server_rss.sh) if the checkout may change.
set -eu

SECONDS_TOTAL=${1:-3600}
LIMIT_KB=$((50 * 1024))
case $SECONDS_TOTAL in '' | *[!0-9]*)
	echo "usage: $0 [SECONDS]" >&2
	exit 2
	;;
esac
[ "$(id -u)" = 0 ] || {
	echo "$0: run as root (system-wide perf sampling and mount(2))" >&2
	exit 1
}

# The checkout to build: this script's, unless $PROFDEV_ROOT says (for a
# copy of the script run while the checkout changes).
ROOT=${PROFDEV_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
OUT=${OUT:-$(mktemp -d /tmp/profdev-rss.XXXXXX)}
mkdir -p "$OUT"
MNT=$OUT/mnt
CSV=$OUT/rss.csv
mkdir -p "$MNT"

(cd "$ROOT" && cargo build --release -q -p profdev)
P=$ROOT/target/release/profdev

WORKLOAD=
READER=
cleanup() {
	[ -n "$READER" ] && kill -TERM "$READER" 2>/dev/null || true
	[ -n "$WORKLOAD" ] && kill -TERM "-$WORKLOAD" 2>/dev/null || true
	"$P" unmount "$MNT" >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

started=$("$P" mount -b "$MNT" 2>&1)
echo "$started"
PID=$(echo "$started" | sed -n 's/.*(pid \([0-9]*\),.*/\1/p')
[ -n "$PID" ] && [ -r "/proc/$PID/status" ] || {
	echo "$0: cannot find the server's pid in: $started" >&2
	exit 1
}

echo start >"$MNT/kpctl"
echo begin >"$MNT/gmon/ctl"
echo "interval 1" >"$MNT/prof/ctl"
echo start >"$MNT/prof/ctl"
"$P" prfld -f "$MNT/prf" >/dev/null
"$P" prfstat -f "$MNT/prf" on >/dev/null

# The workload: its own process group (setsid), killed as a group.
setsid nice -n 19 sh -c '
	( while :; do sha256sum /usr/bin/* >/dev/null 2>&1; done ) &
	while :; do
		/bin/true; sh -c "echo x | tr x y >/dev/null"; date >/dev/null; ls /usr/bin >/dev/null
	done' </dev/null >/dev/null 2>&1 &
WORKLOAD=$!

read_all() {
	timeout 120 cat "$MNT/kpdata" >/dev/null
	timeout 120 cat "$MNT/gmon/gmon.out" >/dev/null
	timeout 120 cat "$MNT/gmon/gmonparam" >/dev/null
	timeout 120 head -c "$(stat -c %s "$MNT/prf")" "$MNT/prf" >/dev/null
	for h in "$MNT"/prof/*/histogram; do
		[ -e "$h" ] && timeout 120 cat "$h" >/dev/null 2>&1
	done
	return 0
}

# The reader: every data file, every 60 s, beside the sampling loop.
(while :; do
	read_all
	sleep 60
done) </dev/null >/dev/null 2>&1 &
READER=$!

field() { sed -n "s/^$1:[[:space:]]*\([0-9]*\) kB/\1/p" "/proc/$PID/status"; }

echo "seconds,rss_kb,hwm_kb" >"$CSV"
echo "server pid $PID; sampling for $SECONDS_TOTAL s; CSV $CSV" >&2
start=$(date +%s)
while :; do
	now=$(date +%s)
	t=$((now - start))
	[ -r "/proc/$PID/status" ] || {
		echo "$0: the server (pid $PID) died at $t s" >&2
		exit 1
	}
	echo "$t,$(field VmRSS),$(field VmHWM)" >>"$CSV"
	[ "$t" -ge "$SECONDS_TOTAL" ] && break
	sleep 10
done

awk -F, -v limit="$LIMIT_KB" -v total="$SECONDS_TOTAL" '
NR == 1 { next }
{
	n++; t[n] = $1; r[n] = $2
	if (min == "" || $2 < min) min = $2
	if ($2 > max) max = $2
	hwm = $3
}
END {
	if (n == 0) { print "no samples"; exit 1 }
	# Growth over the second half: a bounded server is flat there.
	for (i = 1; i <= n; i++) if (t[i] >= total / 2) { mid = r[i]; break }
	printf "samples %d over %d s\n", n, t[n]
	printf "RSS min %.1f MB, max %.1f MB, final %.1f MB; VmHWM %.1f MB\n", min / 1024, max / 1024, r[n] / 1024, hwm / 1024
	printf "growth over the second half: %+.1f MB\n", (r[n] - mid) / 1024
	if (max <= limit) printf "verdict: PASS (max RSS %.1f MB <= 50 MB)\n", max / 1024
	else { printf "verdict: FAIL (max RSS %.1f MB > 50 MB)\n", max / 1024; exit 1 }
}' "$CSV" | tee "$OUT/summary.txt"
