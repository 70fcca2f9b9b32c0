package bridge

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/internal/diskmodel"
	"github.com/nhdkit/nhd/internal/testenv"
	"github.com/nhdkit/nhd/nbd"
	"pgregory.net/rapid"
)

// TestNbdkitInjectedErrors drives every Table 4 row over nbdkit's memory
// plugin behind its error filter, which fails a fifth of the reads (EIO)
// and of the writes (ENOSPC) it receives while a file exists, with random
// reads, writes and flushes of 1 to 16 sectors anywhere. The injection is
// nbdkit's own and random, so a failing sequence may not replay exactly;
// nbdkit's log (each error it injects) is printed with the failure.
//
// Nothing may be lost or misreported: every failed command is an
// *ata.Error with the registers its kind calls for and the server's errno
// in its chain; a command's own failure names an LBA inside it, a write
// behind's (bridge.ErrWriteBehind, pipelined across commands) the first
// LBA of a write accepted earlier and not yet known to be done; a read
// returns, for each sector, what one of the writes that may have reached
// it wrote; and once the errors stop and FLUSH CACHE succeeds, the disk
// holds every write that was not reported failed.
func TestNbdkitInjectedErrors(t *testing.T) {
	const sectors = 128
	on := filepath.Join(testenv.SocketDir(t), "inject")
	_, client := startNbdkit(t, "--filter=error", "memory", "size=64K",
		"error-pread-rate=0.2", "error-pread-file="+on, "error-pwrite=ENOSPC", "error-pwrite-rate=0.2", "error-pwrite-file="+on)
	inject := func(t *rapid.T, yes bool) {
		var err error
		if yes {
			err = os.WriteFile(on, nil, 0o600)
		} else if err = os.Remove(on); errors.Is(err, os.ErrNotExist) {
			err = nil
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range Table4() {
		t.Run(v.Name, func(t *testing.T) {
			var seen faultTally
			rapid.Check(t, func(t *rapid.T) {
				inject(t, false)
				if _, err := client.WriteAt(make([]byte, sectors*512), 0); err != nil {
					t.Fatal(err)
				}
				depth := rapid.IntRange(1, 4).Draw(t, "ahead")
				d, err := New(Config{Backend: client, Datapath: v.Datapath, Sectors: sectors, MaxCommand: 8192, Chunk: 2048, Depth: depth})
				if err != nil {
					t.Fatal(err)
				}
				m := &faultModel{Model: diskmodel.New(sectors), behind: v.Pipelining == AcrossCommands, seen: &seen}
				inject(t, true)
				t.Repeat(map[string]func(*rapid.T){
					"write": func(t *rapid.T) { m.write(t, d) },
					"read":  func(t *rapid.T) { m.read(t, d) },
					"flush": func(t *rapid.T) { m.flush(t, d) },
				})
				// The errors stop; FLUSH CACHE reports the writes behind
				// that failed, one per command, then succeeds.
				inject(t, false)
				for k := 0; !m.flush(t, d); k++ {
					if k > depth+1 {
						t.Fatalf("FLUSH CACHE still failing after %d reports", k+1)
					}
				}
				disk := make([]byte, sectors*512)
				if _, err := client.ReadAt(disk, 0); err != nil {
					t.Fatal(err)
				}
				if err := m.Check(disk, 0); err != nil {
					t.Fatalf("the disk after FLUSH CACHE: %v", err)
				}
				if err := d.Close(); err != nil {
					t.Fatalf("Close after every failure was reported: %v", err)
				}
			})
			t.Logf("failures met: %+v", seen)
			// The errors were injected: each kind of failure was met.
			if seen.read == 0 || seen.write == 0 && v.Pipelining != AcrossCommands || seen.behind == 0 && v.Pipelining == AcrossCommands {
				t.Errorf("failures met: %+v", seen)
			}
		})
	}
}

// TestNbdkitKilledWritesBehind: pipelined across commands, the writes the
// bridge has accepted into its write cache are still in flight when the
// server dies, and none is lost silently: FLUSH CACHE reports each, with
// its LBA (DF|ERR with ABRT, ErrWriteBehind), then fails on its own, the
// backend being gone; a read fails (UNC) rather than hang, and Close has
// nothing left to report.
func TestNbdkitKilledWritesBehind(t *testing.T) {
	p, client := startNbdkit(t, "--filter=delay", "memory", "size=1M", "wdelay=200ms")
	i := slices.IndexFunc(Table4(), func(v Variant) bool { return v.Pipelining == AcrossCommands })
	d, err := New(Config{Backend: client, Datapath: Table4()[i].Datapath, MaxCommand: 8192, Depth: 4})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8192)
	for k := range int64(4) {
		if err := d.Write(buf, k*8192); err != nil {
			t.Fatalf("write %d into the write cache: %v", k, err)
		}
	}
	p.Kill()
	done := make(chan struct{})
	go func() {
		defer close(done)
		var reported []uint64
		for {
			err := d.Flush()
			var e *ata.Error
			if !errors.As(err, &e) || e.Status&(ata.StatusDF|ata.StatusERR) != ata.StatusDF|ata.StatusERR || e.Err&ata.ErrorABRT == 0 {
				t.Errorf("FLUSH CACHE with the server dead: %v", err)
				return
			}
			if !errors.Is(err, ErrWriteBehind) {
				break
			}
			reported = append(reported, e.LBA)
		}
		if want := []uint64{0, 16, 32, 48}; !slices.Equal(reported, want) {
			t.Errorf("writes behind reported at LBAs %v, want %v", reported, want)
		}
		var e *ata.Error
		if err := d.Read(buf, 64<<10); !errors.As(err, &e) || e.Err&ata.ErrorUNC == 0 {
			t.Errorf("read with the server dead: %v", err)
		}
		if err := d.Close(); err != nil {
			t.Errorf("Close after every failure was reported: %v", err)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("commands hang after the server died")
	}
}

// startNbdkit starts nbdkit on a unix socket with args (filters, plugin,
// parameters) and returns it and a client connected to it, closed when
// the test ends.
func startNbdkit(t *testing.T, args ...string) (*testenv.Process, *nbd.Client) {
	t.Helper()
	p, uri := testenv.Nbdkit(t, args...)
	c, err := nbd.Dial(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return p, c
}

// faultModel is what the disk may hold (diskmodel), and the writes behind
// that the bridge accepted and neither reported failed nor is known to
// have done, oldest first.
type faultModel struct {
	*diskmodel.Model
	pending []pendingWrite
	behind  bool // pipelined across commands: writes complete behind
	seen    *faultTally
}

// faultTally counts the failures met: reads' and writes' own, and writes
// behind reported late.
type faultTally struct{ read, write, behind int }

type pendingWrite struct{ lba, n, gen uint64 }

// span draws a command's first sector and sector count.
func (m *faultModel) span(t *rapid.T) (lba, n uint64) {
	n = uint64(rapid.IntRange(1, 16).Draw(t, "sectors"))
	lba = uint64(rapid.IntRange(0, int(m.Sectors()-n)).Draw(t, "lba"))
	return lba, n
}

func (m *faultModel) write(t *rapid.T, d *Bridge) {
	lba, n := m.span(t)
	// A failed write behind is named by its first LBA only: with two
	// pending at one LBA the model could not tell which failed, so the
	// first is made to end first.
	for m.pendingAt(lba) {
		m.flush(t, d)
	}
	gen := m.Next()
	buf := make([]byte, n*512)
	diskmodel.Fill(buf, lba, gen)
	err := d.Write(buf, int64(lba*512))
	t.Logf("write of generation %d: %v", gen, err)
	switch {
	case err == nil && !m.behind:
		m.Done(lba, n, gen)
		return
	case err == nil:
		m.pending = append(m.pending, pendingWrite{lba, n, gen})
	default:
		m.failed(t, err, ata.CmdWriteDMAExt, lba, n)
	}
	// Written or not, as far as anyone knows yet.
	m.Maybe(lba, n, gen)
}

func (m *faultModel) read(t *rapid.T, d *Bridge) {
	lba, n := m.span(t)
	buf := make([]byte, n*512)
	err := d.Read(buf, int64(lba*512))
	t.Logf("read: %v", err)
	if err != nil && m.failed(t, err, ata.CmdReadDMAExt, lba, n) {
		return
	}
	// A read that got past the writes behind waited for them all, and
	// none had failed unreported.
	m.settle()
	if err == nil {
		if err := m.Check(buf, lba); err != nil {
			t.Fatalf("a read: %v", err)
		}
	}
}

// flush runs FLUSH CACHE and reports whether it succeeded.
func (m *faultModel) flush(t *rapid.T, d *Bridge) bool {
	err := d.Flush()
	t.Logf("flush: %v", err)
	if err != nil {
		if !m.failed(t, err, ata.CmdFlushCacheExt, 0, 0) {
			t.Fatalf("FLUSH CACHE failed on its own: %v", err)
		}
		return false
	}
	m.settle()
	return true
}

func (m *faultModel) pendingAt(lba uint64) bool {
	return slices.ContainsFunc(m.pending, func(w pendingWrite) bool { return w.lba == lba })
}

// settle records that every write behind pending is done.
func (m *faultModel) settle() {
	for _, w := range m.pending {
		m.Done(w.lba, w.n, w.gen)
	}
	m.pending = m.pending[:0]
}

// failed checks the error of a command of n sectors at lba that op ended
// with, and reports whether it was a write behind's, reported late. That
// write, the oldest pending one at the LBA reported, leaves the pending
// list; the sectors it would have written keep what they may hold.
func (m *faultModel) failed(t *rapid.T, err error, op ata.Opcode, lba, n uint64) (behind bool) {
	var e *ata.Error
	if !errors.As(err, &e) {
		t.Fatalf("%v: error %v is no *ata.Error", op, err)
	}
	read := op == ata.CmdReadDMAExt
	if read && (e.Status&ata.StatusERR == 0 || e.Err&ata.ErrorUNC == 0) ||
		!read && (e.Status&(ata.StatusDF|ata.StatusERR) != ata.StatusDF|ata.StatusERR || e.Err&ata.ErrorABRT == 0) {
		t.Fatalf("%v: registers of %v", op, err)
	}
	if errors.Is(err, ErrWriteBehind) {
		i := slices.IndexFunc(m.pending, func(w pendingWrite) bool { return w.lba == e.LBA })
		if !m.behind || i < 0 || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("%v: %v names no write behind pending (%v)", op, err, m.pending)
		}
		m.pending = slices.Delete(m.pending, i, i+1)
		m.seen.behind++
		return true
	}
	errno := syscall.ENOSPC
	if read {
		errno = syscall.EIO
	}
	if e.LBA < lba || e.LBA >= lba+n || !errors.Is(err, errno) || !read && m.behind {
		t.Fatalf("%v of %d sectors at LBA %d: %v", op, n, lba, err)
	}
	if read {
		m.seen.read++
	} else {
		m.seen.write++
	}
	return false
}
