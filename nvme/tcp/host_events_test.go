package tcp

import (
	"bytes"
	"errors"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nhdkit/nhd/nbd"
)

// resizable is a MemDisk that reports the size it is told.
type resizable struct {
	*nbd.MemDisk
	size atomic.Int64
}

func (d *resizable) Size() int64 { return d.size.Load() }

// The host follows its namespace as the target resizes it and then makes
// it inactive: each change reaches Config.NamespaceChanged and Size, and
// I/O past the old end works once the namespace grew.
func TestHostNamespaceChanges(t *testing.T) {
	disk := &resizable{MemDisk: nbd.NewMemDisk(8 << 20)}
	disk.size.Store(4 << 20)
	s, addr := startServer(t, disk, 512)
	changed := make(chan int64, 4)
	h := dialTest(t, addr, &Config{IOQueues: 1, NamespaceChanged: func(size int64) { changed <- size }})
	next := func(what string) int64 {
		t.Helper()
		select {
		case size := <-changed:
			return size
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no NamespaceChanged", what)
			return 0
		}
	}
	data := bytes.Repeat([]byte("grown"), 1024)[:4096]
	if _, err := h.WriteAt(data, 6<<20); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write past the 4 MiB namespace: %v, want ENOSPC", err)
	}
	disk.size.Store(8 << 20)
	if err := s.Fabric.ResizeNamespace(testNQN, 1); err != nil {
		t.Fatal(err)
	}
	if size := next("grown"); size != 8<<20 || h.Size() != 8<<20 {
		t.Fatalf("grown to %d, Size %d; want 8 MiB", size, h.Size())
	}
	if _, err := h.WriteAt(data, 6<<20); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if _, err := h.ReadAt(got, 6<<20); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back past the old end: %v", err)
	}
	if err := s.Fabric.RemoveNamespace(testNQN, 1); err != nil {
		t.Fatal(err)
	}
	if size := next("removed"); size != 0 || h.Size() != 0 {
		t.Fatalf("removed: %d, Size %d; want 0", size, h.Size())
	}
	if _, err := h.ReadAt(got, 0); err == nil {
		t.Fatal("read of an inactive namespace succeeded")
	}
}

// A namespace that grew while the host's connections were down is found
// grown when the host reconnects: Size and NamespaceChanged say so.
func TestHostNamespaceGrewWhileAway(t *testing.T) {
	disk := &resizable{MemDisk: nbd.NewMemDisk(8 << 20)}
	disk.size.Store(4 << 20)
	s, addr := startServer(t, disk, 512)
	p := newCutProxy(t, addr)
	changed := make(chan int64, 4)
	h := dialTest(t, p.addr(), &Config{IOQueues: 1, ReconnectDelay: 20 * time.Millisecond, LossTimeout: 20 * time.Second,
		NamespaceChanged: func(size int64) { changed <- size }})
	p.setRefuse(true)
	p.cut()
	disk.size.Store(8 << 20)
	if err := s.Fabric.ResizeNamespace(testNQN, 1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // reconnections refused meanwhile
	p.setRefuse(false)
	select {
	case size := <-changed:
		if size != 8<<20 || h.Size() != 8<<20 {
			t.Fatalf("grown to %d, Size %d; want 8 MiB", size, h.Size())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no NamespaceChanged after the reconnection")
	}
	data := bytes.Repeat([]byte{7}, 4096)
	if _, err := h.WriteAt(data, 6<<20); err != nil {
		t.Fatal(err)
	}
}
