#!/usr/bin/env bash
# fio-ab.sh: one fio job against several builds of examples/nbd-server and
# `nbdkit memory`, round by round in the same run, with each server's CPU
# time per request (from /proc/PID/stat before and after each run, over
# the ramp and the run, divided by the run's rate times their length). Prints
# every run, then each server's median IOPS and CPU per request.
#
#   examples/nbd-server/fio-ab.sh ROUNDS RW BS IODEPTH SECONDS NAME=BINARY...
#
# Each run is fio --rw=RW --bs=BS --iodepth=IODEPTH --size=256m --time_based
# --runtime=SECONDS --ramp_time=1 on one connection.
#
# e.g., a build of the commit before a change against the change and nbdkit:
#   git worktree add /tmp/before HEAD~1
#   (cd /tmp/before && go build -o /tmp/srv-before ./examples/nbd-server)
#   go build -o /tmp/srv-after ./examples/nbd-server
#   examples/nbd-server/fio-ab.sh 6 write 64k 8 3 before=/tmp/srv-before after=/tmp/srv-after
#
# Needs fio (built with libnbd) and nbdkit on PATH. Every server gets a
# 1 GiB memory disk on a unix socket, 256 MiB of it written first, as in
# fio-compare.sh.
set -euo pipefail
[ $# -ge 6 ] || { sed -n '2,20p' "$0"; exit 2; }
rounds=$1 rw=$2 bs=$3 qd=$4 rt=$5
shift 5
dir=$(mktemp -d)
declare -A pid
names=()
cleanup() {
  for n in "${names[@]}"; do kill "${pid[$n]}" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
for arg in "$@"; do
  n=${arg%%=*} bin=${arg#*=}
  "$bin" -size 1G -unix "$dir/$n.sock" 2>"$dir/$n.log" &
  pid[$n]=$!
  names+=("$n")
done
nbdkit -U "$dir/nbdkit.sock" -P "$dir/nbdkit.pid" memory 1G
names+=(nbdkit)
for _ in $(seq 50); do [ -S "$dir/nbdkit.sock" ] && [ -s "$dir/nbdkit.pid" ] && break; sleep 0.1; done
pid[nbdkit]=$(cat "$dir/nbdkit.pid")
for n in "${names[@]}"; do
  for _ in $(seq 50); do [ -S "$dir/$n.sock" ] && break; sleep 0.1; done
  fio --name=fill --ioengine=nbd --uri="nbd+unix:///?socket=$dir/$n.sock" --rw=write --bs=1m --iodepth=4 \
    --size=256m --output-format=terse >/dev/null 2>&1
done
echo "uptime: $(uptime)"
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }  # utime + stime, in clock ticks
for r in $(seq "$rounds"); do
  for n in "${names[@]}"; do
    t0=$(cpu "${pid[$n]}")
    fio --name=ab --ioengine=nbd --uri="nbd+unix:///?socket=$dir/$n.sock" --rw="$rw" --bs="$bs" --iodepth="$qd" \
      --size=256m --time_based --runtime="$rt" --ramp_time=1 --output-format=json 2>/dev/null | sed -n '/^{/,$p' >"$dir/out.json"
    t1=$(cpu "${pid[$n]}")
    python3 - "$dir/out.json" "$n" "$t0" "$t1" "$(getconf CLK_TCK)" "$rt" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))['jobs'][0]
d = j['read'] if j['read']['io_bytes'] > 0 else j['write']
cpu = (float(sys.argv[4]) - float(sys.argv[3])) / float(sys.argv[5])
# The CPU time covers the 1 s ramp too: count its requests at the run's rate.
reqs = max(d['iops'], 1) * (float(sys.argv[6]) + 1)
print(sys.argv[2], int(d['iops']), round(cpu / reqs * 1e6, 1))
PY
  done
done | tee "$dir/runs"
python3 - "$dir/runs" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    n, iops, us = line.split()
    runs[n].append((int(iops), float(us)))
print("\nmedians: IOPS, server CPU us per request")
for n, v in runs.items():
    print(f"  {n:12s} {statistics.median(i for i, _ in v):9.0f} {statistics.median(u for _, u in v):6.1f}")
PY
