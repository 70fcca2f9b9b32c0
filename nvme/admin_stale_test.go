package nvme

import (
	"bytes"
	"testing"

	"github.com/nhdkit/nhd/nbd"
)

// An admin command that returns data returns only what it wrote and
// zeros: never the bytes its buffer held before (a transport reuses its
// buffers), be it past a 4096-byte structure (Identify with a longer
// transfer) or a Get Features of a feature without a data structure.
func TestAdminDataZeroed(t *testing.T) {
	f := newFabric(nbd.NewMemDisk(1<<20), 0)
	h := bringUp(t, f)
	for _, tc := range []struct {
		name string
		cmd  Command
		n    int
	}{
		{"Identify 8 KiB", Command{Opcode: OpIdentify, CDW10: CNSController}, 2 * IdentifySize},
		{"Get Features", Command{Opcode: OpGetFeatures, CDW10: FeatArbitration}, IdentifySize},
	} {
		data := bytes.Repeat([]byte{0xA5}, tc.n)
		h.ok(h.exec(h.admin, tc.cmd, data), tc.name)
		start := 0
		if tc.cmd.Opcode == OpIdentify {
			start = IdentifySize
		}
		if i := bytes.IndexByte(data[start:], 0xA5); i >= 0 {
			t.Errorf("%s: byte %d is the buffer's earlier content", tc.name, start+i)
		}
	}
}
