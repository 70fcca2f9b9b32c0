package nbd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nhdkit/nhd/internal/testenv"
)

// clientNbdkit starts nbdkit on a unix socket with args (plugin, filters,
// parameters) and returns the process and an nbd+unix URI for export "".
func clientNbdkit(t testing.TB, args ...string) (*testenv.Process, string) {
	t.Helper()
	return testenv.Nbdkit(t, args...)
}

func clientDial(t *testing.T, uri string, opts ...Option) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, uri, opts...)
	if err != nil {
		t.Fatalf("Dial(%s): %v", uri, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// clientHammer writes distinct blocks from many goroutines, reads each
// back and compares; blocks of different goroutines never overlap.
// Only the first 4 MiB are touched.
func clientHammer(t *testing.T, c *Client, workers, ops int, bs int) {
	t.Helper()
	blocks := int(min(c.Size(), 4<<20)) / bs
	if blocks < workers {
		t.Fatalf("export of %d bytes too small for %d workers of %d", c.Size(), workers, bs)
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			wbuf := make([]byte, bs)
			rbuf := make([]byte, bs)
			for i := range ops {
				// worker w owns blocks w, w+workers, ...
				blk := w + workers*r.IntN(blocks/workers)
				off := int64(blk * bs)
				for j := range wbuf {
					wbuf[j] = byte(w*31 + i + j)
				}
				if _, err := c.WriteAt(wbuf, off); err != nil {
					errs <- fmt.Errorf("worker %d write %d: %w", w, off, err)
					return
				}
				if _, err := c.ReadAt(rbuf, off); err != nil {
					errs <- fmt.Errorf("worker %d read %d: %w", w, off, err)
					return
				}
				if !bytes.Equal(wbuf, rbuf) {
					errs <- fmt.Errorf("worker %d: block at %d read back wrong", w, off)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestClientNbdkitMemory(t *testing.T) {
	_, uri := clientNbdkit(t, "memory", "size=64M")
	c := clientDial(t, uri)
	if c.Size() != 64<<20 {
		t.Fatalf("Size = %d", c.Size())
	}
	if !c.StructuredReplies() || c.Handshake() != StyleFixedNewstyle {
		t.Fatalf("structured=%v style=%v", c.StructuredReplies(), c.Handshake())
	}
	t.Logf("flags %v, block sizes %v", c.Flags(), fmt.Sprint(c.BlockSize()))
	clientHammer(t, c, 16, 200, 4096)
	ctx := context.Background()
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// A fresh memory disk is a hole; written data is allocated.
	buf := bytes.Repeat([]byte{0xab}, 1<<20)
	if _, err := c.WriteAt(buf, 8<<20); err != nil {
		t.Fatal(err)
	}
	if err := c.Trim(ctx, 8<<20, 64<<10); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteZeroes(ctx, 8<<20+64<<10, 64<<10, 0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 1<<20)
	if _, err := c.ReadAt(got, 8<<20); err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(buf)
	clear(want[:128<<10])
	if !bytes.Equal(got, want) {
		t.Fatal("trim/zeroes read back wrong")
	}
	ext, err := c.BlockStatus(ctx, 32<<20, 16<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ext) == 0 || !ext[0].Flags.Has(ExtentHole|ExtentZero) {
		t.Fatalf("unwritten range extents %v, want a hole", ext)
	}
	ext, err = c.BlockStatus(ctx, 8<<20+128<<10, 64<<10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ext) == 0 || ext[0].Flags.Has(ExtentHole) {
		t.Fatalf("written range extents %v, want data", ext)
	}
	// A large read is split over the maximum payload.
	big := make([]byte, 40<<20)
	if _, err := c.ReadAt(big, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(big[8<<20:9<<20], want) {
		t.Fatal("big read wrong")
	}
	// Reads at and past the end.
	n, err := c.ReadAt(make([]byte, 8192), c.Size()-4096)
	if n != 4096 || err != io.EOF {
		t.Fatalf("ReadAt across the end = %d, %v", n, err)
	}
	if _, err := c.WriteAt(make([]byte, 8192), c.Size()-4096); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("WriteAt across the end: %v", err)
	}
}

func TestClientNbdkitErrorFilter(t *testing.T) {
	_, uri := clientNbdkit(t, "--filter=error", "memory", "size=16M", "error=EIO", "error-pread-rate=1", "error-pwrite=ENOSPC", "error-pwrite-rate=1")
	c := clientDial(t, uri)
	p := bytes.Repeat([]byte{1}, 4096)
	if _, err := c.ReadAt(p, 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read error %v, want EIO", err)
	}
	if !bytes.Equal(p, make([]byte, 4096)) {
		t.Fatal("buffer not zeroed after a failed read")
	}
	if _, err := c.WriteAt(p, 0); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write error %v, want ENOSPC", err)
	}
	// The connection survives server errors.
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestClientNbdkitNoSR(t *testing.T) {
	_, uri := clientNbdkit(t, "--no-sr", "memory", "size=16M")
	c := clientDial(t, uri)
	if c.StructuredReplies() || len(c.MetaContexts()) != 0 {
		t.Fatalf("structured=%v contexts=%v", c.StructuredReplies(), c.MetaContexts())
	}
	clientHammer(t, c, 8, 100, 4096)
	if _, err := c.BlockStatus(context.Background(), 0, 4096, nil); !errors.Is(err, ErrNotAdvertised) {
		t.Fatalf("BlockStatus without contexts: %v", err)
	}
}

func TestClientNbdkitOldstyle(t *testing.T) {
	_, uri := clientNbdkit(t, "-o", "memory", "size=16M")
	c := clientDial(t, uri)
	if c.Handshake() != StyleOldstyle {
		t.Fatalf("style %v", c.Handshake())
	}
	clientHammer(t, c, 4, 50, 4096)
}

func TestClientNbdkitBlocksizePolicy(t *testing.T) {
	_, uri := clientNbdkit(t, "--filter=blocksize-policy", "memory", "size=16M",
		"blocksize-minimum=4096", "blocksize-preferred=65536", "blocksize-maximum=262144", "blocksize-error-policy=error")
	c := clientDial(t, uri)
	mn, pr, mx := c.BlockSize()
	if mn != 4096 || pr != 65536 || mx != 262144 {
		t.Fatalf("BlockSize = %d %d %d", mn, pr, mx)
	}
	if _, err := c.ReadAt(make([]byte, 512), 0); !errors.Is(err, ErrUnaligned) {
		t.Fatalf("unaligned read: %v", err)
	}
	// Larger than the maximum payload: split.
	buf := make([]byte, 1<<20+4096)
	for i := range buf {
		buf[i] = byte(i / 4096)
	}
	if _, err := c.WriteAt(buf, 4096); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(buf))
	if _, err := c.ReadAt(got, 4096); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, buf) {
		t.Fatal("split write/read mismatch")
	}
}

func TestClientNbdkitNoextentsDelay(t *testing.T) {
	_, uri := clientNbdkit(t, "--filter=noextents", "--filter=delay", "memory", "size=16M", "rdelay=5ms", "wdelay=2ms")
	c := clientDial(t, uri)
	ext, err := c.BlockStatus(context.Background(), 0, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ext) != 1 || ext[0].Flags != 0 || ext[0].Length != 1<<20 {
		t.Fatalf("noextents: %v", ext)
	}
	// Delays reorder replies: many goroutines still match by cookie.
	clientHammer(t, c, 16, 20, 4096)
	// A context deadline ends a call that waits on a slow server.
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	p := bytes.Repeat([]byte{7}, 4096)
	if err := c.Pread(ctx, p, 0, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Pread with a 1ms deadline: %v", err)
	}
	if !bytes.Equal(p, make([]byte, 4096)) {
		t.Fatal("buffer not zeroed after a cancelled read")
	}
	// The connection is still good after an abandoned request.
	if _, err := c.ReadAt(p, 0); err != nil {
		t.Fatal(err)
	}
}

func TestClientNbdkitKilled(t *testing.T) {
	p, uri := clientNbdkit(t, "--filter=delay", "memory", "size=16M", "rdelay=200ms")
	c := clientDial(t, uri)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			_, err := c.ReadAt(make([]byte, 4096), int64(i)*4096)
			errs <- err
		})
	}
	time.Sleep(50 * time.Millisecond)
	p.Kill()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("requests hang after the server died")
	}
	close(errs)
	for err := range errs {
		if err == nil {
			t.Error("a request in flight when the server died succeeded")
		}
	}
	start := time.Now()
	if _, err := c.ReadAt(make([]byte, 512), 0); err == nil || time.Since(start) > time.Second {
		t.Fatalf("call on a dead connection: %v after %v", err, time.Since(start))
	}
}

func TestClientNbdkitMultiConn(t *testing.T) {
	_, uri := clientNbdkit(t, "memory", "size=16M")
	c := clientDial(t, uri, WithConnections(4))
	if c.Connections() != 4 {
		t.Fatalf("Connections = %d (flags %v)", c.Connections(), c.Flags())
	}
	clientHammer(t, c, 8, 100, 4096)
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestClientNbdkitList(t *testing.T) {
	// The file plugin's dir mode lists exports.
	dir := t.TempDir()
	for _, n := range []string{"a", "b"} {
		if err := os.WriteFile(filepath.Join(dir, n), make([]byte, 4096), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, uri := clientNbdkit(t, "file", "dir="+dir)
	got, err := ListExports(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, func(a, b ExportEntry) int { return strings.Compare(a.Name, b.Name) })
	if len(got) != 2 || got[0].Name != "a" || got[1].Name != "b" {
		t.Fatalf("ListExports = %v", got)
	}
	c := clientDial(t, uri+"&x-test=1", WithExportName("b"))
	if c.Size() != 4096 || c.Export().Name != "b" {
		t.Fatalf("export b: size %d info %+v", c.Size(), c.Export())
	}
}

func TestClientQemuNbd(t *testing.T) {
	qemuNbd := testenv.Need(t, "qemu-nbd", "qemu-utils")
	qemuImg := testenv.Need(t, "qemu-img", "qemu-utils")
	img := filepath.Join(t.TempDir(), "disk.raw")
	testenv.Run(t, 30*time.Second, qemuImg, "create", "-q", "-f", "raw", img, "64M")
	sock := testenv.SocketPath(t, "qemu.sock")
	p := testenv.Start(t, qemuNbd, "--socket="+sock, "--format=raw", "--persistent", "--shared=8", "--cache=writeback", "--discard=unmap", img)
	testenv.WaitDial(t, p, "unix", sock, 10*time.Second)
	uri := "nbd+unix:///?socket=" + sock
	c := clientDial(t, uri, WithConnections(4))
	t.Logf("qemu-nbd: flags %v, block sizes %v, connections %d, contexts %v", c.Flags(), fmt.Sprint(c.BlockSize()), c.Connections(), c.MetaContexts())
	if !c.StructuredReplies() {
		t.Fatal("qemu-nbd without structured replies")
	}
	clientHammer(t, c, 16, 100, 4096)
	ctx := context.Background()
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// The unwritten second half of the sparse file is a hole.
	ext, err := c.BlockStatus(ctx, 32<<20, 32<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ext) == 0 || !ext[0].Flags.Has(ExtentHole|ExtentZero) {
		t.Fatalf("sparse region extents %v, want a hole", ext)
	}
	data := bytes.Repeat([]byte{0x42}, 1<<20)
	if _, err := c.WriteAt(data, 40<<20); err != nil {
		t.Fatal(err)
	}
	var walked int64
	var sawData bool
	err = c.WalkExtents(ctx, MetaContextBaseAllocation, 32<<20, 32<<20, func(off int64, e Extent) error {
		if off != 32<<20+walked {
			return fmt.Errorf("extent at %d, want %d", off, 32<<20+walked)
		}
		if off >= 40<<20 && off < 41<<20 && !e.Flags.Has(ExtentHole) {
			sawData = true
		}
		walked += int64(e.Length)
		return nil
	})
	if err != nil || walked != 32<<20 || !sawData {
		t.Fatalf("walk: %v, %d bytes, data seen %v", err, walked, sawData)
	}
	if err := c.WriteZeroes(ctx, 40<<20, 1<<20, 0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 1<<20)
	if _, err := c.ReadAt(got, 40<<20); err != nil || !bytes.Equal(got, make([]byte, 1<<20)) {
		t.Fatalf("zeroed range reads back wrong: %v", err)
	}
	if err := c.Trim(ctx, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	// 40 MiB is more than qemu-nbd's 32 MiB maximum: split.
	big := make([]byte, 40<<20)
	if _, err := c.ReadAt(big, 0); err != nil {
		t.Fatal(err)
	}
}

func TestClientNbdServer(t *testing.T) {
	bin := testenv.Need(t, "nbd-server", "nbd-server")
	dir := t.TempDir()
	img := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(img, make([]byte, 16<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := testenv.FreeTCPAddr(t)
	host, port, _ := strings.Cut(addr, ":")
	cfg := filepath.Join(dir, "nbd-server.conf")
	conf := fmt.Sprintf("[generic]\n\tlistenaddr = %s\n\tport = %s\n\tallowlist = true\n[disk]\n\texportname = %s\n\tflush = true\n\tfua = true\n\ttrim = true\n", host, port, img)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	// nbd-server -d serves a single session, so let it daemonize and
	// stop it by the pid it writes.
	pidFile := filepath.Join(dir, "pid")
	testenv.Run(t, 10*time.Second, bin, "-C", cfg, "-p", pidFile)
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			var pid int
			if _, err := fmt.Sscan(string(b), &pid); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	testenv.WaitDial(t, nil, "tcp", addr, 10*time.Second)
	uri := "nbd://" + addr + "/disk"
	l, err := ListExports(context.Background(), uri)
	if err != nil || len(l) != 1 || l[0].Name != "disk" {
		t.Fatalf("ListExports = %v, %v", l, err)
	}
	// nbd-server answers NBD_OPT_INFO differently from NBD_OPT_GO (nbdinfo
	// prints size 0 through INFO): what GO says is what counts.
	n, err := DialNegotiator(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	info, ierr := n.Info(context.Background(), "disk")
	t.Logf("nbd-server NBD_OPT_INFO: %+v, %v", info, ierr)
	n.Close()
	c := clientDial(t, uri)
	if c.Size() != 16<<20 {
		t.Fatalf("Size = %d via GO", c.Size())
	}
	if c.StructuredReplies() {
		t.Fatal("nbd-server 3.24 has no structured replies, yet they were negotiated")
	}
	t.Logf("nbd-server: flags %v", c.Flags())
	clientHammer(t, c, 8, 100, 4096)
	ctx := context.Background()
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteAtFUA(make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	if c.Flags().Has(ExportSendTrim) {
		if err := c.Trim(ctx, 1<<20, 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.BlockStatus(ctx, 0, 4096, nil); !errors.Is(err, ErrNotAdvertised) {
		t.Fatalf("BlockStatus without structured replies: %v", err)
	}
	if c.Flags().Has(ExportSendWriteZeroes) {
		if _, err := c.WriteAt(bytes.Repeat([]byte{9}, 8192), 2<<20); err != nil {
			t.Fatal(err)
		}
		if err := c.WriteZeroes(ctx, 2<<20, 8192, 0); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 8192)
		if _, err := c.ReadAt(got, 2<<20); err != nil || !bytes.Equal(got, make([]byte, 8192)) {
			t.Fatalf("zeroed range reads back wrong: %v", err)
		}
	}
	// nbd-server forks a child per connection: kill the one serving c.
	clientKillMidRun(t, c, func() {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			t.Fatal(err)
		}
		var pid int
		fmt.Sscan(string(b), &pid)
		kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		killed := 0
		for _, f := range strings.Fields(string(kids)) {
			var kid int
			if _, err := fmt.Sscan(f, &kid); err == nil && kid > 1 {
				_ = syscall.Kill(kid, syscall.SIGKILL)
				killed++
			}
		}
		if killed == 0 {
			t.Fatal("no nbd-server child to kill")
		}
	})
}

// clientKillMidRun keeps 8 goroutines writing and reading through c, kills
// the server with kill while they run, and checks that every goroutine
// ends with an error (none hangs) and that a later call fails at once.
func clientKillMidRun(t *testing.T, c *Client, kill func()) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	started := make(chan struct{}, 8)
	for i := range 8 {
		wg.Go(func() {
			buf := make([]byte, 64<<10)
			off := int64(i) * int64(len(buf))
			first := true
			for {
				_, err := c.WriteAt(buf, off)
				if err == nil {
					_, err = c.ReadAt(buf, off)
				}
				if first {
					started <- struct{}{}
					first = false
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for range 8 {
		<-started
	}
	kill()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("requests hang after the server died")
	}
	close(errs)
	n := 0
	for range errs {
		n++
	}
	if n != 8 {
		t.Fatalf("%d of 8 goroutines saw the server die", n)
	}
	start := time.Now()
	if _, err := c.ReadAt(make([]byte, 512), 0); err == nil || time.Since(start) > time.Second {
		t.Fatalf("call on a dead connection: %v after %v", err, time.Since(start))
	}
}

func TestClientQemuNbdKilled(t *testing.T) {
	qemuNbd := testenv.Need(t, "qemu-nbd", "qemu-utils")
	qemuImg := testenv.Need(t, "qemu-img", "qemu-utils")
	img := filepath.Join(t.TempDir(), "disk.raw")
	testenv.Run(t, 30*time.Second, qemuImg, "create", "-q", "-f", "raw", img, "16M")
	sock := testenv.SocketPath(t, "qemu.sock")
	p := testenv.Start(t, qemuNbd, "--socket="+sock, "--format=raw", "--persistent", img)
	testenv.WaitDial(t, p, "unix", sock, 10*time.Second)
	c := clientDial(t, "nbd+unix:///?socket="+sock)
	clientKillMidRun(t, c, p.Kill)
}
