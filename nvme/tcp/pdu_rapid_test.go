package tcp

import (
	"bytes"
	"testing"

	"github.com/nhdkit/nhd/nvme"
	"pgregory.net/rapid"
)

func genHeader(t *rapid.T) Header {
	return Header{Flags: Flags(rapid.Uint8().Draw(t, "flags")), PDO: rapid.Uint8().Draw(t, "pdo"), PLen: rapid.Uint32().Draw(t, "plen")}
}

// Round trips of every PDU header: Put then Parse gives the value back
// (with Type and HLen set by Put).
func TestRapidPDUs(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		u16, u32 := rapid.Uint16(), rapid.Uint32()
		var ic [ICSize]byte
		req := ICReq{PFV: u16.Draw(t, "pfv"), HPDA: rapid.Uint8().Draw(t, "hpda"), Digest: rapid.Uint8().Draw(t, "dgst"), MaxR2T: u32.Draw(t, "maxr2t")}
		req.Put(&ic)
		var req2 ICReq
		if err := req2.Parse(&ic); err != nil || req2 != req {
			t.Fatalf("ICReq %+v -> %+v %v", req, req2, err)
		}
		resp := ICResp{PFV: u16.Draw(t, "pfv2"), CPDA: rapid.Uint8().Draw(t, "cpda"), Digest: rapid.Uint8().Draw(t, "dgst2"), MaxH2CData: u32.Draw(t, "maxh2c")}
		resp.Put(&ic)
		var resp2 ICResp
		if err := resp2.Parse(&ic); err != nil || resp2 != resp {
			t.Fatalf("ICResp %+v -> %+v %v", resp, resp2, err)
		}
		var cb [CmdSize]byte
		cmd := CapsuleCmd{Header: genHeader(t), Cmd: nvme.Command{Opcode: nvme.Opcode(rapid.Uint8().Draw(t, "opc")), CID: u16.Draw(t, "cid"),
			NSID: u32.Draw(t, "nsid"), CDW10: u32.Draw(t, "cdw10"), SGL: nvme.SGL{Length: u32.Draw(t, "len"), Type: nvme.SGLType(rapid.Uint8().Draw(t, "sgl"))}}}
		cmd.Put(&cb)
		var cmd2 CapsuleCmd
		if err := cmd2.Parse(&cb); err != nil || cmd2 != cmd {
			t.Fatalf("CapsuleCmd %+v -> %+v %v", cmd, cmd2, err)
		}
		var hb [HeaderSize]byte
		cr := CapsuleResp{Header: genHeader(t), Cpl: nvme.Completion{Result: rapid.Uint64().Draw(t, "res"), CID: u16.Draw(t, "ccid"), Status: nvme.Status(rapid.Uint16Range(0, 0x7FFF).Draw(t, "st"))}}
		cr.Put(&hb)
		var cr2 CapsuleResp
		if err := cr2.Parse(&hb); err != nil || cr2 != cr {
			t.Fatalf("CapsuleResp %+v -> %+v %v", cr, cr2, err)
		}
		d := Data{Header: genHeader(t), CCCID: u16.Draw(t, "cccid"), TTag: u16.Draw(t, "ttag"), DataO: u32.Draw(t, "datao"), DataL: u32.Draw(t, "datal")}
		d.Type = rapid.SampledFrom([]PDUType{TypeH2CData, TypeC2HData}).Draw(t, "dtype")
		d.Put(&hb)
		var d2 Data
		if err := d2.Parse(&hb); err != nil || d2 != d {
			t.Fatalf("Data %+v -> %+v %v", d, d2, err)
		}
		r := R2T{Header: genHeader(t), CCCID: u16.Draw(t, "rcid"), TTag: u16.Draw(t, "rtag"), R2TO: u32.Draw(t, "r2to"), R2TL: u32.Draw(t, "r2tl")}
		r.Put(&hb)
		var r2 R2T
		if err := r2.Parse(&hb); err != nil || r2 != r {
			t.Fatalf("R2T %+v -> %+v %v", r, r2, err)
		}
		tr := TermReq{Header: genHeader(t), FES: FES(u16.Draw(t, "fes")), FEI: u32.Draw(t, "fei")}
		tr.Type = rapid.SampledFrom([]PDUType{TypeH2CTermReq, TypeC2HTermReq}).Draw(t, "ttype")
		tr.Put(&hb)
		var tr2 TermReq
		if err := tr2.Parse(&hb); err != nil || tr2 != tr {
			t.Fatalf("TermReq %+v -> %+v %v", tr, tr2, err)
		}
	})
}

// Framing round trip: PDUs laid out and sealed by the sender side are read
// back by pduReader with their data, digests on or off, and a flipped bit
// in a digested header or data is caught.
func TestRapidFraming(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := framing{rapid.Bool().Draw(t, "hdgst"), rapid.Bool().Draw(t, "ddgst")}
		var wire bytes.Buffer
		type pdu struct {
			t    PDUType
			data []byte
		}
		var sent []pdu
		for range rapid.IntRange(1, 6).Draw(t, "pdus") {
			p := pdu{t: rapid.SampledFrom([]PDUType{TypeCapsuleCmd, TypeCapsuleResp, TypeH2CData, TypeC2HData, TypeR2T}).Draw(t, "type")}
			if p.t == TypeCapsuleCmd || p.t == TypeH2CData || p.t == TypeC2HData {
				p.data = rapid.SliceOfN(rapid.Byte(), 0, 300).Draw(t, "data")
			}
			var b [CmdSize + DigestSize]byte
			h := f.layout(p.t, len(p.data))
			h.put(b[:], p.t, p.t.hlen())
			wire.Write(f.sealHeader(b[:], p.t.hlen()))
			wire.Write(p.data)
			if f.ddgst && len(p.data) > 0 {
				var d [DigestSize]byte
				putDigest(&d, p.data)
				wire.Write(d[:])
			}
			sent = append(sent, p)
		}
		raw := wire.Bytes()
		flip := rapid.IntRange(-1, len(raw)*8-1).Draw(t, "flip")
		if flip >= 0 {
			raw[flip/8] ^= 1 << (flip % 8)
		}
		r := newPDUReader(bytes.NewReader(raw), 1024)
		r.framing = f
		for i, p := range sent {
			err := r.next()
			if err == nil && r.h.Type != p.t {
				err = fatal(FESInvalidField, 0, "type changed")
			}
			if err == nil && r.data != len(p.data) {
				err = fatal(FESInvalidField, 4, "length changed")
			}
			var got []byte
			if err == nil {
				got = make([]byte, r.data)
				if err = r.readData(got); err == nil {
					err = r.endData()
				}
			}
			if err == nil && !bytes.Equal(got, p.data) {
				err = ErrDataDigest
			}
			if err != nil {
				if flip < 0 {
					t.Fatalf("PDU %d (%v): %v", i, p.t, err)
				}
				if !f.hdgst && !f.ddgst {
					return // an undigested flip may be caught, or not
				}
				return // caught
			}
		}
		if flip >= 0 && f.hdgst && f.ddgst {
			t.Fatalf("bit %d flipped with both digests on, and nothing noticed", flip)
		}
	})
}
