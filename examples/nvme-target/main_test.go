package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
	"github.com/nhdkit/nhd/nvme/tcp"
)

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-size", "1G", "-file", "x"}, "at most one of"},
		{[]string{"-size", "lots"}, "-size"},
		{[]string{"-block-size", "1000"}, "512 or 4096"},
		{[]string{"-queue-workers", "-1"}, "-queue-workers"},
		{[]string{"-reply-timeout", "soon"}, "-reply-timeout"},
		{[]string{"-max-conns", "-1"}, "-max-conns"},
		{[]string{"-nqn", ""}, "NQN of its own"},
		{[]string{"-nope"}, "flag provided but not defined"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"-tcp", "nowhere:port", "-size", "1M"}, "listen"},
		{[]string{"-file", "/nonexistent/disk"}, "/nonexistent/disk"},
	} {
		err := run(context.Background(), tc.args, io.Discard, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v, want one line with %q", tc.args, err, tc.want)
		}
	}
}

// The limits on the command line reach the server.
func TestFlagsReachServer(t *testing.T) {
	o, err := parse([]string{"-queue-workers", "3", "-reply-timeout", "5s", "-max-conns", "16"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if srv := o.server(&nvme.Fabric{}, nil); srv.QueueWorkers != 3 || srv.ReplyTimeout != 5*time.Second || srv.MaxConns != 16 {
		t.Fatalf("server %+v", srv)
	}
	if o, err = parse([]string{"-reply-timeout", "-1s"}, io.Discard); err != nil || o.server(&nvme.Fabric{}, nil).ReplyTimeout != -time.Second {
		t.Fatalf("-reply-timeout -1s: %v", err)
	}
}

// serve runs the program with args and returns its address; it stops at
// the end of the test.
func serve(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, append([]string{"-tcp", "127.0.0.1:0"}, args...), io.Discard, ready) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	select {
	case addr := <-ready:
		return addr
	case err := <-done:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("not serving")
	}
	return ""
}

func roundTrip(t *testing.T, addr, nqn string, wantSize int64) {
	t.Helper()
	ctx := context.Background()
	h, err := tcp.Dial(ctx, addr, nqn, &tcp.Config{IOQueues: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if h.Size() != wantSize {
		t.Fatalf("size %d, want %d", h.Size(), wantSize)
	}
	data := bytes.Repeat([]byte("nvme"), 64<<10)
	if _, err := h.WriteAt(data, 4096); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if _, err := h.ReadAt(got, 4096); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %v", err)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestMemory(t *testing.T) {
	addr := serve(t, "-nqn", "nqn.test:mem", "-size", "4M", "-block-size", "4096", "-queue-workers", "2", "-reply-timeout", "10s")
	roundTrip(t, addr, "nqn.test:mem", 4<<20)
}

func TestFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(path, make([]byte, 2<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := serve(t, "-nqn", "nqn.test:file", "-file", path)
	roundTrip(t, addr, "nqn.test:file", 2<<20)
	b, _ := os.ReadFile(path)
	if !bytes.Equal(b[4096:4100], []byte("nvme")) {
		t.Fatal("file not written")
	}
}

// The NVMe-to-NBD bridge: an NBD export served as a namespace.
func TestNBDBridge(t *testing.T) {
	disk := nbd.NewMemDisk(8 << 20)
	srv := &nbd.Server{Exports: []nbd.Export{{Name: "e", Backend: disk}}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() }) // after the target's cleanup: it flushes through the export
	addr := serve(t, "-nqn", "nqn.test:nbd", "-uri", "nbd://"+l.Addr().String()+"/e")
	roundTrip(t, addr, "nqn.test:nbd", 8<<20)
	b := make([]byte, 4)
	disk.ReadAt(b, 4096)
	if string(b) != "nvme" {
		t.Fatal("NBD export not written")
	}
}

// When the NBD export behind the bridge goes away, the host's commands
// fail at once with an error instead of hanging, and the program still
// stops when told to, with one line saying what was lost.
func TestNBDBridgeUpstreamGone(t *testing.T) {
	srv := &nbd.Server{Exports: []nbd.Export{{Name: "e", Backend: nbd.NewMemDisk(8 << 20)}}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-tcp", "127.0.0.1:0", "-nqn", "nqn.test:gone", "-uri", "nbd://" + l.Addr().String() + "/e"}, io.Discard, ready)
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	h, err := tcp.Dial(context.Background(), addr, "nqn.test:gone", &tcp.Config{IOQueues: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	buf := bytes.Repeat([]byte{7}, 64<<10)
	if _, err := h.WriteAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	failed := make(chan error, 1)
	go func() {
		_, err := h.ReadAt(buf, 0)
		if err == nil {
			_, err = h.WriteAt(buf, 0)
		}
		failed <- err
	}()
	select {
	case err := <-failed:
		if err == nil {
			t.Fatal("a read and a write through a closed export succeeded")
		}
		t.Logf("the host's error: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the host's command hangs after the export went away")
	}
	cancel()
	select {
	case err := <-done:
		t.Logf("the program's end: %v", err)
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("error of more than one line: %q", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the program does not stop after the export went away")
	}
}
