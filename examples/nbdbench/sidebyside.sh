#!/bin/bash
# Runs nbdbench (one goroutine per request, then -engine async: one
# goroutine with StartRead/StartWrite) and fio --ioengine=nbd (libnbd) side
# by side on one nbdkit memory server on a unix socket, alternating, RUNS
# times per job of RT seconds each, and prints the raw results; pipe them through
# sidebyside_table.py for the medians table of nbd/CLIENT.md.
#
#   go build -o /tmp/nbdbench ./examples/nbdbench
#   NBDBENCH=/tmp/nbdbench RUNS=5 RT=5 examples/nbdbench/sidebyside.sh > /tmp/sbs.out
#   python3 examples/nbdbench/sidebyside_table.py /tmp/sbs.out
set -u
NBDBENCH=${NBDBENCH:-nbdbench}
RT=${RT:-5}
RUNS=${RUNS:-5}
dir=$(mktemp -d)
S=$dir/nbd.sock
U="nbd+unix:///?socket=$S"
# SPLICE=1 runs both nbdbench engines with -splice (nbd.WithSplicedWrites).
SPLICEFLAG=""
[ "${SPLICE:-0}" = 1 ] && SPLICEFLAG=-splice
# SERVER=nbdkit (the default) serves nbdkit's memory plugin; SERVER=nhd
# serves this module's examples/nbd-server (NBDSERVER: its binary, built
# with go build -o /tmp/nbd-server ./examples/nbd-server).
case "${SERVER:-nbdkit}" in
nhd) "${NBDSERVER:?set NBDSERVER to a build of examples/nbd-server}" -unix "$S" -size 1G & ;;
*) nbdkit --foreground --exit-with-parent --unix "$S" memory size=1G & ;;
esac
NP=$!
trap 'kill $NP; rm -rf "$dir"' EXIT
for _ in $(seq 50); do [ -S "$S" ] && break; sleep 0.1; done
# Prefill, so reads hit allocated memory as on a real disk.
fio --name=fill --ioengine=nbd --uri="$U" --rw=write --bs=1m --iodepth=4 --size=1G >/dev/null 2>&1
job() { # name rw bs iodepth
  for r in $(seq "$RUNS"); do
    echo "== $1 run $r nbdbench"
    "$NBDBENCH" $SPLICEFLAG -uri "$U" -rw "$2" -bs "$3" -iodepth "$4" -runtime "${RT}s" -size 1g | tail -n +2
    echo "== $1 run $r nbdbench-async"
    "$NBDBENCH" $SPLICEFLAG -engine async -uri "$U" -rw "$2" -bs "$3" -iodepth "$4" -runtime "${RT}s" -size 1g | tail -n +2
    echo "== $1 run $r fio"
    fio --name="$1" --ioengine=nbd --uri="$U" --rw="$2" --bs="$3" --iodepth="$4" --runtime="$RT" \
      --time_based --size=1G --percentile_list=50:99:99.9 2>&1 | grep -E ' (read|write): IOPS|clat percentiles|th=\['
  done
}
job randread4k-qd32 randread 4k 32
job read64k-qd8 read 64k 8
job write64k-qd8 write 64k 8
job randread4k-qd1 randread 4k 1
