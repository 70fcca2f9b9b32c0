package nbd

import (
	"context"
	"testing"
)

// serverManyExtents describes its disk as alternating 512-byte extents of
// data and holes.
type serverManyExtents struct{ serverPlainDisk }

func (d serverManyExtents) BlockStatus(ctx context.Context, off, length int64, dst []Extent) ([]Extent, error) {
	for i := range length / 512 {
		dst = append(dst, Extent{Length: 512, Flags: ExtentFlags(i % 2)})
	}
	return dst, nil
}

// proto.md (size constraints): "For replies where the payload length is
// controlled by the server (such as NBD_CMD_BLOCK_STATUS without the flag
// NBD_CMD_FLAG_REQ_ONE), the server MUST NOT send a reply larger than the
// maximum block size." With MaxPayload 4096 the server used to send 4096
// descriptors (32772 bytes) all the same; now at most 511, which still
// describe a prefix of the range.
func TestServerBlockStatusWithinMaxPayload(t *testing.T) {
	s := &Server{
		Exports:    []Export{{Name: "", Backend: serverManyExtents{serverPlainDisk{NewMemDisk(16 << 20)}}}},
		MaxPayload: 4096,
	}
	path := serverTestStart(t, s)
	c := serverTestDial(t, path)
	info := c.negotiate("", true, true)
	c.request(CmdBlockStatus, 0, 1, 0, 16<<20, nil)
	cs := c.chunks()
	if len(cs) != 1 || cs[0].Type != ChunkBlockStatus {
		t.Fatalf("reply %+v", cs)
	}
	if l := cs[0].Length; l > info.MaxPayload {
		t.Errorf("BLOCK_STATUS chunk of %d bytes, advertised maximum %d", l, info.MaxPayload)
	}
	_, ext, err := ParseBlockStatus(cs[0].payload, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (4096 - BlockStatusHeaderSize) / ExtentSize; len(ext) != want {
		t.Errorf("%d extents, want %d (as many as fit the maximum payload)", len(ext), want)
	}
	for i, e := range ext {
		if e.Length != 512 || e.Flags != ExtentFlags(i%2) {
			t.Fatalf("extent %d: %+v", i, e)
		}
	}
}
