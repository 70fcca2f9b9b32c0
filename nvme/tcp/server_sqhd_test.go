package tcp

import (
	"testing"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
)

// SQHD is the head after the command was taken: Connect takes entry 0,
// so its completion says 1 (as Linux's target's does), the next
// command's 2, and the head wraps at the queue's entries (SQSIZE + 1).
func TestSQHeadAfterConnect(t *testing.T) {
	_, addr := startServer(t, nbd.NewMemDisk(1<<20), 512)
	h := dialRaw(t, addr)
	h.icreq(0)
	var cmd nvme.Command
	nvme.Connect{QID: 0, SQSize: 3}.Encode(&cmd)
	var d [nvme.ConnectDataSize]byte
	(&nvme.ConnectData{ControllerID: nvme.DynamicControllerID, SubNQN: testNQN, HostNQN: "nqn.raw"}).Put(&d)
	h.capsule(cmd, d[:])
	got := []uint16{h.resp().SQHead}
	for cid := range uint16(5) {
		nvme.Property{Offset: nvme.PropCSTS}.Encode(&cmd)
		cmd.CID = cid + 1
		h.capsule(cmd, nil)
		got = append(got, h.resp().SQHead)
	}
	want := []uint16{1, 2, 3, 0, 1, 2}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("SQHD of Connect and the next commands on 4 entries: %v, want %v", got, want)
		}
	}
}
