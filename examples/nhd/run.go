package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/nhdkit/nhd/nbd"
)

// report is everything a run found.
type report struct {
	Config   *config       `json:"config"`
	Server   string        `json:"server"`
	DiskSize int64         `json:"disk_size"`
	Span     int64         `json:"span"`
	Machine  string        `json:"machine"`
	Bridge   variant       `json:"bridge"`
	Phases   []phaseResult `json:"phases"`
	Table    *table        `json:"table,omitempty"`
}

// startServer serves a sparse memory disk of size bytes on a unix socket in
// a new temporary directory and returns its URI and a function that stops
// it and removes the directory.
func startServer(size int64) (string, func() error, error) {
	dir, err := os.MkdirTemp("", "nhd")
	if err != nil {
		return "", nil, err
	}
	path := filepath.Join(dir, "nbd.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	srv := &nbd.Server{Exports: []nbd.Export{{Name: "nhd", Backend: nbd.NewMemDisk(size), Description: "nhd in-process memory disk"}}}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	stop := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := srv.Shutdown(ctx)
		if serr := <-done; serr != nil && !errors.Is(serr, nbd.ErrServerClosed) && err == nil {
			err = serr
		}
		os.RemoveAll(dir)
		return err
	}
	return "nbd+unix:///nhd?socket=" + url.QueryEscape(path), stop, nil
}

// bridgeRun sets up the server (unless -uri names one), the client and the
// drives, fills the span, runs the workload's phases and measures Table 4.
func bridgeRun(ctx context.Context, c *config, prog *progress) (rep *report, err error) {
	rep = &report{Config: c, Bridge: bridgeFor(c.Pipelined), Machine: fmt.Sprintf("%s/%s, %d CPUs, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())}
	uri := c.URI
	if uri == "" {
		var stop func() error
		if uri, stop, err = startServer(c.Size); err != nil {
			return nil, fmt.Errorf("starting the in-process NBD server: %w", err)
		}
		defer func() {
			if serr := stop(); serr != nil && err == nil {
				err = fmt.Errorf("stopping the in-process NBD server: %w", serr)
			}
		}()
		rep.Server = "in-process NBD server, sparse memory disk on a unix socket"
	} else {
		rep.Server = uri
	}
	prog.set("connecting to %s", uri)
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	client, err := nbd.Dial(dctx, uri)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("cannot connect to NBD server %s: %w", uri, err)
	}
	defer client.Close()
	if client.Flags()&nbd.ExportReadOnly != 0 {
		return nil, fmt.Errorf("NBD export %s is read-only; the workload writes", uri)
	}
	rep.DiskSize = client.Size()
	bs := c.phases[0].BlockSize
	span := min(c.Span, rep.DiskSize) / int64(bs) * int64(bs)
	if span/int64(bs) < int64(c.Depth) {
		return nil, fmt.Errorf("the disk (%d bytes) holds fewer %d-byte blocks than -depth %d", rep.DiskSize, bs, c.Depth)
	}
	rep.Span = span
	sectors := uint64(rep.DiskSize / 512)

	remote := newDisk(span, bs, c.Seed)
	lanes := make([]*lane, c.Depth)
	for i := range lanes {
		d, err := newDrive(bridgeFor(c.Pipelined), client, sectors, bs, c.tuning())
		if err != nil {
			return nil, err
		}
		defer d.Close()
		lanes[i] = newLane(d, remote, i, c.Depth, c.Seed+uint64(i)*1000003)
	}

	// Every block of the span is written once before the workload, so that
	// every read has known data to verify.
	prog.set("writing the %s span", sizeText(span))
	fill, err := runPhase(ctx, lanes, Workload{Name: "fill", BlockSize: bs}, budget{ops: span / int64(bs)})
	if err != nil {
		return rep, err
	}
	rep.Phases = append(rep.Phases, fill)
	for _, w := range c.phases {
		prog.set("workload %s", w.Name)
		b := budget{ops: (c.Bytes + int64(bs) - 1) / int64(bs)}
		if c.Bytes == 0 {
			b = budget{deadline: time.Now().Add(c.Duration)}
		}
		res, err := runPhase(ctx, lanes, w, b)
		if err != nil {
			return rep, err
		}
		rep.Phases = append(rep.Phases, res)
	}
	for _, l := range lanes {
		if err := l.d.flush(); err != nil {
			return rep, err
		}
	}

	if c.Table {
		bn, err := newBench(ctx, client, remote, bs, c.tuning(), c.Seed, sectors)
		if err != nil {
			return rep, err
		}
		defer bn.Close()
		per, minOps := 4*c.Duration, 0
		if c.Bytes > 0 {
			per, minOps = 0, int(max(1, c.Bytes/int64(bs)/4))
		}
		if rep.Table, err = bn.measure(ctx, per, minOps, prog); err != nil {
			return rep, err
		}
		for _, l := range bn.e2e {
			if err := l.d.flush(); err != nil {
				return rep, err
			}
		}
	}
	return rep, nil
}

func writeJSON(w io.Writer, rep *report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// progress is a one-line status on stderr, shown only when stderr is a
// terminal.
type progress struct {
	mu  sync.Mutex
	w   io.Writer
	on  bool
	len int
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		p.on = isTerminal(int(f.Fd()))
	}
	return p
}

func (p *progress) set(format string, args ...any) {
	if p == nil || !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := fmt.Sprintf(format, args...)
	pad := max(0, p.len-len(s))
	fmt.Fprintf(p.w, "\rnhd: %s%*s", s, pad, "")
	p.len = len(s)
}

func (p *progress) done() {
	if p == nil || !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.len > 0 {
		fmt.Fprintf(p.w, "\r%*s\r", p.len+5, "")
		p.len = 0
	}
}
