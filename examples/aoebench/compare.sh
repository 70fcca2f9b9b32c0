#!/bin/bash
# Runs vblade (e0.1) and examples/aoe-target (e0.2) in turn on a veth pair
# in a network namespace of its own, each alone on the link, and measures
# each with aoebench from the other end: RUNS rounds of an RT-second write
# and read, the targets' order swapped every round; prints each run and
# the medians. Needs root (a namespace, raw sockets) and vblade.
#
#   go build -o /tmp/aoebench ./examples/aoebench
#   go build -o /tmp/aoe-target ./examples/aoe-target
#   AOEBENCH=/tmp/aoebench AOETARGET=/tmp/aoe-target RUNS=5 RT=3 examples/aoebench/compare.sh
#
# MTU (default 9000) sets the link's MTU, SIZE (default 256m) the disks;
# BENCHARGS adds aoebench flags (-depth 1: one frame in flight); PIN=1 runs
# the target on CPU 0 and aoebench on CPU 1. Each line also gives the CPU
# time the target's process used per GB moved (/proc/PID/stat).
set -eu
AOEBENCH=${AOEBENCH:-aoebench}; AOETARGET=${AOETARGET:-aoe-target}
RUNS=${RUNS:-5}; RT=${RT:-3}; MTU=${MTU:-9000}; SIZE=${SIZE:-256m}; BENCHARGS=${BENCHARGS:-}
TPIN=; BPIN=; [ "${PIN:-0}" = 1 ] && TPIN="taskset -c 0" && BPIN="taskset -c 1"
ns=aoebench-$$
dir=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  ip netns del "$ns" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
ip netns add "$ns"
ip -n "$ns" link add veth0 type veth peer name veth1
for l in lo veth0 veth1; do
  [ $l = lo ] || ip -n "$ns" link set $l mtu "$MTU"
  ip -n "$ns" link set $l up
done
truncate -s "$SIZE" "$dir/vblade.img" "$dir/aoe-target.img"
start() { # start TARGET: serve it on veth0 until stop
  case $1 in
  vblade) ip netns exec "$ns" $TPIN vblade 0 1 veth0 "$dir/vblade.img" >/dev/null 2>&1 & ;;
  aoe-target) ip netns exec "$ns" $TPIN "$AOETARGET" -iface veth0 -shelf 0 -slot 2 -file "$dir/aoe-target.img" >/dev/null 2>&1 & ;;
  esac
  pid=$!
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; } # the target's CPU time
measure() { # measure TARGET RW: MB/s and the target's CPU seconds per GB
  local slot=1 t0 t1 mbs; [ "$1" = aoe-target ] && slot=2
  t0=$(ticks)
  # shellcheck disable=SC2086
  mbs=$(ip netns exec "$ns" $BPIN "$AOEBENCH" -iface veth1 -shelf 0 -slot $slot -rw "$2" -runtime "${RT}s" -size "$SIZE" $BENCHARGS |
    grep -o '[0-9.]* MB/s' | cut -d' ' -f1)
  t1=$(ticks)
  echo "$mbs $(awk -v m="$mbs" -v c=$((t1 - t0)) -v rt="$RT" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", c / hz / (m * rt / 1000) }')"
}
for r in $(seq "$RUNS"); do
  order="vblade aoe-target"; [ $((r % 2)) = 0 ] && order="aoe-target vblade"
  for t in $order; do
    start $t
    sleep 0.5
    for rw in write read; do echo "$t $rw $(measure $t $rw)"; done
    stop
  done
done | awk 'function median(a, m,   i, j, t, s) {
    for (i = 1; i <= m; i++) s[i] = a[i]
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (s[j] < s[i]) { t = s[i]; s[i] = s[j]; s[j] = t }
    return (m % 2) ? s[(m + 1) / 2] : (s[m / 2] + s[m / 2 + 1]) / 2
  }
  {k=$1" "$2; v[k]=v[k]" "$3; n[k]++; x[k, n[k]]=$3; y[k, n[k]]=$4}
  END {
    for (k in v) {
      m = n[k]
      for (i = 1; i <= m; i++) { a[i] = x[k, i]; b[i] = y[k, i] }
      med[k] = median(a, m)
      printf "%-17s median %7.1f MB/s  %6.2f CPU s/GB  runs:%s\n", k, med[k], median(b, m), v[k]
    }
    if (med["vblade write"] > 0) printf "aoe-target / vblade: write %.2fx, read %.2fx\n", med["aoe-target write"] / med["vblade write"], med["aoe-target read"] / med["vblade read"]
  }'
