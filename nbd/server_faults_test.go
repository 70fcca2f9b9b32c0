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
	d := &serverFaultDisk{d: NewMemDisk(1 << 20), badRead: 64<<10 + 512, badWrite: 128<<10 + 1024}
	uri := "nbd+unix:///f?socket=" + serverTestStart(t, &Server{Exports: []Export{{Name: "f", Backend: d}}})
	t.Run("qemu-io", func(t *testing.T) { serverFaultsQemuIO(t, d, uri) })
	t.Run("nbdcopy", func(t *testing.T) { serverFaultsNbdcopy(t, d, uri) })
}

// serverFaultsQemuIO is TestServerBackendErrorsReachClients for qemu-io.
func serverFaultsQemuIO(t *testing.T, d *serverFaultDisk, uri string) {
	qemuIO := testenv.Need(t, "qemu-io", "qemu-utils")
	run := func(args ...string) (string, error) {
		return testenv.RunErr(30*time.Second, qemuIO, append([]string{"-f", "raw", uri}, args...)...)
	}
	d.failFlush.Store(false)
	out, err := run("-t", "writeback",
		"-c", "write -P 0xcd 0 4k", "-c", "read -P 0xcd 0 4k", "-c", "read 60k 8k", "-c", "read 56k 8k",
		"-c", "write -P 0x5a 124k 8k", "-c", "write -P 0x5a 116k 8k", "-c", "read -P 0x5a 116k 8k")
	wantQemuIO(t, out, err,
		"wrote 4096/4096 bytes at offset 0",
		"read 4096/4096 bytes at offset 0",
		"read failed: Input/output error",
		"read 8192/8192 bytes at offset 57344",
		"write failed: No space left on device",
		"wrote 8192/8192 bytes at offset 118784",
		"read 8192/8192 bytes at offset 118784")
	// qemu-io prints nothing of a flush, failed or not: its exit status
	// and the backend's count tell.
	n := d.flushes.Load()
	if out, err := run("-t", "writeback", "-c", "write 0 4k", "-c", "flush"); err != nil || d.flushes.Load() == n {
		t.Fatalf("flush that works: %v, %d flushes\n%s", err, d.flushes.Load()-n, out)
	}
	d.failFlush.Store(true)
	n = d.flushes.Load()
	if out, err := run("-t", "writeback", "-c", "write 0 4k", "-c", "flush"); err == nil || d.flushes.Load() == n {
		t.Fatalf("flush that fails: %v, %d flushes\n%s", err, d.flushes.Load()-n, out)
	}
	out, err = run("-c", "write -P 0x11 8k 4k") // writethrough: the write's flush fails
	wantQemuIO(t, out, err, "write failed: Input/output error")
	d.failFlush.Store(false)
}

// wantQemuIO checks that qemu-io failed and reported, in order, the want
// lines about reads and writes.
func wantQemuIO(t *testing.T, out string, err error, want ...string) {
	t.Helper()
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "read ") || strings.HasPrefix(l, "wrote ") || strings.Contains(l, " failed") {
			got = append(got, strings.TrimSpace(l))
		}
	}
	if err == nil || !slices.Equal(got, want) {
		t.Fatalf("qemu-io: %v, said:\n%s\nwant a failure and, in order:\n%s", err, out, strings.Join(want, "\n"))
	}
}

// serverFaultsNbdcopy is TestServerBackendErrorsReachClients for libnbd's
// nbdcopy, copying the whole export out and a file in: each copy fails on
// the bad sector, saying why.
func serverFaultsNbdcopy(t *testing.T, d *serverFaultDisk, uri string) {
	nbdcopy := testenv.Need(t, "nbdcopy", "libnbd-bin")
	dir := t.TempDir()
	out, in := filepath.Join(dir, "out"), filepath.Join(dir, "in")
	if err := os.WriteFile(in, bytes.Repeat([]byte("nbdcopy!"), 1<<20/8), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ from, to, want string }{
		{uri, out, "Input/output error"},
		{in, uri, "No space left on device"},
	} {
		said, err := testenv.RunErr(30*time.Second, nbdcopy, tc.from, tc.to)
		if err == nil || !strings.Contains(said, tc.want) {
			t.Errorf("nbdcopy %s %s: %v\n%s\nwant a failure saying %q", tc.from, tc.to, err, said, tc.want)
		}
	}
}
