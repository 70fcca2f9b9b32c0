package aoe

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var (
	initiatorMAC = MAC{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}
	targetMAC    = MAC{0x02, 0x00, 0x00, 0x00, 0xAE, 0x01}
)

// Golden frames, laid out by hand from AoEr11 and what Linux's aoe driver
// sends (aoe-facts.md sections 2 to 6).
func TestGoldenHeaderAndATA(t *testing.T) {
	// READ SECTORS EXT of 2 sectors at LBA 0x123456789A, tag 0x0001ABCD.
	frame := unhex(t, `
		02 00 00 00 ae 01   52 54 00 12 34 56   88 a2
		10 00   00 00   01   00   00 01 ab cd
		40 00 02 24   9a 78 56 34 12 00   00 00`)
	var h Header
	if err := ParseHeader(frame, &h); err != nil {
		t.Fatal(err)
	}
	wantH := Header{Dst: targetMAC, Src: initiatorMAC, Version: 1, Major: 0, Minor: 1, Command: CmdATA, Tag: 0x0001ABCD}
	if diff := cmp.Diff(wantH, h); diff != "" {
		t.Fatalf("header (-want +got):\n%s", diff)
	}
	var a ATAArg
	if err := ParseATAArg(frame, &a); err != nil {
		t.Fatal(err)
	}
	wantA := ATAArg{Flags: ATAExtended, SectorCount: 2, CmdStatus: 0x24, LBA: 0x123456789A}
	if diff := cmp.Diff(wantA, a); diff != "" {
		t.Fatalf("ATA argument (-want +got):\n%s", diff)
	}
	out := make([]byte, ATADataOffset)
	h.Put(out)
	a.Put(out)
	if !bytes.Equal(out, frame) {
		t.Fatalf("re-encoded\n%x\nwant\n%x", out, frame)
	}
}

func TestGoldenConfigQuery(t *testing.T) {
	// Linux's broadcast query: shelf 0xFFFF, slot 0xFF, tag 0, argument
	// all zero (version nibble 0).
	query := unhex(t, `
		ff ff ff ff ff ff   52 54 00 12 34 56   88 a2
		10 00   ff ff   ff   01   00 00 00 00
		00 00 00 00 00 00 00 00`)
	var h Header
	var c ConfigArg
	if err := ParseHeader(query, &h); err != nil {
		t.Fatal(err)
	}
	if err := ParseConfigArg(query, &c); err != nil {
		t.Fatal(err)
	}
	if h.Major != BroadcastMajor || h.Minor != BroadcastMinor || h.Command != CmdQueryConfig || c.Cmd != ConfigRead || len(c.String) != 0 {
		t.Fatalf("parsed %+v %+v", h, c)
	}
	// A reply: bufcnt 16, firmware 0x4016, 2 sectors, version 1, read,
	// string "hi".
	want := unhex(t, `
		52 54 00 12 34 56   02 00 00 00 ae 01   88 a2
		18 00   00 00   01   01   00 00 00 00
		00 10   40 16   02   10   00 02   68 69`)
	h.Reply(targetMAC, 0, 1)
	b := make([]byte, HeaderSize)
	h.Put(b)
	b, err := (&ConfigArg{BufferCount: 16, Firmware: 0x4016, SectorCount: 2, Version: 1, String: []byte("hi")}).Append(b)
	if err != nil || !bytes.Equal(b, want) {
		t.Fatalf("reply %x (%v)\nwant  %x", b, err, want)
	}
}

func TestGoldenMaskAndReserve(t *testing.T) {
	mask := unhex(t, `00 01 00 02   00 01 52 54 00 12 34 56   00 02 02 00 00 00 ae 01`)
	want := MaskArg{Cmd: MaskEdit, Directives: []Directive{{DirAdd, initiatorMAC}, {DirDelete, targetMAC}}}
	frame := append(make([]byte, HeaderSize), mask...)
	var m MaskArg
	if err := ParseMaskArg(frame, &m); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, m); diff != "" {
		t.Fatalf("mask (-want +got):\n%s", diff)
	}
	if b, _ := want.Append(nil); !bytes.Equal(b, mask) {
		t.Fatalf("mask encoded %x, want %x", b, mask)
	}
	res := unhex(t, `01 02   52 54 00 12 34 56   02 00 00 00 ae 01`)
	wantR := ReserveArg{Cmd: ReserveSet, MACs: []MAC{initiatorMAC, targetMAC}}
	var r ReserveArg
	padded := append(append(make([]byte, HeaderSize), res...), make([]byte, 20)...)
	if err := ParseReserveArg(padded, &r); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantR, r); diff != "" {
		t.Fatalf("reserve (-want +got):\n%s", diff)
	}
	if b, _ := wantR.Append(nil); !bytes.Equal(b, res) {
		t.Fatalf("reserve encoded %x, want %x", b, res)
	}
}

func TestParseErrors(t *testing.T) {
	long := make([]byte, HeaderSize+ConfigArgSize)
	long[HeaderSize+6], long[HeaderSize+7] = 0x04, 0x01 // 1025 bytes
	notAoE := make([]byte, HeaderSize)
	for _, tc := range []struct {
		name string
		err  error
		fn   func() error
	}{
		{"short header", ErrShort, func() error { var h Header; return ParseHeader(make([]byte, 23), &h) }},
		{"not aoe", ErrNotAoE, func() error { var h Header; return ParseHeader(notAoE, &h) }},
		{"short ata", ErrShort, func() error { var a ATAArg; return ParseATAArg(make([]byte, 35), &a) }},
		{"config over 1024", ErrTooLong, func() error { var c ConfigArg; return ParseConfigArg(long, &c) }},
		{"config string past frame", ErrShort, func() error {
			b := make([]byte, HeaderSize+ConfigArgSize+1)
			b[HeaderSize+7] = 2
			var c ConfigArg
			return ParseConfigArg(b, &c)
		}},
		{"mask directives past frame", ErrShort, func() error {
			b := make([]byte, HeaderSize+4+7)
			b[HeaderSize+3] = 1
			var m MaskArg
			return ParseMaskArg(b, &m)
		}},
		{"reserve macs past frame", ErrShort, func() error {
			b := make([]byte, HeaderSize+2+5)
			b[HeaderSize+1] = 1
			var r ReserveArg
			return ParseReserveArg(b, &r)
		}},
	} {
		if err := tc.fn(); !errors.Is(err, tc.err) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.err)
		}
	}
}

func TestStrings(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{CmdQueryConfig.String(), "QueryConfig"},
		{Command(0xF3).String(), "Vendor(0xf3)"},
		{(FlagResponse | FlagError).String(), "RE"},
		{(ATAExtended | ATAWrite).String(), "EW"},
		{ErrTargetReserved.Error(), "aoe: target is reserved"},
		{Error(9).Error(), "aoe: error 9"},
		{ConfigForceSet.String(), "ForceSet"},
		{targetMAC.String(), "02:00:00:00:ae:01"},
	} {
		if tc.got != tc.want {
			t.Errorf("%q, want %q", tc.got, tc.want)
		}
	}
}

func genMAC(t *rapid.T, label string) MAC {
	var m MAC
	copy(m[:], rapid.SliceOfN(rapid.Byte(), 6, 6).Draw(t, label))
	return m
}

func TestRapidHeaderRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h := Header{Dst: genMAC(t, "dst"), Src: genMAC(t, "src"),
			Version: rapid.Uint8Range(0, 15).Draw(t, "ver"), Flags: Flags(rapid.Uint8Range(0, 15).Draw(t, "flags")),
			Error: Error(rapid.Uint8().Draw(t, "err")), Major: rapid.Uint16().Draw(t, "major"),
			Minor: rapid.Uint8().Draw(t, "minor"), Command: Command(rapid.Uint8().Draw(t, "cmd")), Tag: rapid.Uint32().Draw(t, "tag")}
		a := ATAArg{Flags: ATAFlags(rapid.Uint8().Draw(t, "aflags")), ErrFeature: rapid.Uint8().Draw(t, "feat"),
			SectorCount: rapid.Uint8().Draw(t, "scnt"), CmdStatus: rapid.Uint8().Draw(t, "op"), LBA: rapid.Uint64Range(0, 1<<48-1).Draw(t, "lba")}
		b := make([]byte, ATADataOffset)
		h.Put(b)
		a.Put(b)
		var h2 Header
		var a2 ATAArg
		if err := ParseHeader(b, &h2); err != nil {
			t.Fatal(err)
		}
		if err := ParseATAArg(b, &a2); err != nil {
			t.Fatal(err)
		}
		if h2 != h || a2 != a {
			t.Fatalf("round trip %+v %+v -> %+v %+v", h, a, h2, a2)
		}
	})
}

func TestRapidArgRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		hdr := make([]byte, HeaderSize)
		c := ConfigArg{BufferCount: rapid.Uint16().Draw(t, "bufcnt"), Firmware: rapid.Uint16().Draw(t, "fw"),
			SectorCount: rapid.Uint8().Draw(t, "scnt"), Version: rapid.Uint8Range(0, 15).Draw(t, "ver"),
			Cmd: ConfigCmd(rapid.Uint8Range(0, 15).Draw(t, "ccmd")), String: rapid.SliceOfN(rapid.Byte(), 0, MaxConfigString).Draw(t, "s")}
		b, err := c.Append(hdr)
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, make([]byte, rapid.IntRange(0, 30).Draw(t, "pad"))...)
		var c2 ConfigArg
		if err := ParseConfigArg(b, &c2); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(c, c2, cmp.Comparer(bytes.Equal)); diff != "" {
			t.Fatalf("config (-in +out):\n%s", diff)
		}
		m := MaskArg{Cmd: MaskCmd(rapid.Uint8().Draw(t, "mcmd")), Error: MaskError(rapid.Uint8().Draw(t, "merr"))}
		for i := range rapid.IntRange(0, 40).Draw(t, "ndir") {
			m.Directives = append(m.Directives, Directive{DirCmd(rapid.Uint8().Draw(t, "dcmd")), genMAC(t, "dmac"+itoa(i))})
		}
		b, _ = m.Append(hdr[:HeaderSize:HeaderSize])
		var m2 MaskArg
		if err := ParseMaskArg(b, &m2); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(m, m2, cmp.Comparer(func(x, y []Directive) bool { return len(x) == len(y) && (len(x) == 0 || cmp.Equal(x, y)) })); diff != "" {
			t.Fatalf("mask (-in +out):\n%s", diff)
		}
		r := ReserveArg{Cmd: ReserveCmd(rapid.Uint8().Draw(t, "rcmd"))}
		for i := range rapid.IntRange(0, 40).Draw(t, "nmac") {
			r.MACs = append(r.MACs, genMAC(t, "rmac"+itoa(i)))
		}
		b, _ = r.Append(hdr[:HeaderSize:HeaderSize])
		var r2 ReserveArg
		if err := ParseReserveArg(b, &r2); err != nil {
			t.Fatal(err)
		}
		if len(r.MACs) != len(r2.MACs) || r.Cmd != r2.Cmd || (len(r.MACs) > 0 && !cmp.Equal(r.MACs, r2.MACs)) {
			t.Fatalf("reserve %+v -> %+v", r, r2)
		}
	})
}

// FuzzParse parses arbitrary frames with every argument decoder: none may
// panic, and whatever parses must encode back to the bytes it came from
// (up to the fields the encoders zero: reserved bytes and padding).
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, frame []byte) {
		var h Header
		if ParseHeader(frame, &h) != nil {
			return
		}
		b := make([]byte, HeaderSize)
		h.Put(b)
		if !bytes.Equal(b, frame[:HeaderSize]) {
			t.Fatalf("header %x re-encoded as %x", frame[:HeaderSize], b)
		}
		var a ATAArg
		if ParseATAArg(frame, &a) == nil {
			out := make([]byte, ATADataOffset)
			a.Put(out)
			if !bytes.Equal(out[HeaderSize:ATADataOffset-2], frame[HeaderSize:ATADataOffset-2]) {
				t.Fatalf("ATA argument changed")
			}
		}
		var c ConfigArg
		if ParseConfigArg(frame, &c) == nil {
			out, err := c.Append(nil)
			if err != nil || !bytes.Equal(out, frame[HeaderSize:HeaderSize+len(out)]) {
				t.Fatalf("config argument changed: %v", err)
			}
		}
		var m MaskArg
		if ParseMaskArg(frame, &m) == nil {
			out, _ := m.Append(nil)
			if len(out) != 4+8*len(m.Directives) {
				t.Fatalf("mask length %d for %d directives", len(out), len(m.Directives))
			}
		}
		var r ReserveArg
		if ParseReserveArg(frame, &r) == nil {
			out, _ := r.Append(nil)
			if !bytes.Equal(out, frame[HeaderSize:HeaderSize+len(out)]) {
				t.Fatalf("reserve argument changed")
			}
		}
	})
}
