package tcp

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nhdkit/nhd/nvme"
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The CRC32C check value of the Castagnoli polynomial (RFC 3720, B.4).
func TestDigest(t *testing.T) {
	if d := Digest([]byte("123456789")); d != 0xE3069283 {
		t.Fatalf("Digest = %#x", d)
	}
	if d := Digest(make([]byte, 32)); d != 0x8A9136AA { // RFC 3720 B.4: 32 bytes of zeroes
		t.Fatalf("Digest(zeroes) = %#x", d)
	}
}

// Golden PDUs laid out by hand from NVMe/TCP 1.0 figures 20-34 with the
// values nvme-tcp-facts records for the Linux host and nvmet.
func TestGoldenPDUs(t *testing.T) {
	var ic [ICSize]byte
	(&ICReq{Digest: DigestHeader | DigestData}).Put(&ic)
	if want := unhex(t, "00 00 80 00 80000000 0000 00 03 00000000"); string(ic[:16]) != string(want) || ic[127] != 0 {
		t.Fatalf("ICReq % x", ic[:16])
	}
	var req ICReq
	if err := req.Parse(&ic); err != nil || req.Digest != 3 {
		t.Fatalf("ICReq Parse %+v %v", req, err)
	}
	(&ICResp{MaxH2CData: 0x400000}).Put(&ic)
	if want := unhex(t, "01 00 80 00 80000000 0000 00 00 00004000"); string(ic[:16]) != string(want) {
		t.Fatalf("ICResp % x", ic[:16])
	}
	if err := req.Parse(&ic); err == nil {
		t.Fatal("ICResp parsed as ICReq")
	}

	// The Linux host's admin Connect: 1024 bytes in-capsule, without and
	// with digests.
	cmd := nvme.Command{Opcode: nvme.OpFabrics, Flags: nvme.FlagSGL, SGL: nvme.SGL{Length: 1024, Type: nvme.SGLDataBlockOffset}}
	nvme.Connect{SQSize: 31}.Encode(&cmd)
	for _, tc := range []struct {
		f    framing
		want string
	}{
		{framing{}, "04 00 48 48 48040000"},
		{framing{true, true}, "04 03 48 4c 50040000"},
	} {
		var b [CmdSize]byte
		p := CapsuleCmd{Header: tc.f.layout(TypeCapsuleCmd, 1024), Cmd: cmd}
		p.Put(&b)
		if want := unhex(t, tc.want); string(b[:8]) != string(want) || b[8] != 0x7F || b[8+4] != 1 || b[8+39] != 1 {
			t.Fatalf("CapsuleCmd %+v: % x", tc.f, b[:16])
		}
		var back CapsuleCmd
		if err := back.Parse(&b); err != nil || back != p {
			t.Fatalf("CapsuleCmd Parse %+v %v", back, err)
		}
	}

	var h [HeaderSize]byte
	resp := CapsuleResp{Header: framing{hdgst: true}.layout(TypeCapsuleResp, 0), Cpl: nvme.Completion{Result: 1, CID: 5}}
	resp.Put(&h)
	if want := unhex(t, "05 01 18 00 1c000000 01000000 00000000 0000 0000 0500 0000"); string(h[:]) != string(want) {
		t.Fatalf("CapsuleResp % x", h[:])
	}
	d := Data{Header: framing{}.layout(TypeC2HData, 4096), CCCID: 0x1003, DataL: 4096}
	d.Flags |= FlagLast
	d.Put(&h)
	if want := unhex(t, "07 04 18 18 18100000 0310 0000 00000000 00100000 00000000"); string(h[:]) != string(want) {
		t.Fatalf("C2HData % x", h[:])
	}
	d = Data{Header: framing{false, true}.layout(TypeH2CData, 8192), CCCID: 2, TTag: 7, DataO: 8192, DataL: 8192}
	d.Put(&h)
	if want := unhex(t, "06 02 18 18 1c200000 0200 0700 00200000 00200000 00000000"); string(h[:]) != string(want) {
		t.Fatalf("H2CData % x", h[:])
	}
	r := R2T{Header: framing{}.layout(TypeR2T, 0), CCCID: 2, TTag: 7, R2TO: 0, R2TL: 0x20000}
	r.Put(&h)
	if want := unhex(t, "09 00 18 00 18000000 0200 0700 00000000 00000200 00000000"); string(h[:]) != string(want) {
		t.Fatalf("R2T % x", h[:])
	}
	var rb R2T
	if err := rb.Parse(&h); err != nil || rb != r {
		t.Fatalf("R2T Parse %+v %v", rb, err)
	}
	term := TermReq{Header: Header{Type: TypeC2HTermReq, PDO: 24, PLen: 24 + 8}, FES: FESInvalidField, FEI: 2}
	term.Put(&h)
	if want := unhex(t, "03 00 18 18 20000000 0100 02000000 00000000 0000000000"); string(h[:23]) != string(want) {
		t.Fatalf("TermReq % x", h[:])
	}
	var tb TermReq
	if err := tb.Parse(&h); err != nil || !cmp.Equal(tb, term) {
		t.Fatalf("TermReq Parse %+v %v", tb, err)
	}
	// A header of one type is refused by the parser of another.
	if err := (&Data{}).Parse(&h); err == nil {
		t.Fatal("TermReq parsed as Data")
	}
}
