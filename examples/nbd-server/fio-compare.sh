#!/usr/bin/env bash
# fio-compare.sh: fio --ioengine=nbd against examples/nbd-server and against
# `nbdkit memory`, the same jobs in the same run, alternating the two servers
# job by job and round by round so machine noise hits both alike. Prints
# every run and then the median of each job per server.
#
#   examples/nbd-server/fio-compare.sh [ROUNDS] [SECONDS]    (defaults 5 and 3)
#
# Needs go, fio (3.33, built with libnbd) and nbdkit on PATH. Both servers
# get a 1 GiB memory disk on a unix socket; 256 MiB of it is written first
# (so reads are of data, not holes) and the jobs run on that region.
set -euo pipefail
rounds=${1:-5}
rt=${2:-3}
cd "$(dirname "$0")/../.."
dir=$(mktemp -d)
cleanup() {
  [ -n "${gopid:-}" ] && kill "$gopid" 2>/dev/null || true
  [ -f "$dir/nbdkit.pid" ] && kill "$(cat "$dir/nbdkit.pid")" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

go build -o "$dir/nbd-server" ./examples/nbd-server
"$dir/nbd-server" -size 1G -unix "$dir/go.sock" 2>"$dir/go.log" &
gopid=$!
nbdkit -U "$dir/nbdkit.sock" -P "$dir/nbdkit.pid" memory 1G
for _ in $(seq 50); do [ -S "$dir/go.sock" ] && [ -S "$dir/nbdkit.sock" ] && break; sleep 0.1; done

declare -A uri=([go]="nbd+unix:///?socket=$dir/go.sock" [nbdkit]="nbd+unix:///?socket=$dir/nbdkit.sock")
for s in go nbdkit; do
  fio --name=fill --ioengine=nbd --uri="${uri[$s]}" --rw=write --bs=1m --iodepth=4 --size=256m \
    --output-format=terse >/dev/null 2>&1
done
echo "uptime: $(uptime)"
for r in $(seq "$rounds"); do
  for job in "randread 4k 32" "read 64k 8" "write 64k 8"; do
    set -- $job
    for s in go nbdkit; do
      fio --name="$1-$2" --ioengine=nbd --uri="${uri[$s]}" --rw="$1" --bs="$2" --iodepth="$3" \
        --size=256m --time_based --runtime="$rt" --ramp_time=1 --output-format=json 2>/dev/null |
        sed -n '/^{/,$p' | python3 -c "
import json, sys
j = json.load(sys.stdin)['jobs'][0]
d = j['read'] if j['read']['io_bytes'] > 0 else j['write']
print('$s', '$1-$2-qd$3', int(d['iops']), round(d['bw_bytes'] / 1e6, 1))"
    done
  done
done | tee "$dir/runs"
python3 - "$dir/runs" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    s, job, iops, bw = line.split()
    runs[(job, s)].append((int(iops), float(bw)))
print("\nmedians (IOPS, MB/s) and go/nbdkit ratio:")
for job in sorted({j for j, _ in runs}):
    g, k = runs[(job, "go")], runs[(job, "nbdkit")]
    gi, ki = statistics.median(i for i, _ in g), statistics.median(i for i, _ in k)
    gb, kb = statistics.median(b for _, b in g), statistics.median(b for _, b in k)
    print(f"  {job:18s} go {gi:8.0f} {gb:8.1f}   nbdkit {ki:8.0f} {kb:8.1f}   ratio {gi / ki:.2f}")
PY
