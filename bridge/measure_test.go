package bridge

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nhdkit/nhd/model"
	"github.com/nhdkit/nhd/nbd"
)

// countingHost is a Verifier that counts the reads it checked.
type countingHost struct {
	*Verifier
	checked int
}

func (h *countingHost) Check(p []byte, off int64) error {
	h.checked++
	return h.Verifier.Check(p, off)
}

const measureSpan = 4 << 20

// TestMeasure runs one turn of every node in each direction over an
// in-process NBD server and checks the table's structure and its
// invariants (not its speeds): every row of every direction, each node
// measured, the model's formula applied to the two nodes, the error and
// the speed-ups from the rates, every command checked, and the span left
// holding what the host wrote.
func TestMeasure(t *testing.T) {
	client := serve(t, nbd.NewMemDisk(16<<20))
	var hosts []*countingHost
	m, err := Measure(context.Background(), MeasureConfig{
		Bridge: Config{Backend: client}, Span: measureSpan, Commands: 1,
		Host: func(size int64) Host {
			h := &countingHost{Verifier: NewVerifier(size, DefaultMaxCommand, 7)}
			hosts = append(hosts, h)
			return h
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if m.BlockSize != DefaultMaxCommand || m.Chunk != DefaultChunk || m.Ahead != DefaultDepth || m.Commands != blockOps-warmOps {
		t.Errorf("block %d, chunk %d, ahead %d, commands %d", m.BlockSize, m.Chunk, m.Ahead, m.Commands)
	}
	vs := Table4()
	if len(m.Rows) != 2*len(vs) {
		t.Fatalf("%d rows, want %d", len(m.Rows), 2*len(vs))
	}
	for i, rw := range m.Rows {
		dir := []string{"read", "write"}[i/len(vs)]
		checkRow(t, rw, vs[i%len(vs)], dir, m)
	}
	for _, dir := range []string{"read", "write"} {
		if m.Bare[dir] <= 0 || m.BareAhead[dir] <= 0 {
			t.Errorf("%s: bare %v, at depth %v", dir, m.Bare[dir], m.BareAhead[dir])
		}
		// A fit may be refused as non-physical on a noisy machine; one
		// that is kept must be physical.
		if c, ok := m.Request[dir]; ok {
			if err := c.Check(); err != nil {
				t.Errorf("%s: fitted request cost %+v: %v", dir, c, err)
			}
		}
	}
	checkSpeedUps(t, m.Rows[:len(vs)])
	if len(hosts) != 2 || hosts[0].checked == 0 || hosts[1].checked == 0 {
		t.Fatalf("hosts %d, checks %+v", len(hosts), hosts)
	}
	// The span holds what the host last wrote, flushed.
	buf := make([]byte, DefaultMaxCommand)
	for off := int64(0); off < measureSpan; off += int64(len(buf)) {
		if _, err := readFull(client, buf, off); err != nil {
			t.Fatal(err)
		}
		if err := hosts[0].Verifier.Check(buf, off); err != nil {
			t.Fatalf("after Measure: %v", err)
		}
	}
}

// TestMeasureOneChunkCommands measures commands no larger than a chunk:
// the row pipelined in chunks makes one request per command, and its back
// end is the bare backend's one request at a time.
func TestMeasureOneChunkCommands(t *testing.T) {
	client := serve(t, nbd.NewMemDisk(16<<20))
	m, err := Measure(context.Background(), MeasureConfig{
		Bridge: Config{Backend: client, MaxCommand: 4096}, Span: measureSpan, Commands: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if m.BlockSize != 4096 || m.Chunk != 4096 {
		t.Fatalf("block %d, chunk %d; want 4096, 4096", m.BlockSize, m.Chunk)
	}
	vs := Table4()
	for i, rw := range m.Rows {
		checkRow(t, rw, vs[i%len(vs)], []string{"read", "write"}[i/len(vs)], m)
	}
	if len(m.Request) != 0 {
		t.Errorf("a request cost fitted from one size: %+v", m.Request)
	}
}

// checkRow checks one row against the formulas Measure documents.
func checkRow(t *testing.T, rw Row, v Variant, dir string, m *Measurement) {
	t.Helper()
	if rw.Variant != v || rw.Dir != dir {
		t.Errorf("row %s %s, want %s %s", rw.Dir, rw.Variant.Name, dir, v.Name)
	}
	if rw.Front <= 0 || rw.Back <= 0 || rw.Measured <= 0 || rw.Verified != blockOps ||
		math.IsInf(float64(rw.Front), 0) || math.IsInf(float64(rw.Back), 0) || math.IsInf(float64(rw.Measured), 0) {
		t.Errorf("%s %s: %+v", dir, v.Name, rw)
	}
	// Each turn's time without the host's calls is at most its time with
	// them, and so is their median.
	if rw.Bridge < rw.Measured || math.IsInf(float64(rw.Bridge), 0) {
		t.Errorf("%s %s: without the host %v, with it %v", dir, v.Name, rw.Bridge, rw.Measured)
	}
	k := int64(m.BlockSize)
	nodes := model.Cascade{model.RateNode("front end", rw.Front), model.RateNode("back end", rw.Back)}
	kind, want := "series", nodes.Series(k)
	switch v.Pipelining {
	case InChunks:
		kind, want = "fill", nodes.PipelinedFill(k, int64(m.Chunk))
		if m.Chunk == m.BlockSize && rw.Back != m.Bare[dir] {
			t.Errorf("%s %s: back end %v, want the bare backend's %v (a command is one chunk)", dir, v.Name, rw.Back, m.Bare[dir])
		}
	case AcrossCommands:
		if rw.Bound != nodes.Pipelined(k) || rw.Back != m.BareAhead[dir] {
			t.Errorf("%s %s: bound %v, back %v; want %v, %v", dir, v.Name, rw.Bound, rw.Back, nodes.Pipelined(k), m.BareAhead[dir])
		}
	}
	if v.Pipelining == Series && rw.Back != m.Bare[dir] {
		t.Errorf("%s %s: back end %v, want the bare backend's %v", dir, v.Name, rw.Back, m.Bare[dir])
	}
	if rw.ModelKind != kind || rw.Model != want {
		t.Errorf("%s %s: model %s %v, want %s %v", dir, v.Name, rw.ModelKind, rw.Model, kind, want)
	}
	if e := float64(rw.Model-rw.Measured) / float64(rw.Measured); math.Abs(e-rw.Error) > 1e-12 {
		t.Errorf("%s %s: error %v, want %v", dir, v.Name, rw.Error, e)
	}
}

// checkSpeedUps checks one direction's speed-ups: over the row before,
// the pipelined rows over the last series row.
func checkSpeedUps(t *testing.T, rows []Row) {
	t.Helper()
	var prev model.Rate
	for i, rw := range rows {
		want := 1.0
		if i > 0 {
			want = float64(rw.Measured / prev)
		}
		if math.Abs(rw.SpeedUp-want) > 1e-9 {
			t.Errorf("%s: speed-up %v, want %v", rw.Variant.Name, rw.SpeedUp, want)
		}
		if rw.Variant.Pipelining == Series {
			prev = rw.Measured
		}
	}
}

// TestMeasureCatchesCorruption checks that the host's checks are made: a
// byte changed under the bridges fails the measurement.
func TestMeasureCatchesCorruption(t *testing.T) {
	client := serve(t, nbd.NewMemDisk(16<<20))
	c := MeasureConfig{Bridge: Config{Backend: client}, Span: measureSpan, Commands: 1,
		Host: func(size int64) Host { return &flipHost{Verifier: NewVerifier(size, DefaultMaxCommand, 1)} }}
	_, err := Measure(context.Background(), c)
	if err == nil || !strings.Contains(err.Error(), "byte") {
		t.Fatalf("Measure over data the host sees changed: %v, want a check's error", err)
	}
}

// flipHost is a Verifier that sees every read's data with a byte changed.
type flipHost struct{ *Verifier }

func (h *flipHost) Check(p []byte, off int64) error {
	p[100] ^= 1
	defer func() { p[100] ^= 1 }()
	return h.Verifier.Check(p, off)
}

func TestMeasureConfig(t *testing.T) {
	ctx := context.Background()
	if _, err := Measure(ctx, MeasureConfig{Bridge: Config{Backend: nbd.NewMemDisk(16 << 20)}}); !errors.Is(err, ErrConfig) {
		t.Errorf("a backend without async methods: %v, want ErrConfig", err)
	}
	client := serve(t, nbd.NewMemDisk(16<<20))
	if _, err := Measure(ctx, MeasureConfig{Bridge: Config{Backend: client}, Span: 8 * DefaultMaxCommand}); !errors.Is(err, ErrConfig) {
		t.Errorf("a span of 8 commands: %v, want ErrConfig", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Measure(cctx, MeasureConfig{Bridge: Config{Backend: client}, Span: measureSpan}); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled context: %v", err)
	}
}

func TestMeasurementWriteText(t *testing.T) {
	m := &Measurement{BlockSize: 64 << 10, Chunk: 32 << 10, Commands: 20, Ahead: 3,
		Bare: map[string]model.Rate{"read": 2 << 30}, BareAhead: map[string]model.Rate{"read": 3 << 30},
		Request: map[string]model.Cost{"read": {Fixed: 5 * time.Microsecond}}}
	mi := model.Rate(1 << 20)
	for i, v := range Table4() {
		rw := Row{Variant: v, Dir: "read", Front: 10000 * mi, Back: 2048 * mi, Measured: model.Rate(1000+100*i) * mi,
			Bridge: model.Rate(1200+100*i) * mi}
		rw.model(64<<10, 32<<10)
		rw.SpeedUp = 1.5
		m.Rows = append(m.Rows, rw)
	}
	var b strings.Builder
	if err := m.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"Table 4 on this machine: 64 KiB sequential READ/WRITE DMA EXT, MB/s = 2^20 B/s, medians of 20 commands each\n",
		"read            store-and-forward    10000.0    2048.0  1699.9  series    1000.0  +70.0%          \n",
		"+ pipelined in chunks    10000.0    2048.0  1857.8    fill    1400.0  +32.7%     x1.50\n",
		"+ pipelined across commands    10000.0    2048.0  1699.9  series    1500.0  +13.3%     x1.50\n",
		"read: before -> after (series) x1.30; pipelined vs series x1.08 in chunks, x1.15 across commands; without the host's work, the fastest (pipelined across commands) reaches 83% of the bare NBD client's 2048.0 MB/s one request at a time; across commands, 55% of its 3072.0 MB/s with 3 in flight (the slower end alone, with a processor for each end, would give 2048.0)\n",
		"read: pipelining in 32 KiB chunks makes 2 NBD requests of one, in flight together: each more costs 5.0 us (fitted), to hide at most 3.1 us of front end\n",
		"model error: worst 70.0% over 6 rows\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	// A direction whose request cost could not be fitted says so.
	delete(m.Request, "read")
	b.Reset()
	if err := m.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if want := "read: pipelining in 32 KiB chunks makes 2 NBD requests of one, in flight together: their cost per request was not fitted (the chunks came out cheaper per byte than whole commands: a noisy run)\n"; !strings.Contains(b.String(), want) {
		t.Errorf("the table lacks %q:\n%s", want, b.String())
	}
}

// sleepyHost is a Verifier whose Fill and Check take d each.
type sleepyHost struct {
	*Verifier
	d time.Duration
}

func (h *sleepyHost) Fill(p []byte, off int64) {
	time.Sleep(h.d)
	h.Verifier.Fill(p, off)
}

func (h *sleepyHost) Check(p []byte, off int64) error {
	time.Sleep(h.d)
	return h.Verifier.Check(p, off)
}

// The bare backend's figures leave the host's work out, with requests in
// flight as one at a time, and so does each row's Bridge: with a host that
// takes 4 ms to fill or check a block, a figure that counted it could not
// pass 16 MB/s (each row's Measured counts it).
func TestMeasureBareLeavesHostOut(t *testing.T) {
	const d = 4 * time.Millisecond
	client := serve(t, nbd.NewMemDisk(16<<20))
	m, err := Measure(context.Background(), MeasureConfig{
		Bridge: Config{Backend: client}, Span: measureSpan, Commands: 1,
		Host: func(size int64) Host {
			return &sleepyHost{Verifier: NewVerifier(size, DefaultMaxCommand, 7), d: d}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	counted := model.RateOf(DefaultMaxCommand, d)
	for _, dir := range []string{"read", "write"} {
		if m.Bare[dir] < 4*counted || m.BareAhead[dir] < 4*counted {
			t.Errorf("%s: bare %v, with %d in flight %v: the host's %v per block counted (it alone allows %v)",
				dir, m.Bare[dir], m.Ahead, m.BareAhead[dir], d, counted)
		}
	}
	for _, rw := range m.Rows {
		// Twice what the host allows, not more: the slowest row, store
		// and forward, moves a block in about a millisecond under -race
		// on a loaded machine, which is 62 MB/s.
		if rw.Measured > counted || rw.Bridge < 2*counted {
			t.Errorf("%s %s: measured %v, without the host %v; want the host's %v per block in the first (it alone allows %v), not in the second",
				rw.Dir, rw.Variant.Name, rw.Measured, rw.Bridge, d, counted)
		}
	}
}
