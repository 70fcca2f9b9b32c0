package aoe

import (
	"encoding/binary"
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// runBPF interprets the classic BPF instructions addressFilter emits, as
// Linux runs a socket filter: a load past the end of the packet ends the
// program with 0 (drop).
func runBPF(t fataler, prog []bpfInsn, pkt []byte) uint32 {
	var a uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		case bpfLdhAbs:
			if int(in.K)+2 > len(pkt) {
				return 0
			}
			a = uint32(binary.BigEndian.Uint16(pkt[in.K:]))
		case bpfLdbAbs:
			if int(in.K)+1 > len(pkt) {
				return 0
			}
			a = uint32(pkt[in.K])
		case bpfJeqK, bpfJsetK:
			hit := a == in.K
			if in.Code == bpfJsetK {
				hit = a&in.K != 0
			}
			if hit {
				pc += int(in.JT)
			} else {
				pc += int(in.JF)
			}
		case bpfRetK:
			return in.K
		default:
			t.Fatal(fmt.Sprintf("pc %d: opcode %#x", pc, in.Code))
		}
	}
	t.Fatal("program ran off its end")
	return 0
}

// wantAccept is what the filter must decide: what Target.handle does not
// drop at once.
func wantAccept(addrs []Address, pkt []byte) bool {
	var h Header
	if len(pkt) <= offMinor || binary.BigEndian.Uint16(pkt[offType:]) != EtherType || pkt[offVerFlags]&uint8(FlagResponse) != 0 {
		return false
	}
	h.Major, h.Minor = binary.BigEndian.Uint16(pkt[offMajor:]), pkt[offMinor]
	for _, a := range addrs {
		if Matches(h.Major, h.Minor, a.Shelf, a.Slot) {
			return true
		}
	}
	return false
}

func TestAddressFilterCases(t *testing.T) {
	addrs := []Address{{0, 1}, {7, 3}}
	prog, err := addressFilter(addrs)
	if err != nil {
		t.Fatal(err)
	}
	frame := func(flags Flags, major uint16, minor uint8) []byte {
		b := make([]byte, HeaderSize)
		(&Header{Version: Version, Flags: flags, Major: major, Minor: minor, Command: CmdATA}).Put(b)
		return b
	}
	for _, tc := range []struct {
		name string
		pkt  []byte
		want bool
	}{
		{"e0.1", frame(0, 0, 1), true},
		{"e7.3", frame(0, 7, 3), true},
		{"e0.3, another target's", frame(0, 0, 3), false},
		{"e7.1, shelf of one, slot of the other", frame(0, 7, 1), false},
		{"broadcast", frame(0, BroadcastMajor, BroadcastMinor), true},
		{"shelf 7, any slot", frame(0, 7, BroadcastMinor), true},
		{"any shelf, slot 3", frame(0, BroadcastMajor, 3), true},
		{"any shelf, slot 4", frame(0, BroadcastMajor, 4), false},
		{"a reply to e0.1", frame(FlagResponse, 0, 1), false},
		{"an error reply", frame(FlagResponse|FlagError, 0, 1), false},
		{"short", frame(0, 0, 1)[:offMinor], false},
		{"not AoE", append(frame(0, 0, 1)[:offType:offType], 0x08, 0x00, 0x10, 0, 0, 0, 1), false},
	} {
		got := runBPF(t, prog, tc.pkt) != 0
		if got != tc.want || wantAccept(addrs, tc.pkt) != tc.want {
			t.Errorf("%s: filter accepts %v, model %v, want %v", tc.name, got, wantAccept(addrs, tc.pkt), tc.want)
		}
	}
}

// The filter accepts exactly the frames the model says, for any list of
// addresses up to the limit and any header.
func TestAddressFilterProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, maxFilterAddresses).Draw(t, "n")
		shelves := rapid.SampledFrom([]uint16{0, 1, 7, 0x0FFE, BroadcastMajor})
		slots := rapid.SampledFrom([]uint8{0, 1, 3, 0xFE, BroadcastMinor})
		addrs := make([]Address, n)
		for i := range addrs {
			addrs[i] = Address{Shelf: shelves.Draw(t, "shelf"), Slot: slots.Draw(t, "slot")}
		}
		prog, err := addressFilter(addrs)
		if err != nil {
			t.Fatal(err)
		}
		pkt := make([]byte, HeaderSize)
		(&Header{
			Version: uint8(rapid.IntRange(0, 15).Draw(t, "version")),
			Flags:   Flags(rapid.IntRange(0, 15).Draw(t, "flags")),
			Major:   shelves.Draw(t, "major"), Minor: slots.Draw(t, "minor"),
		}).Put(pkt)
		if rapid.Bool().Draw(t, "other EtherType") {
			binary.BigEndian.PutUint16(pkt[offType:], 0x0800)
		}
		pkt = pkt[:rapid.IntRange(0, HeaderSize).Draw(t, "length")]
		if got, want := runBPF(t, prog, pkt) != 0, wantAccept(addrs, pkt); got != want {
			t.Fatalf("frame %x, addresses %v: filter accepts %v, want %v", pkt, addrs, got, want)
		}
	})
}

func TestAddressFilterLimit(t *testing.T) {
	if _, err := addressFilter(make([]Address, maxFilterAddresses+1)); err != errTooManyAddresses {
		t.Fatalf("%d addresses: err %v", maxFilterAddresses+1, err)
	}
}
