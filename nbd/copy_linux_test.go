package nbd_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nhdkit/nhd/internal/testenv"
	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nbd/nbdtest"
	"golang.org/x/sys/unix"
)

// copyTestFile makes a sparse file of size bytes and serves it.
func copyTestFile(t *testing.T, size int64) *nbd.FileDisk {
	t.Helper()
	path := filepath.Join(t.TempDir(), "disk")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	d, err := nbd.NewFileDisk(f)
	if err != nil {
		t.Fatal(err)
	}
	if off, err := unix.Seek(int(f.Fd()), 0, unix.SEEK_DATA); err != unix.ENXIO {
		testenv.Unavailable(t, "the file system under %s does not report holes (SEEK_DATA gave %d, %v)", path, off, err)
	}
	return d
}

func copyTestExtents(t *testing.T, b nbd.BlockStatuser, size int64) []nbd.ExtentAt {
	t.Helper()
	var out []nbd.ExtentAt
	err := nbd.WalkExtents(context.Background(), b, 0, size, func(e nbd.ExtentAt) error {
		if n := len(out); n > 0 && out[n-1].Flags == e.Flags {
			out[n-1].Length += e.Length
			return nil
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCopyFileToClient copies a sparse file to a client whose server
// holds a MemDisk that is not zero: the holes are written with
// WRITE_ZEROES, which frees the server's chunks.
func TestCopyFileToClient(t *testing.T) {
	ctx := context.Background()
	src := copyTestFile(t, copyTestSize)
	data := copyTestFill(t, src, 3)
	srv := nbdtest.Start(t, nbdtest.WithSize(copyTestSize))
	copyTestFill(t, srv.Disk, 4)
	dst, err := nbd.Dial(ctx, srv.URI)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	st, err := nbd.Copy(ctx, dst, src, nbd.CopyOptions{Flush: true})
	if err != nil {
		t.Fatal(err)
	}
	copyTestSame(t, srv.Disk, src)
	if st.Data != data || st.Zeroed != copyTestSize-data {
		t.Errorf("stats %+v, want %d bytes of data and the rest zeroed", st, data)
	}
	if diff := cmp.Diff(copyTestExtents(t, src, copyTestSize), copyTestExtents(t, srv.Disk, copyTestSize)); diff != "" {
		t.Errorf("extents of the copy (-source +copy):\n%s", diff)
	}
}

// TestCopyClientToFile copies a client's export into a new sparse file:
// the copy has the holes of the source.
func TestCopyClientToFile(t *testing.T) {
	ctx := context.Background()
	srv := nbdtest.Start(t, nbdtest.WithSize(copyTestSize))
	data := copyTestFill(t, srv.Disk, 5)
	src, err := nbd.Dial(ctx, srv.URI)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst := copyTestFile(t, copyTestSize)
	st, err := nbd.Copy(ctx, dst, src, nbd.CopyOptions{DestinationIsZero: true, Flush: true, Requests: 8})
	if err != nil {
		t.Fatal(err)
	}
	copyTestSame(t, dst, srv.Disk)
	if st.Data != data || st.Skipped != copyTestSize-data {
		t.Errorf("stats %+v, want %d bytes of data and the rest skipped", st, data)
	}
	if diff := cmp.Diff(copyTestExtents(t, srv.Disk, copyTestSize), copyTestExtents(t, dst, copyTestSize)); diff != "" {
		t.Errorf("extents of the copy (-source +copy):\n%s", diff)
	}
}
