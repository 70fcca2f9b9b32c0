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
# MTU (default 9000) sets the link's MTU, SIZE (default 256m) the disks.
set -eu
AOEBENCH=${AOEBENCH:-aoebench}; AOETARGET=${AOETARGET:-aoe-target}
RUNS=${RUNS:-5}; RT=${RT:-3}; MTU=${MTU:-9000}; SIZE=${SIZE:-256m}
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
  vblade) ip netns exec "$ns" vblade 0 1 veth0 "$dir/vblade.img" >/dev/null 2>&1 & ;;
  aoe-target) ip netns exec "$ns" "$AOETARGET" -iface veth0 -shelf 0 -slot 2 -file "$dir/aoe-target.img" >/dev/null 2>&1 & ;;
  esac
  pid=$!
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }
measure() { # measure TARGET RW
  local slot=1; [ "$1" = aoe-target ] && slot=2
  ip netns exec "$ns" "$AOEBENCH" -iface veth1 -shelf 0 -slot $slot -rw "$2" -runtime "${RT}s" -size "$SIZE" |
    grep -o '[0-9.]* MB/s' | cut -d' ' -f1
}
for r in $(seq "$RUNS"); do
  order="vblade aoe-target"; [ $((r % 2)) = 0 ] && order="aoe-target vblade"
  for t in $order; do
    start $t
    sleep 0.5
    for rw in write read; do echo "$t $rw $(measure $t $rw)"; done
    stop
  done
done | awk '{k=$1" "$2; v[k]=v[k]" "$3; n[k]++; x[k, n[k]]=$3}
  END {
    for (k in v) {
      m = n[k]; for (i = 1; i <= m; i++) s[i] = x[k, i]
      for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (s[j] < s[i]) { t = s[i]; s[i] = s[j]; s[j] = t }
      med[k] = (m % 2) ? s[(m + 1) / 2] : (s[m / 2] + s[m / 2 + 1]) / 2
      printf "%-17s median %7.1f MB/s  runs:%s\n", k, med[k], v[k]
    }
    if (med["vblade write"] > 0) printf "aoe-target / vblade: write %.2fx, read %.2fx\n", med["aoe-target write"] / med["vblade write"], med["aoe-target read"] / med["vblade read"]
  }'
