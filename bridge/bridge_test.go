package bridge

import (
	"bytes"
	"errors"
	"syscall"
	"testing"

	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/checksum"
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
