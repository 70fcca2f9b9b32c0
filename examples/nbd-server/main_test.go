package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nhdkit/nhd/internal/testenv"
	"github.com/nhdkit/nhd/nbd"
)

// startRun runs the command in-process and returns once it listens.
func startRun(t *testing.T, ctx context.Context, args ...string) (addr string, done chan error, log *bytes.Buffer) {
	t.Helper()
	ready := make(chan string, 1)
	done = make(chan error, 1)
	log = new(bytes.Buffer)
	go func() { done <- run(ctx, args, log, ready) }()
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("run: %v\n%s", err, log)
	case <-time.After(10 * time.Second):
		t.Fatal("nbd-server did not start")
	}
	return addr, done, log
}

func TestServeMemoryAndStopOnSIGTERM(t *testing.T) {
	sock := testenv.SocketPath(t, "s")
	_, done, log := startRun(t, context.Background(), "-size", "4M", "-unix", sock, "-name", "mem")
	c, err := nbd.Dial(context.Background(), "nbd+unix:///mem?socket="+sock)
	if err != nil {
		t.Fatal(err)
	}
	if c.Size() != 4<<20 {
		t.Fatalf("size %d", c.Size())
	}
	if _, err := c.WriteAt([]byte("kept"), 100); err != nil {
		t.Fatal(err)
	}
	c.Close()
	// The handler registered by run catches the signal: the test lives on.
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after SIGTERM: %v\n%s", err, log)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nbd-server did not stop on SIGTERM")
	}
	if !strings.Contains(log.String(), "stopped") {
		t.Fatalf("log lacks the clean stop:\n%s", log)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
}

func TestServeFileReadOnlyTCP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(path, bytes.Repeat([]byte("file"), 1024), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr, done, log := startRun(t, ctx, "-file", path, "-tcp", "127.0.0.1:0", "-readonly")
	c, err := nbd.Dial(context.Background(), "nbd://"+addr+"/")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 8)
	if _, err := c.ReadAt(got, 4); err != nil || string(got) != "filefile" {
		t.Fatalf("read %q, %v", got, err)
	}
	if _, err := c.WriteAt([]byte("x"), 0); err == nil {
		t.Fatal("write to -readonly succeeded")
	}
	c.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v\n%s", err, log)
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{},                               // no listener
		{"-unix", "a", "-tcp", "b:1"},    // two listeners
		{"-size", "12X", "-unix", "a"},   // bad size
		{"-unix", "a", "extra"},          // stray argument
		{"-unix", "a", "-tls-cert", "x"}, // missing key file
	} {
		if err := run(context.Background(), args, new(bytes.Buffer), nil); err == nil {
			t.Errorf("run %q succeeded", args)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "512": 512, "64M": 64 << 20, "1G": 1 << 30, "2t": 2 << 40, "4KiB": 4 << 10, "8MB": 8 << 20} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "M", "1.5G", "99999999999T"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) succeeded", in)
		}
	}
}

// The limits and timeouts on the command line reach the server.
func TestFlagsReachServer(t *testing.T) {
	cfg, err := parseArgs([]string{"-unix", "x", "-max-conns", "7", "-max-handshakes", "9", "-handshake-timeout", "3s",
		"-idle-timeout", "1m", "-evict-idle-after", "-1s", "-reply-timeout", "5s", "-buffer-memory", "64M", "-conn-buffer-memory", "8M", "-max-payload", "1M"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := cfg.server(nbd.Export{Backend: nbd.NewMemDisk(1 << 20)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if srv.MaxConns != 7 || srv.MaxHandshakes != 9 || srv.HandshakeTimeout != 3*time.Second ||
		srv.IdleTimeout != time.Minute || srv.EvictIdleAfter != -time.Second || srv.ReplyTimeout != 5*time.Second || !srv.FreeOSMemory || srv.BufferMemory != 64<<20 || srv.ConnBufferMemory != 8<<20 || srv.MaxPayload != 1<<20 {
		t.Fatalf("server %+v", srv)
	}
}

// -conn-buffer-memory takes a size, 0 for the default share or -1 for
// none; anything else is a usage error naming the flag.
func TestConnBufferMemoryFlag(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		want int64
		bad  bool
	}{{"0", 0, false}, {"-1", -1, false}, {"4M", 4 << 20, false}, {"-2", 0, true}, {"lots", 0, true}} {
		cfg, err := parseArgs([]string{"-unix", "x", "-conn-buffer-memory", tc.arg}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		srv, err := cfg.server(nbd.Export{Backend: nbd.NewMemDisk(1 << 20)}, nil)
		switch {
		case tc.bad && (err == nil || !strings.Contains(err.Error(), "-conn-buffer-memory")):
			t.Errorf("-conn-buffer-memory %s: %v, want an error naming the flag", tc.arg, err)
		case !tc.bad && err != nil:
			t.Errorf("-conn-buffer-memory %s: %v", tc.arg, err)
		case !tc.bad && srv.ConnBufferMemory != tc.want:
			t.Errorf("-conn-buffer-memory %s: ConnBufferMemory %d, want %d", tc.arg, srv.ConnBufferMemory, tc.want)
		}
	}
}
