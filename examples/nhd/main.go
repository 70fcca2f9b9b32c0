// Command nhd is a software Network Hard Disk: ATA devices whose storage is
// an NBD server, driven through their registers by a host workload, and
// measured the way the 2007 NHD paper measures its hardware: per node,
// end to end, before and after each optimisation, against the cascade
// model.
//
// With no flags it starts an in-process NBD server (a sparse memory disk)
// on a unix socket, connects the NBD client, puts an ATA device in front
// of it with DMA through a sector FIFO and the checksum computed in
// flight, runs the paper's workload (64 KiB READ DMA EXT and WRITE DMA
// EXT, sequential, then random) verifying every byte read, and prints
// this machine's Table 4.
//
//	go run ./examples/nhd
//	go run ./examples/nhd -workload randrw70 -depth 4
//	go run ./examples/nhd -uri nbd://127.0.0.1:10809/disk -json
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/bridge"
	"github.com/nhdkit/nhd/nbd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "nhd:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "nhd:", err)
		os.Exit(1)
	}
}

// errUsage marks an error in the command line.
var errUsage = errors.New("usage")

type usageError struct{ msg string }

func (e *usageError) Error() string        { return e.msg + " (nhd -h lists the flags)" }
func (e *usageError) Is(target error) bool { return target == errUsage }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// config is the command line.
type config struct {
	URI       string        `json:"uri"`
	Workload  string        `json:"workload"`
	Duration  time.Duration `json:"duration_ns"`
	Bytes     int64         `json:"bytes"`
	Depth     int           `json:"depth"`
	Size      int64         `json:"size"`
	Span      int64         `json:"span"`
	Chunk     int           `json:"chunk"`
	Spin      time.Duration `json:"spin_ns"`
	Ahead     int           `json:"ahead"`
	Overlap   bool          `json:"overlap"`
	Table     bool          `json:"table"`
	Pipelined bool          `json:"pipelined"`
	Seed      uint64        `json:"seed"`
	JSON      bool          `json:"-"`

	phases  []Workload
	spanSet bool // -span given: a disk smaller than it is an error, not the span
}

// flags are the command line's flags and the strings parsed after them.
type flags struct {
	fs                       *flag.FlagSet
	bytes, size, span, chunk string
}

func newFlags(c *config) *flags {
	f := &flags{fs: flag.NewFlagSet("nhd", flag.ContinueOnError)}
	fs := f.fs
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.URI, "uri", "", "NBD server to use (nbd://host:port/export, nbd+unix:///export?socket=path); empty starts one in process. The workload OVERWRITES the export's first -span bytes")
	fs.StringVar(&c.Workload, "workload", "seq64k", "seq64k, rand4k, randrw70, or custom: bs=SIZE,read=PCT,rand|seq")
	fs.DurationVar(&c.Duration, "duration", time.Second, "how long each phase of the workload runs (Table 4 measures each direction for 4 times as long)")
	fs.StringVar(&f.bytes, "bytes", "", "bytes each phase moves, instead of -duration (4m, 1g)")
	fs.IntVar(&c.Depth, "depth", 1, "commands in flight: ATA devices sharing the one NBD client")
	fs.StringVar(&f.size, "size", "4g", "size of the in-process server's sparse memory disk")
	fs.StringVar(&f.span, "span", "128m", "bytes of the disk the workload touches (all written first, then verified on every read); unless given, at most the disk's size")
	fs.StringVar(&f.chunk, "chunk", "32k", "bytes per NBD request in Table 4's bridge pipelined in chunks (bridge.Config.Chunk)")
	fs.DurationVar(&c.Spin, "spin", bridge.DefaultSpin, "how long the DMA engine's sides spin for each other before they park (dma.Config.Spin); negative parks at once, 0 is dma.DefaultSpin")
	fs.IntVar(&c.Ahead, "ahead", bridge.DefaultDepth, "NBD requests in flight in the bridge pipelined across commands (read-ahead, write-behind; bridge.Config.Depth), 1 to 16")
	fs.BoolVar(&c.Overlap, "overlap", false, "overlap the DMA engine's two sides on its worker goroutine even for a command with nothing else to overlap (bridge.Config.Overlap)")
	fs.BoolVar(&c.Pipelined, "pipelined", false, "run the workload on the bridge pipelined across commands (read-ahead, write-behind)")
	fs.BoolVar(&c.Table, "table", true, "measure every datapath variant and print the Table 4 comparison")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the data patterns and the random addresses")
	fs.BoolVar(&c.JSON, "json", false, "print the report as JSON")
	return f
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	f := newFlags(c)
	fs := f.fs
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "usage: nhd [flags]\n\nA software NHD: ATA devices over an NBD client, measured against the cascade model.\n\nflags:")
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return nil, err
		}
		return nil, usagef("%v", err)
	}
	if fs.NArg() > 0 {
		return nil, usagef("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := f.sizes(c, set); err != nil {
		return nil, err
	}
	return c, c.check(set)
}

// sizes parses the flags that take a size.
func (f *flags) sizes(c *config, set map[string]bool) error {
	var err error
	if f.bytes != "" {
		if set["duration"] {
			return usagef("-bytes and -duration both set; use one")
		}
		if c.Bytes, err = parseSize(f.bytes); err != nil {
			return usagef("-bytes %q: %v", f.bytes, err)
		}
	}
	if c.Size, err = parseSize(f.size); err != nil {
		return usagef("-size %q: %v", f.size, err)
	}
	if c.Span, err = parseSize(f.span); err != nil {
		return usagef("-span %q: %v", f.span, err)
	}
	chunk, err := parseSize(f.chunk)
	if err != nil || chunk%512 != 0 || chunk > 32<<20 {
		return usagef("-chunk %q: want a multiple of 512 up to 32m", f.chunk)
	}
	c.Chunk = int(chunk)
	return nil
}

// check checks the values of the flags.
func (c *config) check(set map[string]bool) error {
	var err error
	if c.phases, err = parseWorkload(c.Workload); err != nil {
		return usagef("-workload: %v", err)
	}
	switch {
	case c.Bytes == 0 && c.Duration <= 0:
		return usagef("-duration must be positive, got %v", c.Duration)
	case c.Depth < 1 || c.Depth > 256:
		return usagef("-depth must be 1..256, got %d", c.Depth)
	case c.Size%512 != 0:
		return usagef("-size must be a multiple of 512, got %d", c.Size)
	case c.Ahead < 1 || c.Ahead > bridge.MaxInFlight:
		return usagef("-ahead must be 1 to %d, got %d", bridge.MaxInFlight, c.Ahead)
	case c.Spin > time.Second:
		return usagef("-spin must be at most 1s, got %v", c.Spin)
	case c.URI != "" && set["size"]:
		return usagef("-size is for the in-process server; -uri names another")
	case c.URI == "" && set["span"] && c.Span > c.Size:
		return usagef("-span %d is larger than the disk (-size %d)", c.Span, c.Size)
	}
	c.spanSet = set["span"]
	if bs := int64(c.phases[0].BlockSize); min(c.Span, c.Size)/bs < int64(c.Depth) {
		return usagef("-span %d holds fewer than -depth %d blocks of %d bytes", min(c.Span, c.Size), c.Depth, bs)
	}
	if c.URI != "" {
		if _, err := nbd.ParseURI(c.URI); err != nil {
			return usagef("-uri: %v", err)
		}
	}
	return nil
}

// bridgeConfig is the bridges' configuration over backend be, with
// sectors sectors and commands of up to bs bytes, tuned by the flags.
func (c *config) bridgeConfig(be ata.Backend, sectors uint64, bs int) bridge.Config {
	return bridge.Config{
		Backend: be, MaxCommand: bs, Sectors: sectors,
		Info:  ata.DeviceInfo{Model: "nhd software NHD", Serial: "NHD0001", Firmware: "1.0"},
		Chunk: c.Chunk, Depth: c.Ahead, Spin: c.Spin, Overlap: c.Overlap,
	}
}

// newBridge assembles the bridge of variant v over backend be, with
// sectors sectors and commands of up to bs bytes, tuned by the flags.
func (c *config) newBridge(v bridge.Variant, be ata.Backend, sectors uint64, bs int) (*bridge.Bridge, error) {
	bc := c.bridgeConfig(be, sectors, bs)
	bc.Datapath = v.Datapath
	return bridge.New(bc)
}

// run is the whole program: it parses args, runs the bridge and writes the
// report to stdout; progress goes to stderr when stderr is a terminal.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	prog := newProgress(stderr)
	defer prog.done()
	rep, err := bridgeRun(ctx, c, prog)
	prog.done()
	if rep == nil || (err != nil && len(rep.Phases) == 0) {
		return err
	}
	// A run that failed or was interrupted still reports the phases it
	// finished, then the error.
	var werr error
	if c.JSON {
		werr = writeJSON(stdout, rep)
	} else {
		var b strings.Builder
		rep.writeText(&b)
		_, werr = io.WriteString(stdout, b.String())
	}
	if err != nil {
		return err
	}
	return werr
}
