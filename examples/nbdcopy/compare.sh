#!/bin/bash
# compare.sh: libnbd's nbdcopy against examples/nbdcopy on the same copies.
#
#   examples/nbdcopy/compare.sh [SIZE] [RUNS]      (defaults: 1G, 5)
#
# Needs nbdkit (Debian nbdkit), nbdcopy (libnbd-bin) and Go. Run it on a
# quiet machine: the figures mean nothing on a loaded one. For each case
# it runs each tool RUNS times, alternating, checks every copy with cmp,
# and prints the median wall time of each tool.
#
# The source is nbdkit's sparse-random plugin (seed 1: about a quarter of
# the disk is random data, the rest holes); the cases are
#   nbd->file  the export into a new sparse file
#   file->nbd  that file into an empty nbdkit memory export
#   nbd->nbd   the export into an empty nbdkit memory export
# Both tools run with their defaults (nbdcopy: 4 connections; ours:
# -connections 4, 16 requests of 256 KiB per connection).
set -euo pipefail

SIZE=${1:-1G}
RUNS=${2:-5}
for p in nbdkit nbdcopy go cmp awk; do
	command -v "$p" >/dev/null || { echo "compare.sh: $p not found" >&2; exit 1; }
done

dir=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	rm -rf "$dir"
}
trap cleanup EXIT

ours=$dir/nbdcopy-nhd
(cd "$(dirname "$0")/../.." && go build -o "$ours" ./examples/nbdcopy)

# serve NAME PLUGIN ARGS...: an nbdkit on $dir/NAME.sock, in the foreground
# of a background job, with its own pid.
serve() {
	local name=$1
	shift
	nbdkit -f -U "$dir/$name.sock" -P "$dir/$name.pid" "$@" &
	pids+=($!)
	for _ in $(seq 100); do [ -S "$dir/$name.sock" ] && return; sleep 0.05; done
	echo "compare.sh: nbdkit $* did not start" >&2
	exit 1
}
uri() { echo "nbd+unix:///?socket=$dir/$1.sock"; }

serve src sparse-random "$SIZE" seed=1 percent=25
nbdcopy "$(uri src)" "$dir/src.img" # the reference bytes, and file->nbd's source

# now: seconds since the epoch, with nanoseconds.
now() { date +%s.%N; }

# run1 TOOL CASE: one timed copy, checked; prints seconds.
run1() {
	local tool=$1 case=$2 bin src dst out t0 t1
	bin=$([ "$tool" = nbdcopy ] && echo nbdcopy || echo "$ours")
	case $case in
	nbd-file) src=$(uri src); out=$dir/out.img; rm -f "$out"; dst=$out ;;
	file-nbd) src=$dir/src.img; serve dst memory "$SIZE"; dst=$(uri dst) ;;
	nbd-nbd) src=$(uri src); serve dst memory "$SIZE"; dst=$(uri dst) ;;
	esac
	t0=$(now)
	"$bin" "$src" "$dst"
	t1=$(now)
	if [ "$case" = nbd-file ]; then
		cmp "$dir/src.img" "$out"
	else
		nbdcopy "$dst" "$dir/check.img" && cmp "$dir/src.img" "$dir/check.img" && rm -f "$dir/check.img"
		kill "$(cat "$dir/dst.pid")"
		wait "${pids[-1]}" 2>/dev/null || true
		unset 'pids[-1]'
		rm -f "$dir/dst.sock"
	fi
	awk -v a="$t1" -v b="$t0" 'BEGIN { print a - b }'
}

median() { sort -n | awk '{a[NR]=$1} END {printf "%.3f", (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

printf '%-9s %12s %12s   (%s, median of %d runs, seconds)\n' case nbdcopy nhd "$SIZE" "$RUNS"
for case in nbd-file file-nbd nbd-nbd; do
	: >"$dir/t.nbdcopy"
	: >"$dir/t.nhd"
	for _ in $(seq "$RUNS"); do
		run1 nbdcopy $case >>"$dir/t.nbdcopy"
		run1 nhd $case >>"$dir/t.nhd"
	done
	printf '%-9s %12s %12s\n' $case "$(median <"$dir/t.nbdcopy")" "$(median <"$dir/t.nhd")"
done
