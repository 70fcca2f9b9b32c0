package nvme

import (
	"testing"

	"github.com/nhdkit/nhd/nbd"
)

// Get Log Page's length is (NUMD + 1) dwords, up to 1<<34 bytes: it does
// not wrap (NUMD 0xFFFFFFFF was 0 bytes, 0x40000000 was 4), and a length
// past the command's data is refused rather than answered with a page cut
// short.
func TestGetLogPageLength(t *testing.T) {
	for _, numd := range []uint32{0xFFFFFFFF, 0x40000000} {
		c := Command{Opcode: OpGetLogPage, CDW10: uint32(LogSMART) | numd<<16, CDW11: numd >> 16}
		if got, want := LogPageOf(&c).Length, (uint64(numd)+1)*4; got != want {
			t.Errorf("NUMD %#x: length %d, want %d", numd, got, want)
		}
	}
	f := newFabric(nbd.NewMemDisk(1<<20), 0)
	h := bringUp(t, f)
	var cmd Command
	GetLogPage{LID: LogSMART, Length: 1 << 34}.Encode(&cmd)
	if cpl := h.exec(h.admin, cmd, make([]byte, SMARTLogSize)); cpl.Status != StatusSGLLengthInvalid|StatusDNR {
		t.Errorf("Get Log Page of 1<<34 bytes into %d: %v, want SGL length invalid", SMARTLogSize, cpl.Status)
	}
	GetLogPage{LID: LogSMART, Length: SMARTLogSize}.Encode(&cmd)
	h.ok(h.exec(h.admin, cmd, make([]byte, SMARTLogSize)), "SMART log")
}
