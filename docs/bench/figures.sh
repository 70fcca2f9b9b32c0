#!/bin/bash
# Takes every figure of the root README's table in one run, in the order
# of the table, each against its anchor in the same run, and prints a
# summary with the machine, the load before each step and the ratios the
# table quotes (docs/bench/figures.py). About 20 minutes on 2 vCPUs.
#
#	docs/bench/figures.sh                 # outputs in a new temporary directory
#	OUT=/tmp/fig docs/bench/figures.sh    # or in OUT, kept
#	python3 docs/bench/figures.py /tmp/fig  # the summary again
#	ONLY="nhd limit" docs/bench/figures.sh  # only these steps (names below)
#
# Run it on a quiet machine: it waits up to WAIT seconds (300) for the
# one-minute load average to fall below 1 and says in the summary if it
# did not. Needs Go, python3, nbdkit and fio with its nbd engine (Debian:
# nbdkit, fio); the steps that need what is missing are skipped and named.
# Run from the module's root.
set -u
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-$(mktemp -d /tmp/nhd-figures.XXXXXX)}
WAIT=${WAIT:-300}
mkdir -p "$OUT"
BIN=$OUT/bin
mkdir -p "$BIN"
log=$OUT/steps.txt
: >"$log"

load1() { cut -d' ' -f1 /proc/loadavg; }
quiet() { awk -v l="$(load1)" 'BEGIN { exit !(l < 1) }'; }
for _ in $(seq "$((WAIT / 10))"); do quiet && break; sleep 10; done

{
	echo "date $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "cpu $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
	echo "family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ') model $(grep -m1 '^model[[:space:]]' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')"
	echo "cpus $(nproc)"
	echo "go $(go env GOVERSION)"
	echo "rev $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (modified)')"
	echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
	quiet || echo "loaded: the load average stayed at 1 or more"
} >"$OUT/env.txt"

have() { command -v "$1" >/dev/null 2>&1; }
step() { # name command...: runs command, output to OUT/name.txt
	local name=$1
	shift
	[ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $name "* ]] || return 0
	echo "$name $(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg)" >>"$log"
	echo "== $name" >&2
	"$@" >"$OUT/$name.txt" 2>&1
}
skip() { echo "$1 skipped: $2" >>"$log"; echo "== $1 skipped: $2" >&2; }

go build -o "$BIN/nhd" ./examples/nhd &&
	go build -o "$BIN/nbdbench" ./examples/nbdbench &&
	go build -o "$BIN/nbd-server" ./examples/nbd-server &&
	go build -o "$BIN/nvmebench" ./examples/nvmebench &&
	go test -c -o "$BIN/fifo.test" ./fifo || exit 1

nhd5() { for i in 1 2 3 4 5; do echo "### run $i"; "$BIN/nhd"; done; }
step nhd nhd5
# Table 4 against nbdkit in another process, alternated with the server
# in process: how far the bridge across commands gets from its back end
# when the server is not in the same Go runtime.
nhdkit() {
	local dir np i
	dir=$(mktemp -d)
	nbdkit --foreground --exit-with-parent --unix "$dir/s" memory size=1G &
	np=$!
	for _ in $(seq 50); do [ -S "$dir/s" ] && break; sleep 0.1; done
	for i in 1 2 3 4; do
		echo "### nbdkit run $i"
		"$BIN/nhd" -uri "nbd+unix:///?socket=$dir/s"
		echo "### in-process run $i"
		"$BIN/nhd"
	done
	kill "$np"
	rm -rf "$dir"
}
if have nbdkit; then
	step nhd-nbdkit nhdkit
else
	skip nhd-nbdkit "needs nbdkit (Debian: nbdkit)"
fi
if have nbdkit && have fio; then
	step sbs-nbdkit env NBDBENCH="$BIN/nbdbench" RUNS=3 RT=3 examples/nbdbench/sidebyside.sh
	step sbs-nhd env SERVER=nhd NBDSERVER="$BIN/nbd-server" NBDBENCH="$BIN/nbdbench" RUNS=3 RT=3 examples/nbdbench/sidebyside.sh
else
	skip sbs "needs nbdkit and fio (Debian: nbdkit, fio)"
fi
step limit go test -run '^$' -bench Limit64K -count 5 ./nbd
if have nbdkit && have fio; then
	step fio-compare examples/nbd-server/fio-compare.sh 3 3
else
	skip fio-compare "needs nbdkit and fio (Debian: nbdkit, fio)"
fi
step allocs go test -run '^$' -bench 'BenchmarkClient|Server' -benchmem -benchtime 2000x ./nbd
step nvme "$BIN/nvmebench" -runtime 2s -rounds 9
step ata go test -run '^$' -bench . -count=5 ./ata
fifo10() { for i in $(seq 10); do "$BIN/fifo.test" -test.run '^$' -test.bench Handoff -test.benchtime 1s; done; }
step fifo fifo10
step dma go test -run '^$' -bench 'Transfer|InlineAsync' -count=5 ./dma
step pipeline go test -run '^$' -bench . -count=5 ./pipeline
step zerocopy go test -run '^$' -bench SendAlternating -benchtime=5s -count=5 ./zerocopy
step checksum go test -run '^$' -bench 'Checksum$|^BenchmarkCopy$|CopyAndChecksum$|CopyThenChecksum$' -count=5 ./checksum
echo "done $(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg)" >>"$log"

python3 docs/bench/figures.py "$OUT"
echo "outputs: $OUT" >&2
