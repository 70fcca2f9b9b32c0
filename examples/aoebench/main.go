// Command aoebench drives an AoE target from user space as Linux's aoe
// driver does, with no guest in the way: it asks the target's config
// (query config, for its MAC and buffer count), then keeps as many ATA
// READ or WRITE SECTORS EXT frames in flight as the target advertises
// buffers, each of as many sectors as the interface's MTU carries, over
// the first -size bytes of the disk in order, and prints the rate.
//
//	aoebench -iface veth1 -shelf 0 -slot 1 -rw read -runtime 5s
//
// It needs the privileges of a raw socket (AF_PACKET). compare.sh runs
// vblade and examples/aoe-target side by side under it, in a network
// namespace of its own, over a veth pair. The rate is the targets' (and
// the kernel's path between the two ends of the pair): a TCG guest's
// initiator, as in ata/aoe's TestKernelInitiatorVsVblade, is slower than
// either target.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nhdkit/nhd/ata/aoe"
	"github.com/nhdkit/nhd/internal/size"
)

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "aoebench:", err)
		}
		os.Exit(2)
	}
	tr, err := aoe.ListenPacket(o.iface)
	if err != nil {
		fmt.Fprintln(os.Stderr, "aoebench:", err)
		os.Exit(1)
	}
	r, err := run(tr, o)
	tr.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "aoebench:", err)
		os.Exit(1)
	}
	fmt.Println(r)
}

type options struct {
	iface       string
	shelf       uint16
	slot        uint8
	write       bool
	runtime     time.Duration
	size        int64
	depth       int
	sectors     int
	waitReplies time.Duration // how long the end waits for replies in flight
}

func parseFlags(args []string, errOut io.Writer) (*options, error) {
	fs := flag.NewFlagSet("aoebench", flag.ContinueOnError)
	fs.SetOutput(errOut)
	var o options
	var shelf, slot, depth, sectors int
	var rw, sz string
	fs.StringVar(&o.iface, "iface", "", "network interface to send on (required)")
	fs.IntVar(&shelf, "shelf", 0, "the target's shelf (major)")
	fs.IntVar(&slot, "slot", 1, "the target's slot (minor)")
	fs.StringVar(&rw, "rw", "read", "read or write")
	fs.DurationVar(&o.runtime, "runtime", 5*time.Second, "how long to run")
	fs.StringVar(&sz, "size", "64m", "bytes of the disk to go over, from its start (suffixes k, m, g)")
	fs.IntVar(&depth, "depth", 0, "frames in flight (0: the target's buffer count)")
	fs.IntVar(&sectors, "sectors", 0, "sectors per frame (0: as many as the MTU carries)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	n, err := size.Parse(sz)
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case o.iface == "":
		return nil, errors.New("-iface is required")
	case shelf < 0 || shelf >= aoe.BroadcastMajor || slot < 0 || slot >= aoe.BroadcastMinor:
		return nil, fmt.Errorf("-shelf %d -slot %d: not a target's address", shelf, slot)
	case rw != "read" && rw != "write":
		return nil, fmt.Errorf("-rw %q: read or write", rw)
	case err != nil || n < 512:
		return nil, fmt.Errorf("-size %q: at least one sector", sz)
	case o.runtime <= 0 || depth < 0 || sectors < 0 || sectors > 255:
		return nil, errors.New("-runtime must be positive, -depth at least 0, -sectors 0-255")
	}
	o.shelf, o.slot, o.write, o.size, o.depth, o.sectors = uint16(shelf), uint8(slot), rw == "write", n, depth, sectors
	o.waitReplies = time.Second
	return &o, nil
}
