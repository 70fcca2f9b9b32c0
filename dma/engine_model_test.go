package dma

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// engineModel is what an engine should have done: flat host memory, the
// device, the counters.
type engineModel struct {
	mode       Mode
	inlineMax  int64
	fifo       int      // FIFOBlocks
	chunk      int      // ChunkSectors, capped at fifo
	async      bool     // the device keeps requests in flight
	regions    [][]byte // the engine's host memory (the real slices)
	host       []byte   // what they should hold, concatenated
	device     []byte   // what the device should hold
	programmed bool
	closed     bool
	stats      Stats
}

type engineMachine struct {
	e      *Engine
	dev    *memDev
	tapped []byte
	tap    bool
	m      engineModel
}

const modelDevice = 40 * SectorSize

func newEngineMachine(t *rapid.T) *engineMachine {
	tapKind := rapid.IntRange(0, 2).Draw(t, "tapKind") // none, TapFunc, CopyTap
	s := &engineMachine{tap: tapKind != 0}
	cfg := Config{
		Mode:         rapid.SampledFrom([]Mode{Streaming, StoreAndForward}).Draw(t, "mode"),
		FIFOBlocks:   rapid.IntRange(1, 12).Draw(t, "fifoBlocks"),
		ChunkSectors: rapid.IntRange(1, 12).Draw(t, "chunk"),
		Spin:         rapid.SampledFrom(spins).Draw(t, "spin"),
		InlineMax:    rapid.SampledFrom(inlineMaxes).Draw(t, "inlineMax"),
	}
	switch tapKind {
	case 1:
		cfg.Tap = TapFunc(func(p []byte) { s.tapped = append(s.tapped, p...) })
	case 2:
		cfg.Tap = &recordingCopyTap{seen: &s.tapped}
	}
	s.e = mustEngine(t, cfg)
	s.m.mode, s.m.inlineMax = cfg.Mode, cfg.InlineMax
	s.m.fifo, s.m.chunk = cfg.FIFOBlocks, min(cfg.ChunkSectors, cfg.FIFOBlocks)
	s.m.async = rapid.Bool().Draw(t, "async")
	s.m.device = pattern(modelDevice, 11)
	s.dev = newDev(append([]byte(nil), s.m.device...))
	return s
}

func (s *engineMachine) setRegions(t *rapid.T) {
	sizes := rapid.SliceOfN(rapid.IntRange(0, 3000), 1, 6).Draw(t, "sizes")
	s.m.regions = s.m.regions[:0]
	for i, n := range sizes {
		s.m.regions = append(s.m.regions, pattern(n, byte(i+20)))
	}
	s.m.host = concat(s.m.regions)
	s.m.programmed = true
	s.e.SetRegions(s.m.regions...)
}

// drawLength draws a transfer length, now and then an invalid one.
func drawLength(t *rapid.T) int64 {
	switch rapid.IntRange(0, 9).Draw(t, "lengthKind") {
	case 0:
		return int64(rapid.IntRange(-SectorSize, 3*SectorSize).Draw(t, "anyLength"))
	default:
		return int64(rapid.IntRange(1, 16).Draw(t, "sectors")) * SectorSize
	}
}

// precheck returns the error a transfer of n bytes at off must fail with
// before it moves anything, or nil.
func (s *engineMachine) precheck(off, n int64) error {
	switch {
	case s.m.closed:
		return ErrClosed
	case n <= 0 || n%SectorSize != 0 || off < 0:
		return ErrLength
	case !s.m.programmed || len(s.m.regions) == 0:
		return ErrNoMemory
	case int64(len(s.m.host)) < n:
		return ErrShortMemory
	}
	return nil
}

func (s *engineMachine) transfer(t *rapid.T, read bool) {
	n := drawLength(t)
	off := int64(rapid.IntRange(0, modelDevice/SectorSize).Draw(t, "offSector"))*SectorSize +
		int64(rapid.SampledFrom([]int{0, 0, 0, 1, 100}).Draw(t, "offBytes"))
	if !read {
		off = min(off, modelDevice-max(n, 0)) // writes stay inside the device
		off = max(off, 0)
	}
	// A backend failure at some byte of the transfer, now and then.
	fail := int64(-1)
	if n > 0 && rapid.IntRange(0, 3).Draw(t, "failKind") == 0 {
		fail = off + rapid.Int64Range(0, n-1).Draw(t, "failAt")
		if fail >= modelDevice {
			fail = -1 // a read past the device ends there anyway
		}
	}
	s.dev.failAt, s.dev.err = fail, errInjected
	s.tapped = s.tapped[:0]
	lastBefore := s.e.Last()

	var err error
	var dev interface {
		io.ReaderAt
		io.WriterAt
	} = s.dev
	var adev *asyncDev
	if s.m.async {
		adev = &asyncDev{memDev: s.dev}
		dev = adev
	}
	if read {
		err = s.e.DeviceToHost(dev, off, n)
	} else {
		err = s.e.HostToDevice(dev, off, n)
	}
	if adev != nil && (adev.inflight != 0 || adev.misuse != 0) {
		t.Fatalf("transfer(read=%v, %d, %d): %d requests left in flight, %d waits of a handle not in flight",
			read, off, n, adev.inflight, adev.misuse)
	}
	if want := s.precheck(off, n); want != nil {
		if !errors.Is(err, want) {
			t.Fatalf("transfer(read=%v, %d, %d) = %v, want %v", read, off, n, err, want)
		}
		if diff := cmp.Diff(lastBefore, s.e.Last(), cmp.Comparer(func(a, b error) bool { return a == b })); diff != "" {
			t.Fatalf("a refused transfer changed Last:\n%s", diff)
		}
		return
	}

	// How far the transfer gets: to the failure, or for a read to the end
	// of the device, in whole sectors.
	moved := n
	var wantErr error
	if fail >= 0 {
		moved, wantErr = (fail-off)/SectorSize*SectorSize, errInjected
	}
	if read && off+moved > modelDevice {
		moved, wantErr = max(0, (modelDevice-off)/SectorSize*SectorSize), io.ErrUnexpectedEOF
	}
	inline := s.m.mode == Streaming && n <= s.m.inlineMax
	if inline && s.m.async && wantErr != nil {
		// The request in flight that failed is dropped whole: what
		// reached the host (or was counted as written) ends where its
		// chunk starts. Chunks are cut from rounds of a FIFO's worth of
		// sectors, the ring starting empty at each transfer.
		sec := int(moved / SectorSize)
		round := sec / s.m.fifo * s.m.fifo
		moved = int64(round+(sec-round)/s.m.chunk*s.m.chunk) * SectorSize
	}
	if wantErr == nil && err != nil || wantErr != nil && !errors.Is(err, wantErr) {
		t.Fatalf("transfer(read=%v, %d, %d, fail at %d) = %v, want %v", read, off, n, fail, err, wantErr)
	}
	var data []byte
	if read {
		data = s.m.device[min(off, modelDevice):][:moved]
		copy(s.m.host, data)
	} else {
		data = s.m.host[:moved]
		written := moved
		if fail >= 0 {
			written = fail - off // memDev writes up to the bad byte
		}
		copy(s.m.device[off:], s.m.host[:written])
	}
	// The tap sees what moved, in order; a failed write may have shown it
	// the chunk the backend then refused.
	if s.tap {
		if int64(len(s.tapped)) < moved || (wantErr == nil && int64(len(s.tapped)) != moved) {
			t.Fatalf("tap saw %d bytes, %d moved", len(s.tapped), moved)
		}
		if !bytes.Equal(s.tapped[:moved], data) {
			t.Fatal("tap saw other bytes than those moved")
		}
	}
	tr := s.e.Last()
	ints := 2
	if s.m.mode == StoreAndForward {
		// One handshake per sector started.
		ints = int(moved / SectorSize)
		if wantErr != nil {
			ints++
		}
	}
	// A failed write may have copied sectors into the FIFO that never
	// reached the device.
	copiedOK := tr.CopiedBytes == moved || (wantErr != nil && !read && tr.CopiedBytes > moved && tr.CopiedBytes <= n)
	if tr.Bytes != moved || tr.Interrupts != ints || tr.Completions != 1 || !copiedOK ||
		tr.Offset != off || tr.Sectors != n/SectorSize || !errors.Is(tr.Err, wantErr) || tr.Inline != inline {
		t.Fatalf("Last() = %+v; want %d bytes moved, %d interrupts, error %v", tr, moved, ints, wantErr)
	}
	st := &s.m.stats
	if wantErr == nil {
		st.Transfers++
	} else {
		st.Failed++
	}
	st.Interrupts += uint64(ints)
	st.Completions++
	st.Sectors += uint64(moved / SectorSize)
	st.Bytes += uint64(moved)
	st.Copies += uint64(tr.Copies)
	st.CopiedBytes += uint64(tr.CopiedBytes)
}

func (s *engineMachine) check(t *rapid.T) {
	if got := concat(s.m.regions); !bytes.Equal(got, s.m.host) {
		t.Fatal("host memory differs from the model")
	}
	if !bytes.Equal(s.dev.b, s.m.device) {
		t.Fatal("device differs from the model")
	}
	if diff := cmp.Diff(s.m.stats, s.e.Stats()); diff != "" {
		t.Fatalf("Stats (-want +got):\n%s", diff)
	}
}

// TestEngineModel drives an engine with random programming, reads, writes,
// backend failures, invalid requests and Close, against a model of host
// memory, the device and the counters.
func TestEngineModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := newEngineMachine(t)
		defer s.e.Close()
		t.Repeat(map[string]func(*rapid.T){
			"SetRegions": s.setRegions,
			"Read":       func(t *rapid.T) { s.transfer(t, true) },
			"Write":      func(t *rapid.T) { s.transfer(t, false) },
			"Close": func(t *rapid.T) {
				if rapid.IntRange(0, 19).Draw(t, "rare") == 0 {
					s.e.Close()
					s.m.closed = true
				}
			},
			"": s.check,
		})
	})
}
