package nbd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nhdkit/nhd/internal/diskmodel"
	"github.com/nhdkit/nhd/internal/testenv"
)

// TestClientNbdkitInjectedErrors runs many requests at once against
// nbdkit's memory plugin behind its error filter, which fails a quarter of
// the reads (EIO), writes (ENOSPC), trims (EPERM) and zeroes (EINVAL) it
// receives, before the plugin sees them. Four goroutines make one request
// at a time each (ReadAt, WriteAt, Trim, WriteZeroes) and two keep three
// reads and writes in flight each (StartRead, StartWrite, Call.Wait), each
// on a region of its own, against a copy of what the region holds: every
// failure carries the server's errno and leaves the region as it was (a
// failed read's buffer zeroed), every success reads back exactly, so a
// reply given to the wrong request, an error chunk applied to another, or
// a connection that does not survive a server error shows.
func TestClientNbdkitInjectedErrors(t *testing.T) {
	const region = 256 << 10
	_, uri := clientNbdkit(t, "--filter=error", "memory", "size=2M",
		"error-pread-rate=0.25", "error-pwrite=ENOSPC", "error-pwrite-rate=0.25",
		"error-trim=EPERM", "error-trim-rate=0.25", "error-zero=EINVAL", "error-zero-rate=0.25")
	c := clientDial(t, uri)
	diskmodel.Workers(t, 6, func(w int) (int, error) {
		f := faultRegion{c: c, base: int64(w * region), want: make([]byte, region), r: rand.New(rand.NewPCG(uint64(w), 7))}
		var err error
		if w < 4 {
			err = f.oneAtATime(400)
		} else {
			err = f.inFlight(3, 400)
		}
		return f.failed, err
	})
}

// faultRegion is one worker's region of the export and what it holds.
type faultRegion struct {
	c      *Client
	base   int64
	want   []byte
	r      *rand.Rand
	failed int
}

// span draws a range of 1 to 128 sectors inside [lo, hi) of the region.
func (f *faultRegion) span(lo, hi int) (off, n int) {
	n = 512 * (1 + f.r.IntN(min(128, (hi-lo)/512)))
	off = lo + 512*f.r.IntN((hi-lo-n)/512+1)
	return off, n
}

// payload returns n bytes of fresh data.
func (f *faultRegion) payload(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(f.r.Uint32())
	}
	return p
}

// settle checks the outcome of a request on [off, off+len(p)): a success
// changes the region to p's bytes for a write (data nil, zeroes for a trim
// or zeroing) or must have read them (read), a failure must carry errno
// and change nothing.
func (f *faultRegion) settle(op string, err error, errno syscall.Errno, off int, p []byte, read bool) error {
	if err != nil {
		f.failed++
		if !errors.Is(err, errno) {
			return fmt.Errorf("%s of %d bytes at %d: %w, want %v", op, len(p), f.base+int64(off), err, errno)
		}
		if read && !bytes.Equal(p, make([]byte, len(p))) {
			return fmt.Errorf("%s failed and left data in the buffer", op)
		}
		return nil
	}
	if read {
		if !bytes.Equal(p, f.want[off:off+len(p)]) {
			return fmt.Errorf("%s of %d bytes at %d read back other data", op, len(p), f.base+int64(off))
		}
		return nil
	}
	copy(f.want[off:], p)
	return nil
}

// oneAtATime makes ops requests, each waited for before the next.
func (f *faultRegion) oneAtATime(ops int) error {
	ctx := context.Background()
	for range ops {
		off, n := f.span(0, len(f.want))
		at := f.base + int64(off)
		var err error
		switch f.r.IntN(4) {
		case 0:
			p := f.payload(n)
			_, err = f.c.WriteAt(p, at)
			err = f.settle("WriteAt", err, syscall.ENOSPC, off, p, false)
		case 1:
			p := bytes.Repeat([]byte{0xee}, n)
			_, err = f.c.ReadAt(p, at)
			err = f.settle("ReadAt", err, syscall.EIO, off, p, true)
		case 2:
			err = f.settle("Trim", f.c.Trim(ctx, at, int64(n)), syscall.EPERM, off, make([]byte, n), false)
		default:
			err = f.settle("WriteZeroes", f.c.WriteZeroes(ctx, at, int64(n), 0), syscall.EINVAL, off, make([]byte, n), false)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// inFlight keeps depth reads and writes in flight from this goroutine,
// each on a slice of the region of its own (requests in flight together
// are not ordered), waiting for the oldest before starting the next.
func (f *faultRegion) inFlight(depth, ops int) error {
	type started struct {
		call  Call
		off   int
		p     []byte
		write bool
	}
	ctx := context.Background()
	slice := len(f.want) / depth
	ring := make([]*started, depth)
	for i := range ops + depth {
		k := i % depth
		if s := ring[k]; s != nil {
			op, errno := "StartRead", syscall.EIO
			if s.write {
				op, errno = "StartWrite", syscall.ENOSPC
			}
			if err := f.settle(op, s.call.Wait(ctx), errno, s.off, s.p, !s.write); err != nil {
				return err
			}
			ring[k] = nil
		}
		if i >= ops {
			continue
		}
		off, n := f.span(k*slice, (k+1)*slice)
		s := &started{off: off, write: f.r.IntN(2) == 0}
		var err error
		if s.write {
			s.p = f.payload(n)
			s.call, err = f.c.StartWrite(ctx, s.p, f.base+int64(off), 0)
		} else {
			s.p = make([]byte, n)
			s.call, err = f.c.StartRead(ctx, s.p, f.base+int64(off), 0)
		}
		if err != nil {
			return err
		}
		ring[k] = s
	}
	return nil
}

// TestClientQemuNbdInjectedErrors runs the client against qemu-nbd over
// QEMU's blkdebug driver, which fails every write touching sector 256
// (ENOSPC) and every read touching sector 128 (EIO) of a file full of
// data. A failed write leaves the connection serving; a failed read makes
// qemu-nbd 7.2 drop the connection ("Failed to send reply"), so the read
// fails, the requests in flight with it may fail too, and every later call
// fails at once (a server that sends an error chunk instead would keep
// serving): nothing hangs, a failed read's buffer is zeroed, and nothing
// succeeds that did not happen.
func TestClientQemuNbdInjectedErrors(t *testing.T) {
	want := bytes.Repeat([]byte("qemu-nbd"), 1<<20/8)
	c := clientDial(t, qemuNbdBlkdebug(t, want))
	buf := make([]byte, 4096)
	if _, err := c.WriteAt(buf, 126<<10); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write over sector 256: %v, want ENOSPC", err)
	}
	w := bytes.Repeat([]byte{0x5a}, 4096)
	if _, err := c.WriteAt(w, 0); err != nil {
		t.Fatalf("write after a failed one: %v", err)
	}
	copy(want, w)
	if _, err := c.ReadAt(buf, 0); err != nil || !bytes.Equal(buf, want[:4096]) {
		t.Fatalf("read back: %v", err)
	}
	readsAcrossHangUp(t, c, want)
}

// qemuNbdBlkdebug serves a raw file holding data with qemu-nbd through
// QEMU's blkdebug driver, which fails every read touching sector 128 with
// EIO and every write touching sector 256 with ENOSPC, and returns its URI.
func qemuNbdBlkdebug(t *testing.T, data []byte) string {
	qemuNbd := testenv.Need(t, "qemu-nbd", "qemu-utils")
	dir := t.TempDir()
	img, conf := filepath.Join(dir, "disk.raw"), filepath.Join(dir, "blkdebug.conf")
	if err := os.WriteFile(img, data, 0o600); err != nil {
		t.Fatal(err)
	}
	rules := "[inject-error]\nevent = \"none\"\niotype = \"read\"\nerrno = \"5\"\nsector = \"128\"\nonce = \"off\"\n\n" +
		"[inject-error]\nevent = \"none\"\niotype = \"write\"\nerrno = \"28\"\nsector = \"256\"\nonce = \"off\"\n"
	if err := os.WriteFile(conf, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := testenv.SocketPath(t, "qemu.sock")
	p := testenv.Start(t, qemuNbd, "--socket="+sock, "--persistent", "--shared=2", "--image-opts",
		"driver=blkdebug,config="+conf+",image.driver=raw,image.file.driver=file,image.file.filename="+img)
	testenv.WaitDial(t, p, "unix", sock, 10*time.Second)
	return "nbd+unix:///?socket=" + sock
}

// readsAcrossHangUp keeps four reads in flight from 56 KiB on, one of
// them over the bad sector, and checks what each and the next call get.
func readsAcrossHangUp(t *testing.T, c *Client, want []byte) {
	buf := make([]byte, 4096)
	calls := make([]Call, 4)
	bufs := make([][]byte, len(calls))
	var lost bool
	for i := range calls {
		bufs[i] = bytes.Repeat([]byte{0xee}, 4096)
		var err error
		calls[i], err = c.StartRead(context.Background(), bufs[i], int64(56+4*i)<<10, 0)
		if err != nil {
			// The server may hang up over the bad read (the third) before
			// the next one is sent.
			if i < 3 || !errors.Is(err, ErrConnectionLost) {
				t.Fatalf("start of read %d: %v", i, err)
			}
			calls, lost = calls[:i], true
			break
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i, call := range calls {
			err := call.Wait(context.Background())
			off := (56 + 4*i) << 10
			t.Logf("read at %d: %v", off, err)
			switch {
			case err == nil && !bytes.Equal(bufs[i], want[off:off+4096]):
				t.Errorf("read at %d succeeded with other data", off)
			case err != nil && !bytes.Equal(bufs[i], make([]byte, 4096)):
				t.Errorf("read at %d failed (%v) and left data in the buffer", off, err)
			case err == nil && off == 64<<10:
				t.Errorf("read over sector 128 succeeded")
			case off == 64<<10 && !errors.Is(err, syscall.EIO) && !errors.Is(err, ErrConnectionLost):
				t.Errorf("read over sector 128: %v, want EIO or the connection lost", err)
			}
			lost = lost || errors.Is(err, ErrConnectionLost)
		}
		// A server that hung up (qemu-nbd 7.2, which may send the error
		// chunk first) leaves every later call failing at once with the
		// connection lost; one that only answered with an error serves on.
		_, err := c.ReadAt(buf, 0)
		t.Logf("a read after them: %v", err)
		if err != nil && !errors.Is(err, ErrConnectionLost) || err == nil && lost {
			t.Errorf("a read after them (connection lost %v): %v", lost, err)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("requests hang after the failed read")
	}
}
