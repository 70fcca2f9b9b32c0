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

	"github.com/nhdkit/nhd/bridge"
	"github.com/nhdkit/nhd/internal/size"
	"github.com/nhdkit/nhd/nbd"
)

// report is everything a run found.
type report struct {
	Config   *config             `json:"config"`
	Server   string              `json:"server"`
	DiskSize int64               `json:"disk_size"`
	Span     int64               `json:"span"`
	Machine  string              `json:"machine"`
	Bridge   bridge.Variant      `json:"bridge"`
	Phases   []phaseResult       `json:"phases"`
	Table    *bridge.Measurement `json:"table,omitempty"`
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

// bridgeFor is the bridge the workload runs on: DMA streaming, zero-copy
// and the checksum in flight, with the front and back ends in series, or
// pipelined across commands when asked.
func bridgeFor(pipelined bool) bridge.Variant {
	t := bridge.Table4()
	if pipelined {
		return t[5]
	}
	return t[3]
}

// bridgeRun sets up the server (unless -uri names one), the client and the
// bridges, fills the span, runs the workload's phases and measures Table 4.
func bridgeRun(ctx context.Context, c *config, prog *progress) (rep *report, err error) {
	rep = &report{Config: c, Bridge: bridgeFor(c.Pipelined), Machine: fmt.Sprintf("%s/%s, %d CPUs, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())}
	uri := c.URI
	rep.Server = uri
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
	}
	prog.set("connecting to %s", uri)
	client, err := connect(ctx, uri)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	rep.DiskSize = client.Size()
	if c.spanSet && c.Span > rep.DiskSize {
		return nil, fmt.Errorf("-span %d is larger than the disk (%d bytes)", c.Span, rep.DiskSize)
	}
	bs := c.phases[0].BlockSize
	rep.Span = min(c.Span, rep.DiskSize) / int64(bs) * int64(bs)
	if rep.Span/int64(bs) < int64(c.Depth) {
		return nil, fmt.Errorf("the disk (%d bytes) holds fewer %d-byte blocks than -depth %d", rep.DiskSize, bs, c.Depth)
	}
	remote := newDisk(rep.Span, bs, c.Seed)
	if err := runWorkload(ctx, c, rep, client, remote, prog); err != nil || !c.Table {
		return rep, err
	}
	rep.Table, err = runTable(ctx, c, client, rep, prog)
	return rep, err
}

// connect dials the NBD server at uri and checks that it takes writes.
func connect(ctx context.Context, uri string) (*nbd.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	client, err := nbd.Dial(dctx, uri)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("cannot connect to NBD server %s: %w", uri, err)
	}
	if client.Flags()&nbd.ExportReadOnly != 0 {
		client.Close()
		return nil, fmt.Errorf("NBD export %s is read-only; the workload writes", uri)
	}
	return client, nil
}

// runWorkload runs the workload's phases on c.Depth lanes, each with a
// bridge of its own over client, after writing every block of the span
// once, so that every read has known data to verify.
func runWorkload(ctx context.Context, c *config, rep *report, client *nbd.Client, remote *disk, prog *progress) error {
	bs := remote.bs
	lanes := make([]*lane, c.Depth)
	for i := range lanes {
		b, err := c.newBridge(rep.Bridge, client, uint64(rep.DiskSize/512), bs)
		if err != nil {
			return err
		}
		defer b.Close()
		lanes[i] = newLane(b, remote, i, c.Depth, c.Seed+uint64(i)*1000003)
	}
	prog.set("writing the %s span", size.Text(rep.Span))
	phases := append([]Workload{{Name: "fill", BlockSize: bs}}, c.phases...)
	for i, w := range phases {
		if i > 0 {
			prog.set("workload %s", w.Name)
		}
		b := budget{ops: (c.Bytes + int64(bs) - 1) / int64(bs)}
		switch {
		case i == 0:
			b = budget{ops: rep.Span / int64(bs)}
		case c.Bytes == 0:
			b = budget{deadline: time.Now().Add(c.Duration)}
		}
		res, err := runPhase(ctx, lanes, w, b)
		if err != nil {
			return err
		}
		rep.Phases = append(rep.Phases, res)
	}
	for _, l := range lanes {
		if err := l.br.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// runTable measures Table 4 over the span: each direction for 4 times
// -duration, or at least a quarter of -bytes' commands.
func runTable(ctx context.Context, c *config, client *nbd.Client, rep *report, prog *progress) (*bridge.Measurement, error) {
	prog.set("Table 4")
	bs := c.phases[0].BlockSize
	m := bridge.MeasureConfig{Bridge: c.bridgeConfig(client, uint64(rep.DiskSize/512), bs), Span: rep.Span, Duration: 4 * c.Duration,
		Host: func(size int64) bridge.Host { return bridge.NewVerifier(size, bs, c.Seed) }}
	if c.Bytes > 0 {
		m.Duration, m.Commands = 0, int(max(1, c.Bytes/int64(bs)/4))
	}
	return bridge.Measure(ctx, m)
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
		st, err := f.Stat()
		p.on = err == nil && st.Mode()&os.ModeCharDevice != 0
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
