package tcp

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
)

// rawHost speaks PDUs by hand to a Server, to send what a real host never
// would.
type rawHost struct {
	t  *testing.T
	nc net.Conn
	f  framing
}

func dialRaw(t *testing.T, addr string) *rawHost {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	t.Cleanup(func() { nc.Close() })
	return &rawHost{t: t, nc: nc}
}

func (h *rawHost) write(b ...[]byte) {
	h.t.Helper()
	for _, p := range b {
		if _, err := h.nc.Write(p); err != nil {
			h.t.Fatal(err)
		}
	}
}

func (h *rawHost) icreq(dg uint8) {
	h.t.Helper()
	var b [ICSize]byte
	(&ICReq{Digest: dg}).Put(&b)
	h.write(b[:])
	if _, err := io.ReadFull(h.nc, b[:]); err != nil {
		h.t.Fatal(err)
	}
	var resp ICResp
	if err := resp.Parse(&b); err != nil {
		h.t.Fatal(err)
	}
	h.f = framing{dg&DigestHeader != 0, dg&DigestData != 0}
}

// capsule sends cmd with in-capsule data.
func (h *rawHost) capsule(cmd nvme.Command, data []byte) {
	h.t.Helper()
	var b [CmdSize + DigestSize]byte
	if len(data) > 0 {
		cmd.SGL = nvme.SGL{Length: uint32(len(data)), Type: nvme.SGLDataBlockOffset}
	}
	(&CapsuleCmd{Header: h.f.layout(TypeCapsuleCmd, len(data)), Cmd: cmd}).Put((*[CmdSize]byte)(b[:CmdSize]))
	h.write(h.f.sealHeader(b[:], CmdSize), data)
	if h.f.ddgst && len(data) > 0 {
		var d [DigestSize]byte
		putDigest(&d, data)
		h.write(d[:])
	}
}

func (h *rawHost) connect(qid uint16, cntlid uint16) uint64 {
	h.t.Helper()
	var cmd nvme.Command
	nvme.Connect{QID: qid, SQSize: 7}.Encode(&cmd)
	var d [nvme.ConnectDataSize]byte
	(&nvme.ConnectData{ControllerID: cntlid, SubNQN: testNQN, HostNQN: "nqn.raw"}).Put(&d)
	h.capsule(cmd, d[:])
	cpl := h.resp()
	if cpl.Status != 0 {
		h.t.Fatalf("connect: %v", cpl.Status)
	}
	return cpl.Result
}

// pdu reads one PDU: its header (without digest) and data.
func (h *rawHost) pdu() (Header, []byte, []byte) {
	h.t.Helper()
	var hb [CommonSize]byte
	if _, err := io.ReadFull(h.nc, hb[:]); err != nil {
		h.t.Fatalf("reading a PDU: %v", err)
	}
	var hd Header
	hd.Parse(&hb)
	rest := make([]byte, hd.PLen-CommonSize)
	if _, err := io.ReadFull(h.nc, rest); err != nil {
		h.t.Fatal(err)
	}
	full := append(hb[:], rest...)
	var data []byte
	if hd.PDO != 0 {
		data = full[hd.PDO:]
	}
	return hd, full[:hd.HLen], data
}

func (h *rawHost) resp() nvme.Completion {
	h.t.Helper()
	hd, hdr, _ := h.pdu()
	var p CapsuleResp
	if err := p.Parse((*[HeaderSize]byte)(hdr)); err != nil {
		h.t.Fatalf("expected a CapsuleResp, got %v: %v", hd.Type, err)
	}
	return p.Cpl
}

// enable sets CC.EN with command id cid and expects success.
func (h *rawHost) enable(cid uint16) {
	h.t.Helper()
	var cmd nvme.Command
	nvme.Property{Set: true, Offset: nvme.PropCC, Value: uint64(nvme.CCEnable)}.Encode(&cmd)
	cmd.CID = cid
	h.capsule(cmd, nil)
	if cpl := h.resp(); cpl.Status != 0 {
		h.t.Fatalf("CC.EN: status %v", cpl.Status)
	}
}

// dialRawIO connects an admin queue (enabled, with one I/O queue asked
// for) and I/O queue 1 of its controller, SQSIZE 7, digests dg on both;
// it returns the I/O queue's host.
func dialRawIO(t *testing.T, addr string, dg uint8) *rawHost {
	t.Helper()
	a := dialRaw(t, addr)
	a.icreq(dg)
	cntlid := uint16(a.connect(0, nvme.DynamicControllerID))
	a.enable(1)
	a.capsule(nvme.Command{Opcode: nvme.OpSetFeatures, CID: 2, CDW10: nvme.FeatNumberOfQueues, CDW11: nvme.NumberOfQueues(1, 1)}, nil)
	if cpl := a.resp(); cpl.Status != 0 {
		t.Fatalf("number of queues: %v", cpl.Status)
	}
	q := dialRaw(t, addr)
	q.icreq(dg)
	q.connect(1, cntlid)
	return q
}

// term expects a C2HTermReq with fes (and fei, unless fei < 0), then EOF.
func (h *rawHost) term(fes FES, fei int64) {
	h.t.Helper()
	hd, hdr, data := h.pdu()
	var tr TermReq
	if err := tr.Parse((*[HeaderSize]byte)(hdr)); err != nil || hd.Type != TypeC2HTermReq {
		h.t.Fatalf("expected a C2HTermReq, got %v %v", hd.Type, err)
	}
	if tr.FES != fes || (fei >= 0 && int64(tr.FEI) != fei) || len(data) < CommonSize {
		h.t.Fatalf("TermReq FES %v FEI %d (%d bytes of header), want %v %d", tr.FES, tr.FEI, len(data), fes, fei)
	}
	if _, err := h.nc.Read(make([]byte, 1)); err != io.EOF {
		h.t.Fatalf("after the TermReq: %v, want EOF (the target shuts its side)", err)
	}
}

func TestServerHostile(t *testing.T) {
	_, addr := startServer(t, nbd.NewMemDisk(1<<20), 512, func(s *Server) { s.testSlotWait = 200 * time.Millisecond })
	pdu24 := func(t PDUType, flags Flags, hlen, pdo uint8, plen uint32) []byte {
		b := make([]byte, HeaderSize)
		(&Header{Type: t, Flags: flags, HLen: hlen, PDO: pdo, PLen: plen}).Put((*[CommonSize]byte)(b))
		return b
	}
	cases := []struct {
		name string
		run  func(h *rawHost)
	}{
		{"not an ICReq", func(h *rawHost) {
			h.write(pdu24(TypeCapsuleCmd, 0, 72, 0, 128), make([]byte, 104))
			h.term(FESInvalidField, 0)
		}},
		{"ICReq HPDA", func(h *rawHost) {
			var b [ICSize]byte
			(&ICReq{HPDA: 3}).Put(&b)
			h.write(b[:])
			h.term(FESUnsupportedParam, 10)
		}},
		{"unknown PDU type", func(h *rawHost) {
			h.icreq(0)
			h.write(pdu24(0x42, 0, 24, 0, 24))
			h.term(FESInvalidField, 0)
		}},
		{"bad HLEN", func(h *rawHost) {
			h.icreq(0)
			h.write(pdu24(TypeCapsuleCmd, 0, 24, 0, 24))
			h.term(FESInvalidField, 2)
		}},
		{"huge in-capsule data", func(h *rawHost) {
			h.icreq(0)
			b := make([]byte, CmdSize)
			(&Header{Type: TypeCapsuleCmd, HLen: CmdSize, PDO: CmdSize, PLen: 1 << 31}).Put((*[CommonSize]byte)(b))
			h.write(b)
			h.term(FESDataLimit, -1)
		}},
		{"PLEN inside the header", func(h *rawHost) {
			h.icreq(0)
			h.write(pdu24(TypeH2CData, 0, 24, 0, 10))
			h.term(FESInvalidField, 4)
		}},
		{"header digest", func(h *rawHost) {
			h.icreq(DigestHeader)
			b := make([]byte, CmdSize+DigestSize)
			(&CapsuleCmd{Header: h.f.layout(TypeCapsuleCmd, 0)}).Put((*[CmdSize]byte)(b[:CmdSize]))
			h.f.sealHeader(b, CmdSize)
			b[20] ^= 1
			h.write(b)
			h.term(FESHeaderDigest, -1)
		}},
		{"missing header digest flag", func(h *rawHost) {
			h.icreq(DigestHeader)
			h.f.hdgst = false
			h.capsule(nvme.Command{Opcode: nvme.OpKeepAlive}, nil)
			h.term(FESInvalidField, 1)
		}},
		{"H2CData before Connect", func(h *rawHost) {
			h.icreq(0)
			h.write(pdu24(TypeH2CData, 0, 24, 0, 24))
			h.term(FESSequence, -1)
		}},
		{"H2CData for no R2T", func(h *rawHost) {
			h.icreq(0)
			h.connect(0, nvme.DynamicControllerID)
			b := pdu24(TypeH2CData, 0, 24, 24, 24+512)
			binary.LittleEndian.PutUint16(b[10:], 5)
			h.write(b, make([]byte, 512))
			h.term(FESInvalidField, 10)
		}},
		{"ICReq twice", func(h *rawHost) {
			h.icreq(0)
			var b [ICSize]byte
			(&ICReq{}).Put(&b)
			h.write(b[:])
			h.term(FESSequence, -1)
		}},
		{"SQ overflow", func(h *rawHost) {
			h.icreq(0)
			h.connect(0, nvme.DynamicControllerID) // SQSIZE 7: 8 entries
			// Writes whose data never comes hold every slot: the
			// ninth command finds none.
			write := nvme.Command{Opcode: nvme.OpFabrics, NSID: uint32(nvme.FabricsConnect), SGL: nvme.SGL{Type: nvme.SGLTransportDataBlock, Length: 1024}}
			for range 8 {
				h.capsule(write, nil)
				if hd, _, _ := h.pdu(); hd.Type != TypeR2T {
					h.t.Fatalf("got %v, want an R2T", hd.Type)
				}
			}
			h.capsule(write, nil)
			h.term(FESSequence, -1)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { tc.run(dialRaw(t, addr)) })
	}
}

// Data digest errors fail the command and keep the connection.
func TestServerDataDigestError(t *testing.T) {
	_, addr := startServer(t, nbd.NewMemDisk(1<<20), 512)
	h := dialRaw(t, addr)
	h.icreq(DigestHeader | DigestData)
	h.connect(0, nvme.DynamicControllerID)
	var b [CmdSize + DigestSize]byte
	h.enable(1)
	// A Set Features with a bogus in-capsule payload whose digest is wrong.
	data := make([]byte, 16)
	cmd := nvme.Command{Opcode: nvme.OpSetFeatures, CID: 2, CDW10: nvme.FeatTimestamp, SGL: nvme.SGL{Length: 16, Type: nvme.SGLDataBlockOffset}}
	(&CapsuleCmd{Header: h.f.layout(TypeCapsuleCmd, 16), Cmd: cmd}).Put((*[CmdSize]byte)(b[:CmdSize]))
	h.write(h.f.sealHeader(b[:], CmdSize), data, []byte{1, 2, 3, 4})
	if cpl := h.resp(); cpl.Status.Code() != nvme.StatusDataTransferError || cpl.CID != 2 {
		t.Fatalf("digest error: %+v", cpl)
	}
	nvme.Property{Offset: nvme.PropCSTS}.Encode(&cmd)
	cmd.CID = 3
	h.capsule(cmd, nil)
	if cpl := h.resp(); cpl.Status != 0 || cpl.CID != 3 {
		t.Fatalf("after the digest error: %+v", cpl)
	}
}

// A host that vanishes mid-PDU leaves nothing running: Close returns.
func TestServerCloseMidPDU(t *testing.T) {
	s, addr := startServer(t, nbd.NewMemDisk(1<<20), 512)
	for range 4 {
		h := dialRaw(t, addr)
		h.icreq(0)
		h.connect(0, nvme.DynamicControllerID)
		h.write(make([]byte, 30)[:5])
		h.nc.Close()
	}
	h := dialRaw(t, addr)
	h.icreq(0)
	done := make(chan error)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	if _, err := h.nc.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("open connection after Close: %v", err)
	}
}
