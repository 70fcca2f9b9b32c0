package checksum

import (
	"math/bits"
)

// Checksum returns the 16-bit ones' complement sum of b added to initial, as
// RFC 1071 defines it: b is read as a sequence of big-endian 16-bit words, a
// trailing odd byte is the high byte of a last word whose low byte is zero,
// and carries out of bit 15 are added back in (end-around carry).
//
// The result is folded to 16 bits and NOT complemented: a header's checksum
// field is ^Checksum(...) computed with the field zeroed. This is the contract
// of gVisor's pkg/tcpip/checksum.Checksum, so sums from either can be mixed.
// The result is 0 only if initial is 0 and every byte of b is 0; any other
// sum congruent to 0 is returned as 0xffff.
//
// Checksum does not allocate and does not retain b. It is safe for concurrent
// use.
func Checksum(b []byte, initial uint16) uint16 {
	// initial byte-swapped is its little-endian partial (see finish).
	return checksum(b, uint64(bits.ReverseBytes16(initial)))
}

// Combine returns the ones' complement sum of two partial sums: the checksum
// of the concatenation of two byte strings, the first of even length, is
// Combine of their checksums. When the first part has odd length use
// CombineOdd.
func Combine(a, b uint16) uint16 {
	s := uint32(a) + uint32(b)
	return uint16(s + s>>16)
}

// CombineOdd is Combine for when the part summed into a has an odd length:
// b's bytes then sit in the other halves of the 16-bit words, which in ones'
// complement arithmetic is the same as swapping the two bytes of b (RFC 1071
// section 2(B), byte order independence). So
//
//	Checksum(append(x, y...), 0) == CombineOdd(Checksum(x, 0), Checksum(y, 0))
//
// whenever len(x) is odd.
func CombineOdd(a, b uint16) uint16 {
	return Combine(a, bits.ReverseBytes16(b))
}

// CombineAt joins the partial sum b of a piece of data that starts at byte
// offset off (relative to where the data summed into a starts) onto a: it is
// Combine when off is even and CombineOdd when off is odd. It is the general
// form for joining sums of chunks computed in parallel or out of order.
// A negative off is treated by its parity, like any other.
func CombineAt(a, b uint16, off int) uint16 {
	if off&1 != 0 {
		b = bits.ReverseBytes16(b)
	}
	return Combine(a, b)
}

// Update returns the new value of a checksum field after one 16-bit word it
// covers changes from old to new, without touching the rest of the data: RFC
// 1624 equation 3, HC' = ~(~HC + ~m + m').
//
// field, old and new are the values as they appear on the wire read as
// big-endian words (field is the complemented checksum, as stored), and the
// changed word must start at an even offset of the covered data. The result
// equals recomputing the field from scratch in every case but one: when all
// the covered data (the field aside) is zero after the change, recomputation
// gives 0xffff and Update gives 0x0000, the two forms of ones' complement
// zero. (Equation 3 is RFC 1624's correction of RFC 1141, whose update could
// give 0xffff where recomputation gives 0x0000; an IPv4 header is never all
// zero, so for it the two always agree.)
func Update(field, old, new uint16) uint16 {
	return ^Combine(Combine(^field, ^old), new)
}

// Update32 is Update for a 32-bit value that starts at an even offset and
// changes from old to new, such as an IPv4 address rewritten by a NAT (which
// RFC 3022 requires to adjust both the IP and the TCP/UDP checksum).
func Update32(field uint16, old, new uint32) uint16 {
	s := Combine(^field, ^uint16(old>>16))
	s = Combine(s, ^uint16(old))
	s = Combine(s, uint16(new>>16))
	s = Combine(s, uint16(new))
	return ^s
}

// Verify reports whether b, which includes its own checksum field, sums with
// initial to 0xffff: the receiver's check of RFC 1071 section 1 ("if the
// result is all 1 bits, the check succeeds"). For TCP and UDP pass the
// pseudo-header sum (PseudoHeaderIPv4 or PseudoHeaderIPv6) as initial. A UDP
// over IPv4 datagram whose checksum field is zero carries no checksum (RFC 768);
// Verify does not special-case that, the caller must.
func Verify(b []byte, initial uint16) bool {
	return Checksum(b, initial) == 0xffff
}

// Protocol numbers for the pseudo-header sums (IANA "Assigned Internet Protocol
// Numbers"; also the IPv6 Next Header values).
const (
	ProtocolTCP = 6  // RFC 9293
	ProtocolUDP = 17 // RFC 768
)

// PseudoHeaderIPv4 returns the sum of the IPv4 pseudo-header that the TCP
// (RFC 9293 section 3.1) and UDP (RFC 768) checksums cover: source address,
// destination address, a zero byte, the protocol number and the TCP or UDP
// length (header plus data, in bytes). Pass it as initial to Checksum over the
// TCP or UDP header and payload.
func PseudoHeaderIPv4(src, dst [4]byte, protocol uint8, length uint16) uint16 {
	s := uint32(src[0])<<8 | uint32(src[1])
	s += uint32(src[2])<<8 | uint32(src[3])
	s += uint32(dst[0])<<8 | uint32(dst[1])
	s += uint32(dst[2])<<8 | uint32(dst[3])
	s += uint32(protocol)
	s += uint32(length)
	return fold32(s)
}

// PseudoHeaderIPv6 returns the sum of the IPv6 pseudo-header of RFC 8200
// section 8.1: source address, destination address, the 32-bit upper-layer
// packet length, three zero bytes and the next header value (ProtocolTCP or
// ProtocolUDP). The addresses are those the upper layer sees: with a routing
// header, dst is the final destination.
func PseudoHeaderIPv6(src, dst [16]byte, protocol uint8, length uint32) uint16 {
	var s uint32
	for i := 0; i < 16; i += 2 {
		s += uint32(src[i])<<8 | uint32(src[i+1])
		s += uint32(dst[i])<<8 | uint32(dst[i+1])
	}
	s += length >> 16
	s += length & 0xffff
	s += uint32(protocol)
	return fold32(s)
}

// errShortDst is CopyAndChecksum's panic value.
const errShortDst = "checksum: CopyAndChecksum: dst shorter than src"

// The fast paths all compute a "little-endian partial": the ones' complement
// sum, modulo 2^64-1, of the data read as little-endian words (any width: since
// 2^16-1 divides 2^64-1 the residue modulo 2^16-1 is the same). It is 0 only
// for all-zero data. finish folds it to 16 bits and swaps the bytes, which by
// RFC 1071's byte order independence turns it into the big-endian sum.

// add64 is the ones' complement (end-around carry) sum of a and b.
func add64(a, b uint64) uint64 {
	s, c := bits.Add64(a, b, 0)
	return s + c // c == 1 implies s <= 2^64-2: no second carry
}

func fold32(s uint32) uint16 {
	s = s>>16 + s&0xffff // at most 0x1fffe
	s += s >> 16
	return uint16(s)
}

// finish turns a little-endian partial into the folded big-endian sum. Each
// step adds a value to itself rotated by half its width: the upper half of
// the result is the ones' complement sum of the two halves (the carry out of
// the lower half is the end-around carry), and it is 0 only if both are.
func finish(p uint64) uint16 {
	p += bits.RotateLeft64(p, 32)
	s := uint32(p >> 32)
	s += bits.RotateLeft32(s, 16)
	return bits.ReverseBytes16(uint16(s >> 16))
}
