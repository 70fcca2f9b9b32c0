package bridge

import (
	"bytes"
	"errors"
	"syscall"
	"testing"

	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/checksum"
	"github.com/nhdkit/nhd/nbd"
)

const testCmd int64 = 64 << 10

// newTestBridge assembles variant v over an NBD client whose server's disk
// can be given a bad sector.
func newTestBridge(t *testing.T, v Variant) (*Bridge, *badDisk) {
	t.Helper()
	disk := newBadDisk(16 << 20)
	b, err := New(Config{Backend: serve(t, disk), Datapath: v.Datapath, MaxCommand: int(testCmd)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, disk
}

func TestRoundTrip(t *testing.T) {
	for _, v := range Table4() {
		t.Run(v.Name, func(t *testing.T) {
			b, _ := newTestBridge(t, v)
			buf := make([]byte, testCmd)
			// Sequential, then backwards (no read-ahead hits), in whole
			// commands and in halves.
			offs := []int64{0, testCmd, 2 * testCmd, 3 * testCmd, 2 * testCmd, 0, testCmd / 2}
			for gen, off := range offs {
				fill(buf, off, byte(gen))
				if err := b.Write(buf, off); err != nil {
					t.Fatalf("write at %d: %v", off, err)
				}
				if got, want := b.Sum(), checksum.Checksum(buf, 0); got != want {
					t.Fatalf("write at %d: checksum %#04x, want %#04x", off, got, want)
				}
			}
			if err := b.Flush(); err != nil {
				t.Fatal(err)
			}
			want := make([]byte, 4*testCmd)
			for gen, off := range offs {
				fill(want[off:off+testCmd], off, byte(gen))
			}
			got := make([]byte, testCmd/2)
			for off := int64(0); off < int64(len(want)); off += int64(len(got)) {
				if err := b.Read(got, off); err != nil {
					t.Fatalf("read at %d: %v", off, err)
				}
				if !bytes.Equal(got, want[off:off+int64(len(got))]) {
					t.Fatalf("read at %d: data differ from what was written", off)
				}
				if s, w := b.Sum(), checksum.Checksum(got, 0); s != w {
					t.Fatalf("read at %d: checksum %#04x, want %#04x", off, s, w)
				}
			}
		})
	}
}

// request is the byte granularity of v's backend requests: the failing LBA
// a device reports is the first of the request that failed.
func request(v Variant) int64 {
	if v.Pipelining == InChunks {
		return DefaultChunk
	}
	return testCmd
}

// ataErr returns err's *ata.Error, failing the test without one.
func ataErr(t *testing.T, err error) *ata.Error {
	t.Helper()
	var e *ata.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v is no *ata.Error", err)
	}
	return e
}

func TestReadError(t *testing.T) {
	for _, v := range Table4() {
		t.Run(v.Name, func(t *testing.T) {
			b, disk := newTestBridge(t, v)
			buf := make([]byte, testCmd)
			for k := range int64(4) {
				if err := b.Write(buf, k*testCmd); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Flush(); err != nil {
				t.Fatal(err)
			}
			// A bad sector in the second half of block 2, read after blocks
			// 0 and 1 (whose read-ahead, if any, fetches block 2).
			bad := 2*testCmd + testCmd/2 + 5*512
			disk.bad.Store(bad)
			for k := range int64(2) {
				if err := b.Read(buf, k*testCmd); err != nil {
					t.Fatal(err)
				}
			}
			err := b.Read(buf, 2*testCmd)
			e := ataErr(t, err)
			wantLBA := uint64(bad/request(v)*request(v)) / 512
			if e.Err&ata.ErrorUNC == 0 || e.Status&ata.StatusERR == 0 || e.LBA != wantLBA {
				t.Fatalf("got %v, want UNC at LBA %d", err, wantLBA)
			}
			disk.bad.Store(-1)
			if err := b.Read(buf, 2*testCmd); err != nil {
				t.Fatalf("after the sector healed: %v", err)
			}
		})
	}
}

// wantWriteFault checks that err is DF|ERR with ABRT at LBA lba (any LBA
// for lba < 0).
func wantWriteFault(t *testing.T, err error, lba int64) {
	t.Helper()
	e := ataErr(t, err)
	if e.Status&(ata.StatusDF|ata.StatusERR) != ata.StatusDF|ata.StatusERR || e.Err&ata.ErrorABRT == 0 || lba >= 0 && e.LBA != uint64(lba) {
		t.Fatalf("got %v, want DF|ERR with ABRT at LBA %d", err, lba)
	}
}

func TestWriteError(t *testing.T) {
	for _, v := range Table4() {
		t.Run(v.Name, func(t *testing.T) {
			b, disk := newTestBridge(t, v)
			buf := make([]byte, testCmd)
			bad := 2*testCmd + testCmd/2 + 5*512
			disk.bad.Store(bad)
			wantLBA := bad / request(v) * request(v) / 512
			err := b.Write(buf, 2*testCmd)
			if v.Pipelining != AcrossCommands {
				wantWriteFault(t, err, wantLBA)
				if errors.Is(err, ErrWriteBehind) {
					t.Fatalf("a write's own failure matches ErrWriteBehind: %v", err)
				}
				return
			}
			// Behind the write cache: the command completes, and the next
			// command reports the failed write's LBA, once.
			if err != nil {
				t.Fatalf("write behind: %v", err)
			}
			for k := int64(3); ; k++ {
				err := b.Write(buf, k*testCmd)
				if err != nil {
					wantWriteFault(t, err, wantLBA)
					if !errors.Is(err, ErrWriteBehind) || !errors.Is(err, syscall.EIO) {
						t.Fatalf("a failed write behind reported as %v, want ErrWriteBehind and EIO", err)
					}
					break
				}
				if k > 3+DefaultDepth {
					t.Fatalf("%d commands after the failed write behind, no error", k-2)
				}
			}
			if err := b.Flush(); err != nil {
				t.Fatalf("flush after the error was reported: %v", err)
			}
			if err := b.Write(buf, 2*testCmd); err != nil {
				t.Fatal(err)
			}
			// FLUSH CACHE waits for the write behind and reports its LBA.
			wantWriteFault(t, b.Flush(), wantLBA)
			if err := b.Flush(); err != nil {
				t.Fatalf("second flush: %v", err)
			}
		})
	}
}

// TestFailingSector: over a backend whose calls move the sectors before a
// bad one and then fail, as a file's do, every row reports the bad sector
// itself, for a read and for a write (behind the write cache, by the next
// command and by FLUSH CACHE).
func TestFailingSector(t *testing.T) {
	for _, v := range Table4() {
		t.Run(v.Name, func(t *testing.T) {
			disk := newBadDisk(16 << 20)
			disk.partial = true
			b, err := New(Config{Backend: disk, Datapath: v.Datapath, MaxCommand: int(testCmd)})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			buf := make([]byte, testCmd)
			bad := 2*testCmd + testCmd/2 + 5*512
			disk.bad.Store(bad)
			e := ataErr(t, b.Read(buf, 2*testCmd))
			if e.Err&ata.ErrorUNC == 0 || e.LBA != uint64(bad/512) {
				t.Fatalf("read: %v, want UNC at LBA %d", e, bad/512)
			}
			err = b.Write(buf, 2*testCmd)
			if v.Pipelining == AcrossCommands {
				if err != nil {
					t.Fatalf("write behind: %v", err)
				}
				err = b.Write(buf, 0)
			}
			wantWriteFault(t, err, bad/512)
			if v.Pipelining != AcrossCommands {
				return
			}
			if err := b.Write(buf, 2*testCmd); err != nil {
				t.Fatal(err)
			}
			wantWriteFault(t, b.Flush(), bad/512)
		})
	}
}

// TestCopies: every row counts the payload of its data phases and the
// bytes it copies on their way (Bridge.Copies, zerocopy's accounting). A
// zero-copy row copies each byte once (the DMA engine, between host memory
// and its FIFO); staging through the bridge's buffer adds a copy. The row
// pipelined across commands copies each byte once too: the engine copies
// between host memory and the Ahead's buffers, which the Ahead lends it
// (dma.PeekReaderAt, dma.ReserveWriterAt), whether a read comes from the
// read-ahead or on demand.
func TestCopies(t *testing.T) {
	for _, v := range Table4() {
		t.Run(v.Name, func(t *testing.T) {
			b, _ := newTestBridge(t, v)
			buf := make([]byte, testCmd)
			const n = 4
			for i := range int64(n) {
				fill(buf, i*testCmd, 1)
				if err := b.Write(buf, i*testCmd); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Flush(); err != nil {
				t.Fatal(err)
			}
			w := b.Copies()
			for i := range int64(n) {
				if err := b.Read(buf, i*testCmd); err != nil {
					t.Fatal(err)
				}
			}
			r := b.Copies()
			r.Payload -= w.Payload
			r.Copied -= w.Copied
			if w.Payload != n*testCmd || r.Payload != n*testCmd {
				t.Fatalf("payload: writes %d, reads %d bytes; want %d each", w.Payload, r.Payload, n*testCmd)
			}
			wantW, wantR := int64(1), int64(1)
			if !v.ZeroCopy && v.Pipelining != AcrossCommands {
				wantW, wantR = 2, 2
			}
			if got := w.CopiesPerByte(); got != float64(wantW) {
				t.Errorf("writes: %.3f copies per byte, want %d (%v)", got, wantW, w)
			}
			if got := r.CopiesPerByte(); got != float64(wantR) {
				t.Errorf("reads: %.3f copies per byte, want %d (%v)", got, wantR, r)
			}
		})
	}
}

// TestBadConfig: configurations New and NewAhead cannot assemble are
// ErrConfig.
func TestBadConfig(t *testing.T) {
	disk := nbd.NewMemDisk(1 << 20)
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"no backend", Config{}},
		{"MaxCommand 1000", Config{Backend: disk, MaxCommand: 1000}},
		{"negative Chunk", Config{Backend: disk, Chunk: -512}},
		{"negative Depth", Config{Backend: disk, Datapath: Table4()[5].Datapath, Depth: -1}},
		{"Depth 17", Config{Backend: disk, Datapath: Table4()[5].Datapath, Depth: MaxInFlight + 1}},
		{"zero-copy across commands", Config{Backend: disk, Datapath: Datapath{Streaming: true, ZeroCopy: true, Pipelining: AcrossCommands}}},
		{"unknown Pipelining", Config{Backend: disk, Datapath: Datapath{Pipelining: AcrossCommands + 1}}},
	} {
		if b, err := New(c.cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("New with %s: %v, want ErrConfig", c.name, err)
			if b != nil {
				b.Close()
			}
		}
	}
	for _, c := range []AheadConfig{{Block: 0}, {Block: 1000}, {Block: 4096, Depth: -1}} {
		if _, err := NewAhead(disk, c); !errors.Is(err, ErrConfig) {
			t.Errorf("NewAhead(%+v): %v, want ErrConfig", c, err)
		}
	}
}

// TestBadInput: commands the bridge cannot make, and calls after Close,
// each get the package's own error before anything reaches the device.
func TestBadInput(t *testing.T) {
	disk := nbd.NewMemDisk(1 << 20)
	for _, v := range Table4() {
		b, err := New(Config{Backend: disk, Datapath: v.Datapath, MaxCommand: 4096})
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 8192)
		for _, c := range []struct {
			p   []byte
			off int64
		}{{nil, 0}, {buf[:100], 0}, {buf, 0}, {buf[:512], 100}, {buf[:512], -512}} {
			if err := b.Read(c.p, c.off); !errors.Is(err, ErrCommandSize) {
				t.Errorf("%s: Read of %d bytes at %d: %v, want ErrCommandSize", v.Name, len(c.p), c.off, err)
			}
			if err := b.Write(c.p, c.off); !errors.Is(err, ErrCommandSize) {
				t.Errorf("%s: Write of %d bytes at %d: %v, want ErrCommandSize", v.Name, len(c.p), c.off, err)
			}
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if err := b.Read(buf[:512], 0); !errors.Is(err, ErrClosed) {
			t.Errorf("%s: Read after Close: %v, want ErrClosed", v.Name, err)
		}
		if err := b.Write(buf[:512], 0); !errors.Is(err, ErrClosed) {
			t.Errorf("%s: Write after Close: %v, want ErrClosed", v.Name, err)
		}
		if err := b.Flush(); !errors.Is(err, ErrClosed) {
			t.Errorf("%s: Flush after Close: %v, want ErrClosed", v.Name, err)
		}
		if err := b.Close(); err != nil {
			t.Errorf("%s: second Close: %v", v.Name, err)
		}
	}
}
