package nbd_test

import (
	"math"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/nhdkit/nhd/nbd"
)

var _ nbd.BlockSizer = (*nbd.FileDisk)(nil)

func TestBlockSizeFileDisk(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "disk"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	d, err := nbd.NewFileDisk(f)
	if err != nil {
		t.Fatal(err)
	}
	mn, pr, mx := d.BlockSize()
	if mn != 1 || mx != math.MaxUint32 || pr != uint32(st.Blksize) {
		t.Errorf("BlockSize %d %d %d, want 1, st_blksize %d, MaxUint32", mn, pr, mx, st.Blksize)
	}
}
