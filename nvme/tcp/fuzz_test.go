package tcp

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
)

// FuzzPDUHeaders parses arbitrary bytes as every PDU header: nothing
// panics, and what parses encodes back to the same value. Seeds live in
// testdata/fuzz/FuzzPDUHeaders.
func FuzzPDUHeaders(f *testing.F) {
	var b [ICSize]byte
	(&ICReq{Digest: 3}).Put(&b)
	f.Add(b[:])
	(&CapsuleResp{Header: framing{}.layout(TypeCapsuleResp, 0)}).Put((*[HeaderSize]byte)(b[:HeaderSize]))
	f.Add(b[:HeaderSize])
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) >= ICSize {
			p := (*[ICSize]byte)(in)
			var r ICReq
			if r.Parse(p) == nil {
				var out [ICSize]byte
				r.Put(&out)
				var r2 ICReq
				if r2.Parse(&out) != nil || r2 != r {
					t.Fatalf("ICReq %+v -> %+v", r, r2)
				}
			}
			var s ICResp
			if s.Parse(p) == nil {
				var out [ICSize]byte
				s.Put(&out)
				var s2 ICResp
				if s2.Parse(&out) != nil || s2 != s {
					t.Fatalf("ICResp %+v -> %+v", s, s2)
				}
			}
		}
		if len(in) >= CmdSize {
			var c CapsuleCmd
			if c.Parse((*[CmdSize]byte)(in)) == nil {
				var out [CmdSize]byte
				c.Put(&out)
				var c2 CapsuleCmd
				if c2.Parse(&out) != nil || c2 != c {
					t.Fatalf("CapsuleCmd %+v -> %+v", c, c2)
				}
			}
		}
		if len(in) >= HeaderSize {
			p := (*[HeaderSize]byte)(in)
			var out [HeaderSize]byte
			var r CapsuleResp
			if r.Parse(p) == nil {
				r.Put(&out)
				var r2 CapsuleResp
				if r2.Parse(&out) != nil || r2 != r {
					t.Fatalf("CapsuleResp %+v -> %+v", r, r2)
				}
			}
			var d Data
			if d.Parse(p) == nil {
				d.Put(&out)
				var back Data
				if back.Parse(&out) != nil || back != d {
					t.Fatalf("Data %+v -> %+v", d, back)
				}
			}
			var r2t R2T
			if r2t.Parse(p) == nil {
				r2t.Put(&out)
				var back R2T
				if back.Parse(&out) != nil || back != r2t {
					t.Fatalf("R2T %+v -> %+v", r2t, back)
				}
			}
			var tr TermReq
			if tr.Parse(p) == nil {
				tr.Put(&out)
				var back TermReq
				if back.Parse(&out) != nil || back != tr {
					t.Fatalf("TermReq %+v -> %+v", tr, back)
				}
			}
		}
	})
}

// fuzzSession returns the bytes of a host's ICReq (digests dg), admin
// Connect and CC.EN, the prefix every FuzzServer input follows.
func fuzzSession(dg uint8) []byte {
	var w bytes.Buffer
	var ic [ICSize]byte
	(&ICReq{Digest: dg}).Put(&ic)
	w.Write(ic[:])
	f := framing{dg&DigestHeader != 0, dg&DigestData != 0}
	capsule := func(cmd nvme.Command, data []byte) {
		var b [CmdSize + DigestSize]byte
		if len(data) > 0 {
			cmd.SGL = nvme.SGL{Length: uint32(len(data)), Type: nvme.SGLDataBlockOffset}
		}
		(&CapsuleCmd{Header: f.layout(TypeCapsuleCmd, len(data)), Cmd: cmd}).Put((*[CmdSize]byte)(b[:CmdSize]))
		w.Write(f.sealHeader(b[:], CmdSize))
		w.Write(data)
		if f.ddgst && len(data) > 0 {
			var d [DigestSize]byte
			putDigest(&d, data)
			w.Write(d[:])
		}
	}
	var cmd nvme.Command
	nvme.Connect{SQSize: 7}.Encode(&cmd)
	var d [nvme.ConnectDataSize]byte
	(&nvme.ConnectData{ControllerID: nvme.DynamicControllerID, SubNQN: testNQN, HostNQN: "nqn.fuzz"}).Put(&d)
	capsule(cmd, d[:])
	nvme.Property{Set: true, Offset: nvme.PropCC, Value: uint64(nvme.CCEnable)}.Encode(&cmd)
	capsule(cmd, nil)
	return w.Bytes()
}

// FuzzServer feeds a Server's connection a valid bring-up followed by
// arbitrary bytes: it must neither panic nor hang, and must end the
// connection when the host does. Seeds live in testdata/fuzz/FuzzServer.
func FuzzServer(f *testing.F) {
	// Seeds: an I/O connect attempt, a read, an in-capsule write, a
	// write through R2T and H2CData, garbage.
	read := make([]byte, CmdSize)
	(&CapsuleCmd{Header: framing{}.layout(TypeCapsuleCmd, 0), Cmd: nvme.Command{Opcode: nvme.OpIdentify, CDW10: 1,
		SGL: nvme.SGL{Length: 4096, Type: nvme.SGLTransportDataBlock}}}).Put((*[CmdSize]byte)(read))
	f.Add(uint8(0), read)
	f.Add(uint8(3), []byte{6, 3, 24, 28, 0xFF, 0, 0, 0})
	h2c := make([]byte, HeaderSize+8)
	(&Data{Header: framing{}.layout(TypeH2CData, 8), DataL: 8}).Put((*[HeaderSize]byte)(h2c[:HeaderSize]))
	f.Add(uint8(0), append(read[:CmdSize:CmdSize], h2c...))
	f.Fuzz(func(t *testing.T, dg uint8, in []byte) {
		f := &nvme.Fabric{QueueDepth: 8, Subsystems: []*nvme.Subsystem{{NQN: testNQN, Namespaces: []nvme.Namespace{{Backend: nbd.NewMemDisk(64 << 10)}}}}}
		s := &Server{Fabric: f, HandshakeTimeout: time.Second, testSlotWait: 10 * time.Millisecond}
		host, target := net.Pipe()
		done := make(chan struct{})
		go func() {
			s.ServeConn(target)
			close(done)
		}()
		go io.Copy(io.Discard, host)
		host.SetDeadline(time.Now().Add(5 * time.Second))
		host.Write(fuzzSession(dg & 3))
		host.Write(in)
		host.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("server connection did not end after the host closed")
		}
		s.Close()
	})
}
