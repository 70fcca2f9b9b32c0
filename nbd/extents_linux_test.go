package nbd_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nhdkit/nhd/internal/testenv"
	"github.com/nhdkit/nhd/nbd"
	"golang.org/x/sys/unix"
)

func TestWalkExtentsFileDisk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "disk")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(extentsTestSize); err != nil {
		t.Fatal(err)
	}
	d, err := nbd.NewFileDisk(f)
	if err != nil {
		t.Fatal(err)
	}
	want := extentsTestFill(t, d)
	if off, err := unix.Seek(int(f.Fd()), 0, unix.SEEK_DATA); err != nil || off != nbd.MemDiskChunkSize {
		testenv.Unavailable(t, "the file system under %s does not report holes (SEEK_DATA gave %d, %v)", path, off, err)
	}
	extentsTestCheck(t, d, want)
}
