package tcp

import (
	"bytes"
	"testing"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
)

// A command that returns data must not return bytes it did not write:
// the target reuses a slot's buffer, here one that held the in-capsule
// data of a Set Features (Timestamp), for a Get Features (opcode 0x0A,
// data controller to host) of a feature with no data structure.
func TestNoStaleCommandData(t *testing.T) {
	_, addr := startServer(t, nbd.NewMemDisk(1<<20), 512)
	h := dialRaw(t, addr)
	h.icreq(0)
	h.connect(0, nvme.DynamicControllerID)
	h.enable(1)
	secret := bytes.Repeat([]byte{0xA5}, 4096)
	h.capsule(nvme.Command{Opcode: nvme.OpSetFeatures, CID: 2, CDW10: nvme.FeatTimestamp}, secret)
	h.resp()
	h.capsule(nvme.Command{Opcode: nvme.OpGetFeatures, CID: 3, CDW10: nvme.FeatArbitration, SGL: nvme.SGL{Type: nvme.SGLTransportDataBlock, Length: 4096}}, nil)
	hd, _, data := h.pdu()
	if hd.Type != TypeC2HData || len(data) != 4096 {
		t.Fatalf("got %v with %d bytes, want C2HData with 4096", hd.Type, len(data))
	}
	if i := bytes.IndexByte(data, 0xA5); i >= 0 {
		t.Fatalf("Get Features returned an earlier command's data from byte %d (%x...)", i, data[i:i+8])
	}
}

// A C2HTermReq carries the header of the PDU in error as far as it was
// read: for a bad HLEN only the common header, not the rest of an
// earlier PDU's header (here the Connect's SQE) still in the buffer.
func TestTermReqNoStaleHeader(t *testing.T) {
	_, addr := startServer(t, nbd.NewMemDisk(1<<20), 512)
	h := dialRaw(t, addr)
	h.icreq(0)
	h.connect(0, nvme.DynamicControllerID)
	b := make([]byte, HeaderSize)
	(&Header{Type: TypeCapsuleCmd, HLen: HeaderSize, PLen: CmdSize}).Put((*[CommonSize]byte)(b))
	h.write(b)
	hd, _, data := h.pdu()
	if hd.Type != TypeC2HTermReq || !bytes.Equal(data, b[:CommonSize]) {
		t.Fatalf("%v with %x, want C2HTermReq with the common header %x alone", hd.Type, data, b[:CommonSize])
	}
}
