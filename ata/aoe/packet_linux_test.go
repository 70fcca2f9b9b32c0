package aoe

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/nhdkit/nhd/internal/testenv"
	"golang.org/x/sys/unix"
)

// inNetns runs f on a thread inside the network namespace ns (made by
// ip netns add), so that the sockets f opens live there.
func inNetns(t *testing.T, ns string, f func() error) {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // left locked, and the thread ended, if it cannot go back
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- err
			return
		}
		defer unix.Close(orig)
		fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			done <- err
			return
		}
		err = f()
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestPacketConnVeth opens PacketConns on both ends of a veth pair in a
// network namespace of its own: the kernel filter passes only requests
// for the filtered addresses, frames cross intact, and Close ends a
// blocked ReadFrame. It needs root.
func TestPacketConnVeth(t *testing.T) {
	ip := testenv.Need(t, "ip", "iproute2")
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "a veth pair in a new network namespace needs root")
	}
	ns := fmt.Sprintf("nhd-aoe-veth-%d", os.Getpid())
	testenv.Run(t, 10*time.Second, ip, "netns", "add", ns)
	t.Cleanup(func() { testenv.RunErr(10*time.Second, ip, "netns", "del", ns) })
	testenv.Run(t, 10*time.Second, ip, "-n", ns, "link", "add", "tgt", "type", "veth", "peer", "name", "ini")
	testenv.Run(t, 10*time.Second, ip, "-n", ns, "link", "set", "tgt", "up")
	testenv.Run(t, 10*time.Second, ip, "-n", ns, "link", "set", "ini", "up")
	var tgt, ini *PacketConn
	inNetns(t, ns, func() (err error) {
		if tgt, err = ListenPacket("tgt"); err != nil {
			return err
		}
		ini, err = ListenPacket("ini")
		return err
	})
	defer ini.Close()
	if err := tgt.FilterAddresses([]Address{{Shelf: 0, Slot: 1}}); err != nil {
		t.Fatal(err)
	}
	send := func(flags Flags, minor uint8, tag uint32) {
		b := make([]byte, MinFrameSize)
		(&Header{Dst: tgt.MAC(), Src: ini.MAC(), Version: Version, Flags: flags, Minor: minor, Tag: tag}).Put(b)
		if err := ini.WriteFrame(b); err != nil {
			t.Fatal(err)
		}
	}
	send(0, 2, 1)            // another target's request
	send(FlagResponse, 1, 2) // a reply
	send(0, BroadcastMinor, 3)
	send(0, 1, 4)
	buf := make([]byte, 14+tgt.MTU())
	for _, want := range []uint32{3, 4} {
		n, err := tgt.ReadFrame(buf)
		var h Header
		if err != nil || ParseHeader(buf[:n], &h) != nil {
			t.Fatalf("ReadFrame: %d bytes, %v", n, err)
		}
		if h.Tag != want || h.Src != ini.MAC() || n != MinFrameSize {
			t.Fatalf("got tag %d from %v (%d bytes), want tag %d", h.Tag, h.Src, n, want)
		}
	}
	// In batches: three frames in one WriteFrames, the two for e0.1
	// read back by ReadFrames, however the kernel splits them.
	frames := make([][]byte, 3)
	for i, minor := range []uint8{1, 9, 1} {
		frames[i] = make([]byte, MinFrameSize+i)
		(&Header{Dst: tgt.MAC(), Src: ini.MAC(), Version: Version, Minor: minor, Tag: uint32(10 + i)}).Put(frames[i])
	}
	if err := ini.WriteFrames(frames); err != nil {
		t.Fatal(err)
	}
	bufs, lens := [][]byte{make([]byte, 1514), make([]byte, 1514), make([]byte, 1514)}, make([]int, 3)
	var got []uint32
	for len(got) < 2 {
		n, err := tgt.ReadFrames(bufs, lens)
		if err != nil || n < 1 {
			t.Fatalf("ReadFrames: %d, %v", n, err)
		}
		for i := range n {
			var h Header
			if ParseHeader(bufs[i][:lens[i]], &h) != nil || lens[i] != MinFrameSize+int(h.Tag-10) {
				t.Fatalf("frame %d: %x", i, bufs[i][:lens[i]])
			}
			got = append(got, h.Tag)
		}
	}
	if len(got) != 2 || got[0] != 10 || got[1] != 12 {
		t.Fatalf("ReadFrames got tags %v, want [10 12]", got)
	}

	read := make(chan error, 1)
	go func() {
		_, err := tgt.ReadFrame(buf)
		read <- err
	}()
	time.Sleep(2 * closePoll) // ReadFrame is blocked on a quiet wire
	if err := tgt.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-read:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("ReadFrame after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadFrame still blocked after Close")
	}
	if err := tgt.WriteFrame(buf[:MinFrameSize]); !errors.Is(err, ErrClosed) {
		t.Errorf("WriteFrame after Close: %v", err)
	}
}
