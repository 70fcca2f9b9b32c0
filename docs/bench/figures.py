#!/usr/bin/env python3
"""Summarises a run of docs/bench/figures.sh: the machine and the load,
then each figure of the root README's table against its same-run anchor,
as medians (with the range) of the runs. Usage: figures.py OUTDIR."""

import collections
import os
import re
import statistics
import subprocess
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else sys.exit(__doc__)
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def read(name):
    try:
        with open(os.path.join(OUT, name + ".txt")) as f:
            return f.read()
    except FileNotFoundError:
        return None


def num(x):
    return "%.0f" % x if abs(x) >= 100 else "%.3g" % x


def med(v, unit=""):
    """The median of v, then its range and count."""
    if not v:
        return "none"
    return "%s%s (%s-%s%s, n=%d)" % (num(statistics.median(v)), unit, num(min(v)), num(max(v)), unit, len(v))


def bench(text):
    """Go benchmark lines: {name without -N: [{unit: value}, ...]} in order."""
    runs = collections.defaultdict(list)
    for line in (text or "").splitlines():
        m = re.match(r"^(Benchmark\S+?)(-\d+)?\s+\d+\s+(.*)$", line)
        if not m:
            continue
        f = m.group(3).split()
        runs[m.group(1)].append({f[i + 1]: float(f[i]) for i in range(0, len(f) - 1, 2) if re.match(r"^[-\d.e+]+$", f[i])})
    return runs


def head(title):
    print("\n## " + title)


def missing(name):
    text = read(name)
    if text is None:
        print("not run (see the steps above)")
    return text


def env():
    print("# nhd figures")
    print(read("env") or "no env.txt", end="")
    print("steps (UTC start, load average 1/5/15 min):")
    print(read("steps") or "", end="")


def nhd_runs(text):
    """examples/nhd's output: speed-ups by (direction, row), the bridge
    across commands as a share of its back end by direction, and the
    worst model error of each run."""
    speed = collections.defaultdict(list)
    share = collections.defaultdict(list)
    worst = []
    d = None
    for line in text.splitlines():
        m = re.match(r"^\s*(read|write)?\s+(\+ [a-zA-Z -]+?|store-and-forward)\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+\w+\s+[\d.]+\s+[-+\d.]+%\s*(x[\d.]+)?\s*$", line)
        if m:
            d = m.group(1) or d
            if m.group(3):
                speed[(d, m.group(2))].append(float(m.group(3)[1:]))
        m = re.match(r"^(read|write): .*across commands, (\d+)% of its", line)
        if m:
            share[m.group(1)].append(float(m.group(2)))
        m = re.match(r"^model error: worst ([\d.]+)%", line)
        if m:
            worst.append(float(m.group(1)))
    return speed, share, worst


def print_share(share, where):
    for d, v in share.items():
        print("%-5s pipelined across commands%s: %s of the bare client at the same depth, the host's work left out of both (goal 90%%)" % (d, where, med(v, "%")))


def table4():
    head("Table 4 (go run ./examples/nhd), medians over the runs")
    text = missing("nhd")
    if text is not None:
        speed, share, worst = nhd_runs(text)
        for (d, row), v in speed.items():
            print("%-5s %-28s speed-up %s" % (d, row, med(v, "x")))
        print_share(share, "")
        print("worst model error over the 12 rows: %s (goal 10%%)" % med(worst, "%"))
    head("Table 4's bridge across commands, nbdkit in another process against the server in process, alternated")
    text = missing("nhd-nbdkit")
    if text is None:
        return
    for name, where in (("nbdkit", ", nbdkit"), ("in-process", ", in process")):
        runs = re.findall(r"^### %s run \d+\n(.*?)(?=^### |\Z)" % name, text, re.S | re.M)
        _, share, worst = nhd_runs("".join(runs))
        print_share(share, where)
        print("worst model error%s: %s" % (where, med(worst, "%")))


def sidebyside():
    for name, title in (("sbs-nbdkit", "nbdkit memory"), ("sbs-nhd", "this module's server")):
        head("NBD client against fio + libnbd on " + title + " (examples/nbdbench/sidebyside.sh)")
        if missing(name) is None:
            continue
        r = subprocess.run([sys.executable, os.path.join(ROOT, "examples/nbdbench/sidebyside_table.py"), os.path.join(OUT, name + ".txt")],
                           capture_output=True, text=True)
        print(r.stdout + r.stderr, end="")


def limit():
    head("NBD client's 64 KiB reads against one raw unix-socket stream (BenchmarkLimit64K); goal 0.5x")
    b = bench(missing("limit"))
    c = [r["MB/s"] for r in b.get("BenchmarkLimit64K/client-qd8", [])]
    u = [r["MB/s"] for r in b.get("BenchmarkLimit64K/unix-stream", [])]
    if c and u:
        print("client %s MB/s, stream %s MB/s: %.2fx" % (med(c), med(u), statistics.median(c) / statistics.median(u)))


def fio_compare():
    head("NBD server against nbdkit (examples/nbd-server/fio-compare.sh 3 3)")
    text = missing("fio-compare")
    if text is not None:
        print(text[text.find("medians"):] if "medians" in text else text[-2000:], end="")


def allocs():
    head("NBD client and server allocations per request")
    b = bench(missing("allocs"))
    bad = {n: max(r.get("allocs/op", 0) for r in rs) for n, rs in b.items() if any(r.get("allocs/op", 0) for r in rs)}
    print("%d benchmarks, %s" % (len(b), "all 0 allocs/op" if not bad else "allocating: %s" % bad))


def nvme():
    head("NVMe/TCP pair against the NBD pair (examples/nvmebench -rounds 9); goal 1.0x with one queue")
    text = missing("nvme")
    if text is not None:
        print(text, end="")


def fifo():
    head("FIFO hand-off, ten rounds, ratio of each round (chan ns/block over ring's); goal 2x and 10x")
    b = bench(missing("fifo"))
    ch = [r["ns/block"] for r in b.get("BenchmarkHandoff/chan", [])]
    for v in ("ring", "ring-batch64"):
        rv = [r["ns/block"] for r in b.get("BenchmarkHandoff/" + v, [])]
        ratios = [c / x for c, x in zip(ch, rv)]
        print("%-13s %s ns/block; chan %s ns/block; chan over %s: %s" % (v, med(rv), med(ch), v, med(ratios, "x")))


def medians(name, title, units):
    head(title)
    b = bench(missing(name))
    for n, rs in b.items():
        cells = ["%s %s" % (u, med([r[u] for r in rs if u in r])) for u in units if any(u in r for r in rs)]
        print("%-60s %s" % (n, "  ".join(cells)))
    return b


def ata():
    b = medians("ata", "ATA device (go test -bench . ./ata)", ["ns/op", "MB/s"])
    r, c = b.get("BenchmarkReadDMAExt"), b.get("BenchmarkAnchorCopy64K")
    if r and c:
        print("READ DMA EXT of 64 KiB against one copy(): %.2fx the rate" %
              (statistics.median(x["ns/op"] for x in c) / statistics.median(x["ns/op"] for x in r)))


def main():
    env()
    table4()
    sidebyside()
    limit()
    fio_compare()
    allocs()
    nvme()
    ata()
    fifo()
    medians("dma", "DMA engine (go test -bench 'Transfer|InlineAsync' ./dma)", ["MB/s"])
    medians("pipeline", "pipeline (go test -bench . ./pipeline)", ["ns/op"])
    medians("zerocopy", "writev of header + 64 KiB against one flat write (SendAlternating)", ["raw/flat", "writev/flat", "copies/B"])
    b = medians("checksum", "Internet checksum (go test -bench ./checksum)", ["MB/s"])
    for size in ("1500", "65536", "1048576"):
        fused, apart = b.get("BenchmarkCopyAndChecksum/" + size), b.get("BenchmarkCopyThenChecksum/" + size)
        if fused and apart:
            print("CopyAndChecksum against copy-then-sum, %s B: %.2fx" %
                  (size, statistics.median(x["MB/s"] for x in fused) / statistics.median(x["MB/s"] for x in apart)))


main()
