#!/bin/bash
# Counts the client's syscalls per request: runs nbdbench under strace -c -f
# against a prefilled nbdkit memory server on a unix socket, one job at a
# time, and prints each syscall's count divided by the requests completed.
# strace slows both sides, so read counts per request, never rates; counts
# hold on a shared machine, rates do not.
#
#   go build -o /tmp/nbdbench ./examples/nbdbench
#   NBDBENCH=/tmp/nbdbench RT=3 examples/nbdbench/syscalls.sh
#
# Compare two builds by running it once with each NBDBENCH.
set -u
NBDBENCH=${NBDBENCH:-nbdbench}
RT=${RT:-3}
dir=$(mktemp -d)
S=$dir/nbd.sock
U="nbd+unix:///?socket=$S"
nbdkit --foreground --exit-with-parent --unix "$S" memory size=1G &
NP=$!
trap 'kill $NP; rm -rf "$dir"' EXIT
for _ in $(seq 50); do [ -S "$S" ] && break; sleep 0.1; done
"$NBDBENCH" -uri "$U" -rw write -bs 1m -iodepth 4 -runtime 2s >/dev/null # prefill
for job in "randread 4k 32" "read 64k 8" "write 64k 8" "randread 4k 1"; do
	set -- $job
	out=$(strace -c -f -o "$dir/strace" "$NBDBENCH" -uri "$U" -rw "$1" -bs "$2" -iodepth "$3" -runtime "${RT}s")
	ops=$(echo "$out" | sed -n 's/.*ops=\([0-9]*\).*/\1/p' | head -1)
	echo "rw=$1 bs=$2 iodepth=$3 requests=$ops"
	awk -v ops="$ops" '$NF ~ /^(read|write|writev|futex|epoll_pwait|nanosleep)$/ {
		printf "  %-12s %9d  %6.3f per request\n", $NF, $4, $4/ops }' "$dir/strace"
done
