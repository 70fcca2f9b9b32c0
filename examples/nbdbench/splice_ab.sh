#!/bin/bash
# Interleaves 64 KiB writes at depth 8 by nbdbench with and without -splice
# (nbd.WithSplicedWrites), each engine, and by fio --ioengine=nbd (libnbd),
# on one prefilled server on a unix socket, RUNS rounds of RT seconds, and
# prints each client's IOPS per round and their median.
#
#   go build -o /tmp/nbdbench ./examples/nbdbench
#   go build -o /tmp/nbd-server ./examples/nbd-server
#   NBDBENCH=/tmp/nbdbench NBDSERVER=/tmp/nbd-server SERVER=nhd RUNS=5 examples/nbdbench/splice_ab.sh
#
# SERVER=nbdkit (the default) serves nbdkit's memory plugin, SERVER=nhd
# this module's examples/nbd-server. BS, RW and QD change the job; FLAG
# (default -splice) is the nbdbench flag set in the second of each pair,
# for example the client without its spin for replies at depth one:
#
#   FLAG=-replyspin=0 RW=randread BS=4k QD=1 NBDBENCH=/tmp/nbdbench RUNS=6 examples/nbdbench/splice_ab.sh
set -u
NBDBENCH=${NBDBENCH:-nbdbench}
RT=${RT:-3}; RUNS=${RUNS:-5}; BS=${BS:-64k}; RW=${RW:-write}; QD=${QD:-8}; FLAG=${FLAG:--splice}
dir=$(mktemp -d)
S=$dir/nbd.sock
U="nbd+unix:///?socket=$S"
case "${SERVER:-nbdkit}" in
nhd) "${NBDSERVER:?set NBDSERVER to a build of examples/nbd-server}" -unix "$S" -size 1G 2>/dev/null & ;;
*) nbdkit --foreground --exit-with-parent --unix "$S" memory size=1G & ;;
esac
NP=$!
trap 'kill $NP; rm -rf "$dir"' EXIT
for _ in $(seq 50); do [ -S "$S" ] && break; sleep 0.1; done
fio --name=fill --ioengine=nbd --uri="$U" --rw=write --bs=1m --iodepth=4 --size=1G >/dev/null 2>&1
nb() { "$NBDBENCH" "$@" -uri "$U" -rw "$RW" -bs "$BS" -iodepth "$QD" -runtime "${RT}s" -size 1g | grep -o 'IOPS=[0-9]*' | cut -d= -f2; }
for _ in $(seq "$RUNS"); do
  echo "goroutines $(nb)"
  echo "goroutines$FLAG $(nb "$FLAG")"
  echo "async $(nb -engine async)"
  echo "async$FLAG $(nb -engine async "$FLAG")"
  echo "fio $(fio --name=ab --ioengine=nbd --uri="$U" --rw="$RW" --bs="$BS" --iodepth="$QD" --runtime="$RT" \
    --time_based --size=1G 2>&1 | grep -o 'IOPS=[0-9.]*k\?' | head -1 | cut -d= -f2 | sed 's/\(.*\)k$/\1*1000/' | bc | cut -d. -f1)"
done | awk '{v[$1]=v[$1]" "$2; n[$1]++; x[$1, n[$1]]=$2}
  END {
    for (k in v) {
      m = n[k]; for (i = 1; i <= m; i++) s[i] = x[k, i]
      for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (s[j] < s[i]) { t = s[i]; s[i] = s[j]; s[j] = t }
      med[k] = (m % 2) ? s[(m + 1) / 2] : (s[m / 2] + s[m / 2 + 1]) / 2
      printf "%-24s median %7.0f IOPS  runs:%s\n", k, med[k], v[k]
    }
    if (med["fio"] > 0) for (k in med) if (k != "fio") printf "%-24s %.2fx fio+libnbd\n", k, med[k] / med["fio"]
  }'
