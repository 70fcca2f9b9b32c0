package nbd

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nhdkit/nhd/internal/testenv"
)

// serverFaultDisk is a memory disk with a bad sector for reads (EIO) and
// one for writes (ENOSPC), and a flush that fails while failFlush is set.
// It wraps the disk rather than embedding it, so that no optional method
// of the memory disk (Lend, TakePage) reaches past the failures.
type serverFaultDisk struct {
	d                 *MemDisk
	badRead, badWrite int64
	failFlush         atomic.Bool
	flushes           atomic.Int64
}

func hits(off int64, n int, bad int64) bool { return off <= bad && bad < off+int64(n) }

func (f *serverFaultDisk) ReadAt(p []byte, off int64) (int, error) {
	if hits(off, len(p), f.badRead) {
		return 0, syscall.EIO
	}
	return f.d.ReadAt(p, off)
}

func (f *serverFaultDisk) WriteAt(p []byte, off int64) (int, error) {
	if hits(off, len(p), f.badWrite) {
		return 0, syscall.ENOSPC
	}
	return f.d.WriteAt(p, off)
}

func (f *serverFaultDisk) Size() int64 { return f.d.Size() }

func (f *serverFaultDisk) Flush(ctx context.Context) error {
	f.flushes.Add(1)
	if f.failFlush.Load() {
		return syscall.EIO
	}
	return nil
}

// TestServerBackendErrorsReachClients: a backend's failures reach QEMU's NBD
// client (qemu-io, structured replies) with their errno, one command at a
// time, and the connection serves the next command as before. With a
// writeback cache, a read over the bad sector fails with EIO and a write
// over the other with ENOSPC, while the commands around them succeed and
// read back what was written, and a failing flush fails qemu-io; with its
// default writethrough cache a write is followed by a flush (or sent with
// FUA), and it fails with the flush's EIO. libnbd's nbdcopy copying the
// export out or in fails on the bad sector, with its errno.
func TestServerBackendErrorsReachClients(t *testing.T) {
	qemuIO := testenv.Need(t, "qemu-io", "qemu-utils")
	d := &serverFaultDisk{d: NewMemDisk(1 << 20), badRead: 64<<10 + 512, badWrite: 128<<10 + 1024}
	d.failFlush.Store(true)
	path := serverTestStart(t, &Server{Exports: []Export{{Name: "f", Backend: d}}})
	run := func(t *testing.T, args []string, want ...string) {
		out, err := testenv.RunErr(30*time.Second, qemuIO, append([]string{"-f", "raw", "nbd+unix:///f?socket=" + path}, args...)...)
		if err == nil {
			t.Fatalf("qemu-io reported no failure:\n%s", out)
		}
		var got []string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "read ") || strings.HasPrefix(l, "wrote ") || strings.Contains(l, " failed") {
				got = append(got, strings.TrimSpace(l))
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("qemu-io said:\n%s\nwant, in order:\n%s", out, strings.Join(want, "\n"))
		}
	}
	t.Run("writeback", func(t *testing.T) {
		run(t, []string{"-t", "writeback",
			"-c", "write -P 0xcd 0 4k",
			"-c", "read -P 0xcd 0 4k",
			"-c", "read 60k 8k",
			"-c", "read 56k 8k",
			"-c", "write -P 0x5a 124k 8k",
			"-c", "write -P 0x5a 116k 8k",
			"-c", "read -P 0x5a 116k 8k",
			"-c", "flush"},
			"wrote 4096/4096 bytes at offset 0",
			"read 4096/4096 bytes at offset 0",
			"read failed: Input/output error",
			"read 8192/8192 bytes at offset 57344",
			"write failed: No space left on device",
			"wrote 8192/8192 bytes at offset 118784",
			"read 8192/8192 bytes at offset 118784")
	})
	// qemu-io prints nothing of a flush, failed or not: its exit status
	// and the backend's count tell.
	t.Run("flush", func(t *testing.T) {
		args := []string{"-f", "raw", "-t", "writeback", "nbd+unix:///f?socket=" + path, "-c", "write 0 4k", "-c", "flush"}
		d.failFlush.Store(false)
		if out, err := testenv.RunErr(30*time.Second, qemuIO, args...); err != nil || d.flushes.Load() == 0 {
			t.Fatalf("flush that works: %v, %d flushes\n%s", err, d.flushes.Load(), out)
		}
		d.failFlush.Store(true)
		n := d.flushes.Load()
		if out, err := testenv.RunErr(30*time.Second, qemuIO, args...); err == nil || d.flushes.Load() == n {
			t.Fatalf("flush that fails: %v, %d flushes\n%s", err, d.flushes.Load()-n, out)
		}
	})
	// libnbd's nbdcopy, reading the whole export and writing it whole:
	// each copy fails on the bad sector, saying why.
	t.Run("nbdcopy", func(t *testing.T) {
		nbdcopy := testenv.Need(t, "nbdcopy", "libnbd-bin")
		d.failFlush.Store(false)
		uri := "nbd+unix:///f?socket=" + path
		dir := t.TempDir()
		out, in := filepath.Join(dir, "out"), filepath.Join(dir, "in")
		if err := os.WriteFile(in, bytes.Repeat([]byte("nbdcopy!"), 1<<20/8), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct{ from, to, want string }{
			{uri, out, "Input/output error"},
			{in, uri, "No space left on device"},
		} {
			out, err := testenv.RunErr(30*time.Second, nbdcopy, tc.from, tc.to)
			if err == nil || !strings.Contains(out, tc.want) {
				t.Errorf("nbdcopy %s %s: %v\n%s\nwant a failure saying %q", tc.from, tc.to, err, out, tc.want)
			}
		}
	})
	t.Run("writethrough", func(t *testing.T) {
		d.failFlush.Store(true)
		run(t, []string{"-c", "write -P 0x11 8k 4k"}, "write failed: Input/output error")
	})
}
