package nbd

import (
	"bytes"
	"testing"
)

// TestServerDefaultMaxPayload sends, at the default limits, a WRITE and a
// READ of 47.5 MiB (nbd-tester-client's largest, above the 32 MiB floor)
// and one byte over the default maximum: the first two are served, the
// READ over the limit gets EINVAL, and the advertised maximum is the
// default.
func TestServerDefaultMaxPayload(t *testing.T) {
	if DefaultServerMaxPayload != 64<<20 {
		t.Fatalf("DefaultServerMaxPayload = %d, want 64 MiB", DefaultServerMaxPayload)
	}
	const size = 96 << 20
	path := serverTestStart(t, &Server{Exports: []Export{{Name: "disk", Backend: NewMemDisk(size)}}})
	c := serverTestDial(t, path)
	info := c.negotiate("disk", false, false)
	if info.MaxPayload != DefaultServerMaxPayload {
		t.Fatalf("advertised maximum payload %d, want %d", info.MaxPayload, DefaultServerMaxPayload)
	}
	const n = 47<<20 + 512<<10
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(i*7 + i>>16)
	}
	c.request(CmdWrite, 0, 1, 4096, n, payload)
	if r, _ := c.simple(0); r.Error != 0 {
		t.Fatalf("WRITE of %d bytes: %v", n, r.Error)
	}
	c.request(CmdRead, 0, 2, 4096, n, nil)
	r, got := c.simple(n)
	if r.Error != 0 {
		t.Fatalf("READ of %d bytes: %v", n, r.Error)
	}
	if !bytes.Equal(got, payload) {
		t.Fatal("READ returned other bytes than the WRITE wrote")
	}
	c.request(CmdRead, 0, 3, 0, DefaultServerMaxPayload+1, nil)
	if r, _ := c.simple(0); r.Error != EINVAL {
		t.Fatalf("READ over the maximum: %v, want EINVAL", r.Error)
	}
}
