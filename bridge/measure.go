package bridge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/dma"
	"github.com/nhdkit/nhd/model"
	"github.com/nhdkit/nhd/nbd"
)

// MeasureConfig is what Measure measures.
type MeasureConfig struct {
	// Bridge is every row's bridge but its Datapath. Its Backend is the
	// remote disk, which must keep requests in flight (dma.AsyncReaderAt
	// and dma.AsyncWriterAt, as *nbd.Client does); its MaxCommand (0:
	// DefaultMaxCommand) is the size of every command, its Chunk and
	// Depth those of the pipelined rows.
	Bridge Config
	// Variants are the rows; nil means Table4().
	Variants []Variant
	// Span is the bytes of the backend read and written, from offset 0;
	// 0 means all of it (ata.Sizer). Measure writes all of it first.
	Span int64
	// Duration is how long each direction is measured at least, and
	// Commands how many commands each node of each row makes at least in
	// each direction; with neither, each makes one turn of 24.
	Duration time.Duration
	Commands int
	// Host makes the host of a disk of size bytes that it has not seen
	// yet: one for the backend's span, one for the front end's memory
	// disk. Nil means NewVerifier(size, command size, 1).
	Host func(size int64) Host
}

// Measurement is a Table 4: every row's datapath in each direction, its
// two nodes measured apart, the cascade model's prediction from them and
// the bridge measured whole.
type Measurement struct {
	BlockSize int   `json:"block_size"`
	Chunk     int   `json:"chunk"`
	Commands  int   `json:"commands"` // commands per node and row, per direction, in the medians
	Rows      []Row `json:"rows"`     // the read rows, then the write rows
	// Bare is the bare backend's rate per direction ("read", "write"),
	// one request per command.
	Bare map[string]model.Rate `json:"bare_nbd_Bps"`
	// Ahead is the requests the rows pipelined across commands keep in
	// flight, and BareAhead the bare backend's rate per direction with as
	// many in flight: those rows' back end.
	Ahead     int                   `json:"ahead"`
	BareAhead map[string]model.Rate `json:"bare_nbd_ahead_Bps"`
	// Request is the backend's cost per request, fitted (model.FitCost)
	// to the bare backend's times for whole commands and for chunks (those
	// of a command in flight together, as the bridge makes them), per
	// direction: what pipelining in chunks pays once per extra request.
	// It is absent when Chunk is the command size, and for a direction
	// whose fit is not physical (model.ErrNonPhysical: on a noisy machine
	// the chunks can come out cheaper per byte than whole commands).
	Request map[string]model.Cost `json:"nbd_request_cost"`
}

// Row is one datapath in one direction.
type Row struct {
	Variant Variant `json:"variant"`
	Dir     string  `json:"direction"` // "read" or "write"
	// Front is the front end: host, ATA device and DMA engine over an
	// in-cache memory disk, the disk's own calls taken out.
	Front model.Rate `json:"front_Bps"`
	// Back is the back end: the bare backend making the requests this
	// row's bridge makes (whole commands, chunks in flight together, or
	// Ahead requests in flight).
	Back model.Rate `json:"back_Bps"`
	// Model is the cascade model from Front and Back, of ModelKind
	// "series" (model.Cascade.Series) or "fill" (PipelinedFill at the
	// chunk size, the row pipelined in chunks).
	Model     model.Rate `json:"model_Bps"`
	ModelKind string     `json:"model"`
	// Bound is, for the row pipelined across commands, the rate of the
	// slower end alone (Cascade.Pipelined): what the overlap would reach
	// with a processor for each end.
	Bound    model.Rate `json:"bound_Bps,omitempty"`
	Measured model.Rate `json:"measured_Bps"` // the bridge end to end
	Error    float64    `json:"model_error"`  // (Model-Measured)/Measured
	// Bridge is the bridge end to end with the time of the host's own
	// calls (Fill, Sum, Check) left out, as the bare backend's figures
	// leave them out: what the bridge alone makes of its backend.
	Bridge model.Rate `json:"bridge_Bps"`
	// SpeedUp is Measured over the row before's (1 for the first); a
	// pipelined row's over the last series row's.
	SpeedUp  float64 `json:"speed_up"`
	Verified int64   `json:"verified"` // commands the host checked end to end
}

// How the nodes take turns: blockOps commands in a row for each, the
// first warmOps of them not kept. Those pay for the switch from the
// block before (a DMA worker still spinning or just parked, caches
// holding other data), which the steady state the model describes does
// not.
const (
	blockOps = 24
	warmOps  = 4
)

// Measure measures every row's datapath against the cascade model, as
// the paper's Table 4 does: the front end (the row's bridge over an
// in-cache memory disk whose calls are timed and taken out: in the bridge
// the backend does that part, and the back end measures it), the back end
// (the bare backend making the row's requests), and the row's bridge
// over the backend end to end.
//
// The nodes and the bridges are measured interleaved, blockOps commands
// at a time (every row's front end and bridge, then the bare backend in
// whole commands, in chunks and with Depth requests in flight), so that
// whatever else the machine does falls on all of them alike. Each turn
// gives a mean time per command (a pipelined bridge's commands alternate
// between finding their data fetched and waiting for it, so only a mean
// over several is its rate), and each figure is the median of its turns.
// Every bridge and the bare backend read and write their own part of the
// span, each sequentially, so none reads what another has just brought
// into the processor's cache.
//
// Measure makes every command and request from the calling goroutine, one
// node at a time; nothing else should use the backend meanwhile, or it is
// measured too. It writes the span first and leaves its data written,
// flushes the backend at the end, and does not close it. An error of a
// command or a check ends the measurement, naming the row and the offset.
func Measure(ctx context.Context, c MeasureConfig) (*Measurement, error) {
	m, err := newMeasurer(ctx, c)
	if err != nil {
		return nil, err
	}
	defer m.close()
	t := &Measurement{BlockSize: m.bs, Chunk: m.chunk, Ahead: m.depth,
		Bare: map[string]model.Rate{}, BareAhead: map[string]model.Rate{}, Request: map[string]model.Cost{}}
	for _, write := range []bool{false, true} {
		s := m.startDir(write)
		deadline := time.Now().Add(c.Duration)
		for n := 0; n == 0 || n < c.Commands || time.Now().Before(deadline); n += blockOps {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if err := m.round(ctx, s); err != nil {
				return nil, err
			}
		}
		t.Commands = len(s.back) * (blockOps - warmOps)
		m.rows(t, s)
	}
	for _, d := range m.e2e {
		if err := d.b.Flush(); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// measurer is the state of a measurement: for every row a bridge over the
// backend and one over a local memory disk (its front end alone), each
// with its driver, and the bare backend (the back end alone).
type measurer struct {
	bs, chunk, depth int
	overlap          bool
	variants         []Variant
	remote           asyncBackend
	rhost            Host
	nblk             uint64 // blocks of the span
	e2e, front       []*driver
	timed            []*timedBackend // the memory disk under each front end
	buf              []byte
	bufs             [][]byte     // one per request in flight, for the bare backend at depth
	calls            []dma.Handle // the bare backend's requests in flight, oldest first
}

func newMeasurer(ctx context.Context, c MeasureConfig) (*measurer, error) {
	bc, err := c.Bridge.withDefaults()
	if err != nil {
		return nil, err
	}
	remote, ok := bc.Backend.(asyncBackend)
	if !ok {
		return nil, errors.Join(ErrConfig, errors.New("bridge: Measure needs a backend with StartReadAt, StartWriteAt and Wait"))
	}
	span := c.Span
	if s, ok := bc.Backend.(ata.Sizer); ok && (span == 0 || span > s.Size()) {
		span = s.Size()
	}
	bs := bc.MaxCommand
	m := &measurer{bs: bs, chunk: min(bc.Chunk, bs), depth: bc.Depth, overlap: bc.Overlap, variants: c.Variants,
		remote: remote, nblk: uint64(span / int64(bs)), buf: make([]byte, bs), calls: make([]dma.Handle, 0, MaxInFlight)}
	if m.variants == nil {
		m.variants = Table4()
	}
	if m.nblk <= uint64(max(m.depth, len(m.variants)+3)) {
		return nil, errors.Join(ErrConfig, fmt.Errorf("bridge: Measure needs more than %d commands' span, has %d", max(m.depth, len(m.variants)+3), m.nblk))
	}
	for range m.depth {
		m.bufs = append(m.bufs, make([]byte, bs))
	}
	newHost := c.Host
	if newHost == nil {
		newHost = func(size int64) Host { return NewVerifier(size, bs, 1) }
	}
	span = int64(m.nblk) * int64(bs)
	// The front end's memory disk is small enough to stay in the cache.
	local := min(span, max(2<<20, 4*int64(bs))) / int64(bs) * int64(bs)
	m.rhost = newHost(span)
	if err := m.bridges(bc, local, newHost(local)); err != nil {
		m.close()
		return nil, err
	}
	// Write both disks through the last row's bridges, so that every read
	// has known data.
	err = m.fill(ctx, m.front[len(m.front)-1], local)
	if err == nil {
		err = m.fill(ctx, m.e2e[len(m.e2e)-1], span)
	}
	if err != nil {
		m.close()
		return nil, err
	}
	return m, nil
}

// bridges assembles every row's two bridges.
func (m *measurer) bridges(bc Config, local int64, lhost Host) error {
	mem := nbd.NewMemDisk(local)
	for _, v := range m.variants {
		c := bc
		c.Datapath = v.Datapath
		e2e, err := New(c)
		if err != nil {
			return err
		}
		m.e2e = append(m.e2e, newDriver(e2e, m.rhost, m.bs, m.nblk))
		tb := &timedBackend{Backend: mem}
		c.Backend, c.Sectors = tb, uint64(local/512)
		front, err := New(c)
		if err != nil {
			return err
		}
		m.timed = append(m.timed, tb)
		m.front = append(m.front, newDriver(front, lhost, m.bs, uint64(local/int64(m.bs))))
	}
	return nil
}

// fill writes size bytes from 0 through d's bridge and flushes it.
func (m *measurer) fill(ctx context.Context, d *driver, size int64) error {
	d.write, d.next = true, 0
	for range size / int64(m.bs) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := d.step(); err != nil {
			return err
		}
	}
	return d.b.Flush()
}

func (m *measurer) close() {
	for _, d := range append(m.e2e, m.front...) {
		d.b.Close()
	}
}

// driver runs one bridge's commands as the host does: the next block of
// its sequence, its data filled or checked by the host, the bridge's
// checksum checked.
type driver struct {
	b           *Bridge
	h           Host
	buf         []byte
	bs          int64
	next, count uint64 // the next block, and the blocks of its disk
	write       bool
	verified    int64
	host        time.Duration // of the last step, in the host's Fill, Sum and Check
}

func newDriver(b *Bridge, h Host, bs int, count uint64) *driver {
	return &driver{b: b, h: h, buf: make([]byte, bs), bs: int64(bs), count: count}
}

// step runs one command and returns the time the host spent on it: filling
// its data, the command through the bridge, and checking it. d.host is
// then the part of it in the host's own calls (Fill, Sum and Check).
func (d *driver) step() (time.Duration, error) {
	t0 := time.Now()
	off := int64(d.next) * d.bs
	if d.next++; d.next == d.count {
		d.next = 0
	}
	var err error
	t1 := t0 // when the bridge's command starts
	if d.write {
		d.h.Fill(d.buf, off)
		t1 = time.Now()
		err = d.b.Write(d.buf, off)
	} else {
		err = d.b.Read(d.buf, off)
	}
	t2 := time.Now()
	if err == nil {
		if got, want := d.b.Sum(), d.h.Sum(d.buf, off); got != want {
			err = fmt.Errorf("bridge: checksum %#04x, the data's %#04x", got, want)
		} else if !d.write {
			err = d.h.Check(d.buf, off)
		}
	}
	if err != nil {
		return 0, fmt.Errorf("at byte %d: %w", off, err)
	}
	d.verified++
	t3 := time.Now()
	d.host = t1.Sub(t0) + t3.Sub(t2)
	return t3.Sub(t0), nil
}

// timedBackend is a backend that adds up the time its calls take, for a
// bridge whose backend calls do not overlap each other: what a command
// spends in its backend, the rest being the front end's.
type timedBackend struct {
	ata.Backend
	t time.Duration
}

func (b *timedBackend) ReadAt(p []byte, off int64) (int, error) {
	t0 := time.Now()
	n, err := b.Backend.ReadAt(p, off)
	b.t += time.Since(t0)
	return n, err
}

func (b *timedBackend) WriteAt(p []byte, off int64) (int, error) {
	t0 := time.Now()
	n, err := b.Backend.WriteAt(p, off)
	b.t += time.Since(t0)
	return n, err
}

// durs is a series of per-command times.
type durs []time.Duration

// median returns the middle time (the mean of the two middle ones).
func (d durs) median() time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
