package aoe

import (
	"path/filepath"
	"testing"
)

// A frame to a peer whose socket is not there (QEMU not started yet, or
// gone) is lost, as on a wire with no one on it: no error. One to a peer
// that is there arrives whole.
func TestUnixgramPeerAbsent(t *testing.T) {
	dir := t.TempDir()
	a, err := ListenUnixgram(filepath.Join(dir, "a"), filepath.Join(dir, "b"), MAC{2, 0, 0, 0, 0, 1}, 1500)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	frame := make([]byte, MinFrameSize)
	frame[0] = 0x5A
	if err := a.WriteFrame(frame); err != nil {
		t.Fatalf("frame to an absent peer: %v, want it lost without an error", err)
	}
	b, err := ListenUnixgram(filepath.Join(dir, "b"), filepath.Join(dir, "a"), MAC{2, 0, 0, 0, 0, 2}, 1500)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.WriteFrame(frame); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1514)
	if n, err := b.ReadFrame(buf); err != nil || n != MinFrameSize || buf[0] != 0x5A {
		t.Fatalf("frame to a present peer: %d bytes, %v", n, err)
	}
	b.Close() // removes its socket
	if err := a.WriteFrame(frame); err != nil {
		t.Fatalf("frame to a peer that went away: %v, want it lost without an error", err)
	}
}
