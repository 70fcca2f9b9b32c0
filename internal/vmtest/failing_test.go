package vmtest

import (
	"errors"
	"syscall"
	"testing"

	"github.com/nhdkit/nhd/nbd"
)

// FailingBlocks fails exactly the requests that touch its bad blocks, each
// with its errno, counts them, and passes the rest through.
func TestFailingBlocks(t *testing.T) {
	f := &FailingBlocks{Inner: nbd.NewMemDisk(1 << 20), ReadBad: 16, WriteBad: 32}
	p := make([]byte, 8192)
	for _, tc := range []struct {
		write bool
		off   int64
		n     int
		want  error
	}{
		{false, 15 * 4096, 4096, nil},
		{false, 16*4096 - 512, 512, nil},
		{false, 16*4096 - 512, 1024, syscall.EIO},
		{false, 17*4096 - 512, 512, syscall.EIO},
		{false, 17 * 4096, 4096, nil},
		{false, 32 * 4096, 4096, nil},
		{true, 32 * 4096, 4096, syscall.ENOSPC},
		{true, 31 * 4096, 8192, syscall.ENOSPC},
		{true, 16 * 4096, 4096, nil},
	} {
		var err error
		if tc.write {
			_, err = f.WriteAt(p[:tc.n], tc.off)
		} else {
			_, err = f.ReadAt(p[:tc.n], tc.off)
		}
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("write %v of %d at %d: %v, want %v", tc.write, tc.n, tc.off, err, tc.want)
		}
	}
	if n := f.Failed.Load(); n != 4 || f.Size() != 1<<20 {
		t.Errorf("%d failures counted, size %d", n, f.Size())
	}
}
