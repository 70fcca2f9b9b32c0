package main

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/ata/aoe"
	"github.com/nhdkit/nhd/nbd"
)

// target serves a memory disk of size bytes as e0.1 over a unix datagram
// pair and returns the initiator's end of it, and a function that stops
// the target.
func target(t *testing.T, size int64, bufcnt uint16) (aoe.Transport, *nbd.MemDisk, func()) {
	dir := t.TempDir()
	tp, ip := filepath.Join(dir, "t.sock"), filepath.Join(dir, "i.sock")
	ttr, err := aoe.ListenUnixgram(tp, ip, aoe.MAC{0x02, 0, 0, 0, 0, 1}, 9000)
	if err != nil {
		t.Fatal(err)
	}
	itr, err := aoe.ListenUnixgram(ip, tp, aoe.MAC{0x02, 0, 0, 0, 0, 2}, 9000)
	if err != nil {
		t.Fatal(err)
	}
	mem := nbd.NewMemDisk(size)
	info := ata.DeviceInfo{Model: "aoebench test", Serial: "e0.1", Firmware: "t", Sectors: uint64(size / 512)}
	d, err := aoe.NewDisk(0, 1, info, mem, 1)
	if err != nil {
		t.Fatal(err)
	}
	d.BufferCount = bufcnt
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- (&aoe.Target{Transport: ttr, Disks: []*aoe.Disk{d}}).Serve(ctx) }()
	stop := func() {
		cancel()
		ttr.Close()
		<-done
	}
	var once sync.Once
	t.Cleanup(func() { once.Do(stop) })
	return itr, mem, func() { once.Do(stop) }
}

// A write run stores the pattern over the span it goes round, a read run
// reads it back; both keep the target's buffer count of frames in flight
// and lose none.
func TestRunAgainstTarget(t *testing.T) {
	const size = 1 << 20
	tr, mem, _ := target(t, 4<<20, 8)
	o, err := parseFlags([]string{"-iface", "x", "-rw", "write", "-runtime", "100ms", "-size", "1m"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r, err := run(tr, o)
	if err != nil {
		t.Fatalf("write run: %v", err)
	}
	t.Log(r)
	if r.depth != 8 || r.sectors != 17 || r.lost != 0 || r.frames == 0 || r.bytes != r.frames*17*512 {
		t.Fatalf("write run: %+v; want depth 8 (the buffer count), 17 sectors (the MTU's), no frame lost", r)
	}
	frames := min(r.frames, size/(17*512)) // written in order from LBA 0, each completed
	got := make([]byte, frames*17*512)
	mem.ReadAt(got, 0)
	for i := range got {
		if want := pattern(i % (17 * 512)); got[i] != want {
			t.Fatalf("disk byte %d is %#x, want %#x (the pattern of a frame)", i, got[i], want)
		}
	}

	tr, _, _ = target(t, 4<<20, 16)
	o.write, o.depth, o.sectors = false, 4, 8
	r, err = run(tr, o)
	if err != nil {
		t.Fatalf("read run: %v", err)
	}
	if r.depth != 4 || r.sectors != 8 || r.lost != 0 || r.frames == 0 {
		t.Fatalf("read run: %+v; want the depth and sectors asked for, no frame lost", r)
	}
	if !strings.HasPrefix(r.String(), "read: ") {
		t.Fatalf("result %q", r)
	}
}

// A target that fails the commands (a read past its end) makes the run
// fail with errTarget; no target at the address makes it fail after the
// config query's wait.
func TestRunErrors(t *testing.T) {
	tr, _, _ := target(t, 64<<10, 4)
	o, err := parseFlags([]string{"-iface", "x", "-runtime", "1s", "-size", "1m"}, io.Discard) // past the disk
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(tr, o); !errors.Is(err, errTarget) {
		t.Fatalf("reads past the disk's end: %v, want errTarget", err)
	}
	tr, _, _ = target(t, 64<<10, 4)
	o.slot = 9
	start := time.Now()
	if _, err := run(tr, o); err == nil || !strings.Contains(err.Error(), "no config reply from e0.9") {
		t.Fatalf("no target at e0.9: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("gave up after %v", d)
	}
}

// A target that stops answering mid-run leaves frames without replies:
// the run ends once the wait after its runtime has passed, counting them
// lost, rather than waiting for them forever.
func TestRunTargetStops(t *testing.T) {
	tr, _, stop := target(t, 4<<20, 8)
	o, err := parseFlags([]string{"-iface", "x", "-runtime", "300ms", "-size", "1m"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o.waitReplies = 200 * time.Millisecond
	time.AfterFunc(100*time.Millisecond, stop)
	done := make(chan struct{})
	var r result
	go func() {
		r, err = run(tr, o)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not end after its target stopped")
	}
	if err != nil || r.lost == 0 || r.frames == 0 {
		t.Fatalf("run with a target that stopped: %+v, %v; want frames done, then some lost", r, err)
	}
}

func TestParseFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // in the error
	}{
		{[]string{}, "-iface"},
		{[]string{"-iface", "x", "-rw", "trim"}, "-rw"},
		{[]string{"-iface", "x", "-slot", "255"}, "address"},
		{[]string{"-iface", "x", "-shelf", "-1"}, "address"},
		{[]string{"-iface", "x", "-size", "100"}, "-size"},
		{[]string{"-iface", "x", "-sectors", "256"}, "-sectors"},
		{[]string{"-iface", "x", "-runtime", "0s"}, "-runtime"},
		{[]string{"-iface", "x", "extra"}, "unexpected"},
	} {
		if _, err := parseFlags(c.args, io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error naming %s", c.args, err, c.want)
		}
	}
	o, err := parseFlags([]string{"-iface", "veth1", "-shelf", "3", "-slot", "2", "-rw", "write", "-size", "8m", "-depth", "4"}, io.Discard)
	if err != nil || o.iface != "veth1" || o.shelf != 3 || o.slot != 2 || !o.write || o.size != 8<<20 || o.depth != 4 {
		t.Fatalf("good flags: %+v, %v", o, err)
	}
}
