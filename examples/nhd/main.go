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

	phases []Workload
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("nhd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c := &config{}
	var bytesFlag, sizeFlag, spanFlag, chunkFlag string
	fs.StringVar(&c.URI, "uri", "", "NBD server to use (nbd://host:port/export, nbd+unix:///export?socket=path); empty starts one in process. The workload OVERWRITES the export's first -span bytes")
	fs.StringVar(&c.Workload, "workload", "seq64k", "seq64k, rand4k, randrw70, or custom: bs=SIZE,read=PCT,rand|seq")
	fs.DurationVar(&c.Duration, "duration", time.Second, "how long each phase of the workload runs (Table 4 measures each direction for 4 times as long)")
	fs.StringVar(&bytesFlag, "bytes", "", "bytes each phase moves, instead of -duration (4m, 1g)")
	fs.IntVar(&c.Depth, "depth", 1, "commands in flight: ATA devices sharing the one NBD client")
	fs.StringVar(&sizeFlag, "size", "4g", "size of the in-process server's sparse memory disk")
	fs.StringVar(&spanFlag, "span", "128m", "bytes of the disk the workload touches (all written first, then verified on every read)")
	fs.StringVar(&chunkFlag, "chunk", "32k", "bytes per NBD request in Table 4's bridge pipelined in chunks")
	fs.DurationVar(&c.Spin, "spin", defaultSpin, "how long the DMA engine's sides spin for each other before they park (dma.Config.Spin); negative parks at once, 0 is dma.DefaultSpin")
	fs.IntVar(&c.Ahead, "ahead", defaultAhead, "NBD requests in flight in the bridge pipelined across commands (read-ahead, write-behind), 1 to 16")
	fs.BoolVar(&c.Overlap, "overlap", false, "overlap the DMA engine's two sides on its worker goroutine even for a command with nothing else to overlap (off: such a transfer runs inline, dma.Config.InlineMax)")
	fs.BoolVar(&c.Pipelined, "pipelined", false, "run the workload on the bridge pipelined across commands (read-ahead, write-behind)")
	fs.BoolVar(&c.Table, "table", true, "measure every datapath variant and print the Table 4 comparison")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the data patterns and the random addresses")
	fs.BoolVar(&c.JSON, "json", false, "print the report as JSON")
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
	var err error
	if c.phases, err = parseWorkload(c.Workload); err != nil {
		return nil, usagef("-workload: %v", err)
	}
	if bytesFlag != "" {
		if set["duration"] {
			return nil, usagef("-bytes and -duration both set; use one")
		}
		if c.Bytes, err = parseSize(bytesFlag); err != nil {
			return nil, usagef("-bytes %q: %v", bytesFlag, err)
		}
	} else if c.Duration <= 0 {
		return nil, usagef("-duration must be positive, got %v", c.Duration)
	}
	if c.Depth < 1 || c.Depth > 256 {
		return nil, usagef("-depth must be 1..256, got %d", c.Depth)
	}
	if c.Size, err = parseSize(sizeFlag); err != nil {
		return nil, usagef("-size %q: %v", sizeFlag, err)
	}
	if c.Size%512 != 0 {
		return nil, usagef("-size must be a multiple of 512, got %d", c.Size)
	}
	if c.Span, err = parseSize(spanFlag); err != nil {
		return nil, usagef("-span %q: %v", spanFlag, err)
	}
	chunk, err := parseSize(chunkFlag)
	if err != nil || chunk%512 != 0 || chunk > 32<<20 {
		return nil, usagef("-chunk %q: want a multiple of 512 up to 32m", chunkFlag)
	}
	c.Chunk = int(chunk)
	if c.Ahead < 1 || c.Ahead > maxAhead {
		return nil, usagef("-ahead must be 1 to %d, got %d", maxAhead, c.Ahead)
	}
	if c.Spin > time.Second {
		return nil, usagef("-spin must be at most 1s, got %v", c.Spin)
	}
	if c.URI != "" {
		if _, err := nbd.ParseURI(c.URI); err != nil {
			return nil, usagef("-uri: %v", err)
		}
	}
	if c.URI != "" && set["size"] {
		return nil, usagef("-size is for the in-process server; -uri names another")
	}
	return c, nil
}

// maxAhead bounds -ahead: the requests a drive keeps in flight must all be
// accepted by the server while their replies wait to be read (nbdkit runs
// 16 threads, this module's server serves 16 requests of a connection at
// once by default), or a request's write could wait on a server waiting
// for its replies to be read.
const maxAhead = 16

// tuning is the datapath tuning the flags ask for.
func (c *config) tuning() tuning {
	return tuning{Chunk: c.Chunk, Spin: c.Spin, Ahead: c.Ahead, Overlap: c.Overlap}
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
