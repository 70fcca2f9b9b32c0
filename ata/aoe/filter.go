package aoe

import "errors"

// bpfInsn is one classic BPF instruction (struct sock_filter in Linux's
// include/uapi/linux/filter.h): opcode, jump offsets if true and if
// false (relative to the next instruction), and the constant k.
type bpfInsn struct {
	Code   uint16
	JT, JF uint8
	K      uint32
}

// The classic BPF opcodes the address filter uses.
const (
	bpfLdhAbs  = 0x28 // A = 16-bit word at packet offset k (big-endian)
	bpfLdbAbs  = 0x30 // A = byte at packet offset k
	bpfJeqK    = 0x15 // pc += A == k ? jt : jf
	bpfJsetK   = 0x45 // pc += A&k != 0 ? jt : jf
	bpfRetK    = 0x06 // accept k bytes of the packet (0: drop it)
	bpfMaxSnap = 1 << 18
)

// maxFilterAddresses bounds the program so that every jump fits the
// 8-bit offsets of classic BPF.
const maxFilterAddresses = 40

// errTooManyAddresses is returned for more addresses than one filter
// program can test.
var errTooManyAddresses = errors.New("aoe: too many addresses for a socket filter")

// addressFilter returns a classic BPF program that accepts exactly the
// frames a Target serving addrs does not ignore at once: EtherType
// 0x88A2, FlagResponse clear, and a major and minor that Matches one of
// addrs (broadcast values included). Frames too short to hold the
// minor are dropped (a load past the end ends a program with 0).
func addressFilter(addrs []Address) ([]bpfInsn, error) {
	if len(addrs) > maxFilterAddresses {
		return nil, errTooManyAddresses
	}
	per := 6 // instructions per address
	drop := 4 + per*len(addrs)
	accept := drop + 1
	jump := func(from, to int) uint8 { return uint8(to - from - 1) }
	p := []bpfInsn{
		{Code: bpfLdhAbs, K: offType},
		{Code: bpfJeqK, JF: jump(1, drop), K: EtherType},
		{Code: bpfLdbAbs, K: offVerFlags},
		{Code: bpfJsetK, JT: jump(3, drop), K: uint32(FlagResponse)},
	}
	for _, a := range addrs {
		b := len(p)
		p = append(p,
			bpfInsn{Code: bpfLdhAbs, K: offMajor},
			bpfInsn{Code: bpfJeqK, JT: 1, K: uint32(a.Shelf)},
			bpfInsn{Code: bpfJeqK, JF: jump(b+2, b+per), K: BroadcastMajor},
			bpfInsn{Code: bpfLdbAbs, K: offMinor},
			bpfInsn{Code: bpfJeqK, JT: jump(b+4, accept), K: uint32(a.Slot)},
			bpfInsn{Code: bpfJeqK, JT: jump(b+5, accept), K: BroadcastMinor},
		)
	}
	return append(p, bpfInsn{Code: bpfRetK, K: 0}, bpfInsn{Code: bpfRetK, K: bpfMaxSnap}), nil
}
