#!/bin/sh
# System calls per operation of one pair on one job, host and target
# apart (their sockets), and the process's futex, epoll_pwait and
# nanosleep calls: perf counts a run of 0 operations and one of OPS
# operations (both after the disk fill) and prints the difference divided
# by OPS. Counts, not rates: they hold on a busy machine.
#
#	examples/nvmebench/syscalls.sh nvme 4KiB-randread-qd32 20000
#	examples/nvmebench/syscalls.sh nbd 64KiB-write-qd8 5000
#
# Needs perf (Debian: linux-perf) and root, or perf_event_paranoid <= 1.
# NVMEBENCH names a built nvmebench; otherwise it is built into a
# temporary directory. QUEUES sets the I/O queues (NBD connections).
set -eu
PAIR=$1 JOB=$2 OPS=$3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
BIN=${NVMEBENCH:-}
if [ -z "$BIN" ]; then
	BIN=$T/nvmebench
	go build -o "$BIN" "$(dirname "$0")"
fi
EV=read,readv,write,writev,futex,epoll_pwait,nanosleep
EVS=$(echo $EV | sed 's/\([a-z_]*\)/syscalls:sys_enter_\1/g')
for n in 0 "$OPS"; do
	perf record -q -o "$T/$n.data" -e "$EVS" -- "$BIN" -count "$PAIR" -job "$JOB" -ops "$n" -queues "${QUEUES:-1}" 2>"$T/$n.fds"
	perf script -i "$T/$n.data" 2>/dev/null | awk -v fds="$T/$n.fds" '
		BEGIN { while ((getline l < fds) > 0) { split(l, f, " "); if (f[1] == "fd") side[f[2]] = f[3] } }
		{
			if (!match($0, /sys_enter_[a-z_0-9]+: /)) next
			call = substr($0, RSTART + 10, RLENGTH - 12)
			who = "process"
			if (call ~ /^(read|readv|write|writev)$/ && match($0, /fd: 0x[0-9a-f]+/)) {
				fd = 0; hex = substr($0, RSTART + 6, RLENGTH - 6)
				for (i = 1; i <= length(hex); i++) fd = fd * 16 + index("0123456789abcdef", substr(hex, i, 1)) - 1
				who = (fd in side) ? side[fd] : "other"
			}
			n[who " " call]++
		}
		END { for (k in n) print k, n[k] }' >"$T/$n.counts"
done
awk -v ops="$OPS" -v pair="$PAIR" -v job="$JOB" '
	FNR == NR { base[$1 " " $2] = $3; next }
	{ got[$1 " " $2] = $3 }
	END {
		split("host target process", whos, " ")
		split("read readv write writev futex epoll_pwait nanosleep", calls, " ")
		for (w = 1; w <= 3; w++) {
			line = sprintf("%-5s %-20s %-8s", pair, job, whos[w])
			for (c = 1; c <= 7; c++) {
				k = whos[w] " " calls[c]
				if ((k in got) || (k in base)) line = line sprintf(" %s=%.3f", calls[c], (got[k] - base[k]) / ops)
			}
			print line
		}
	}' "$T/0.counts" "$T/$OPS.counts"
