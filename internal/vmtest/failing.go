package vmtest

import (
	"fmt"
	"io"
	"sync/atomic"
	"syscall"
	"testing"
)

// FailingBlocks is a disk whose 4 KiB block ReadBad fails reads with EIO
// and block WriteBad fails writes with ENOSPC, the backend behind a
// FailingBlockStep. It counts the failures it returns. It wraps Inner
// rather than embedding it, so that no optional method of the inner disk
// (a memory disk's Lend or TakePage) reaches past the failures. Safe for
// concurrent use if Inner is.
type FailingBlocks struct {
	Inner interface {
		io.ReaderAt
		io.WriterAt
		Size() int64
	}
	ReadBad, WriteBad int64
	Failed            atomic.Int64
}

func (f *FailingBlocks) hits(off int64, n int, block int64) bool {
	if off < (block+1)*4096 && block*4096 < off+int64(n) {
		f.Failed.Add(1)
		return true
	}
	return false
}

// ReadAt reads from Inner, or fails with EIO over block ReadBad.
func (f *FailingBlocks) ReadAt(p []byte, off int64) (int, error) {
	if f.hits(off, len(p), f.ReadBad) {
		return 0, syscall.EIO
	}
	return f.Inner.ReadAt(p, off)
}

// WriteAt writes to Inner, or fails with ENOSPC over block WriteBad.
func (f *FailingBlocks) WriteAt(p []byte, off int64) (int, error) {
	if f.hits(off, len(p), f.WriteBad) {
		return 0, syscall.ENOSPC
	}
	return f.Inner.WriteAt(p, off)
}

// Size is Inner's.
func (f *FailingBlocks) Size() int64 { return f.Inner.Size() }

// FailingBlockStep adds a guest step that checks how a host sees a disk
// whose backend is f: direct (O_DIRECT) reads and writes of 4 KiB blocks
// at dev, where f's block ReadBad cannot be read and its block WriteBad
// cannot be written. The step fails unless the good
// blocks read and write, the bad ones fail (a read with an I/O error, a
// write with an I/O error or, where the host's driver keeps the errno, no
// space), and the device still serves the good blocks after them. Its
// Check fails unless f returned both failures.
func (vm *VM) FailingBlockStep(name, dev string, f *FailingBlocks) *Step {
	vm.t.Helper()
	st := vm.Step(name, fmt.Sprintf(`dev=%[1]s
dd if=$dev of=/dev/null bs=4096 count=1 iflag=direct
if dd if=$dev of=/dev/null bs=4096 skip=%[2]d count=1 iflag=direct 2>/tmp/failing.err; then
  echo "reading block %[2]d succeeded"; exit 1
fi
cat /tmp/failing.err; grep -q -e "I/O error" -e "Input/output error" /tmp/failing.err
if dd if=/dev/zero of=$dev bs=4096 seek=%[3]d count=1 oflag=direct 2>/tmp/failing.err; then
  echo "writing block %[3]d succeeded"; exit 1
fi
cat /tmp/failing.err; grep -q -e "I/O error" -e "Input/output error" -e "No space left" /tmp/failing.err
dd if=/dev/zero of=$dev bs=4096 seek=1 count=1 oflag=direct
dd if=$dev of=/dev/null bs=4096 count=2 iflag=direct
echo "good blocks served after the failures"
`, dev, f.ReadBad, f.WriteBad))
	st.Check = func(t *testing.T, _ string) {
		if n := f.Failed.Load(); n < 2 {
			t.Errorf("the backend failed %d requests, want the read and the write", n)
		}
	}
	return st
}
