package checksum_test

import (
	"encoding/binary"
	"fmt"

	"github.com/nhdkit/nhd/checksum"
)

// The worked example of RFC 1071 section 3.
func ExampleChecksum() {
	b := []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}
	fmt.Printf("sum %#04x, checksum field %#04x\n", checksum.Checksum(b, 0), ^checksum.Checksum(b, 0))
	// Output: sum 0xddf2, checksum field 0x220d
}

// Filling in an IPv4 header checksum: sum the header with the field zero and
// store the complement.
func ExampleChecksum_ipv4Header() {
	h := []byte{
		0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
		0x00, 0x00, // checksum, zero while computing it
		0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
	}
	binary.BigEndian.PutUint16(h[10:], ^checksum.Checksum(h, 0))
	fmt.Printf("field %#04x, verifies %v\n", binary.BigEndian.Uint16(h[10:]), checksum.Verify(h, 0))
	// Output: field 0xb861, verifies true
}

// Checking a received TCP segment: the pseudo-header sum is the initial value.
func ExamplePseudoHeaderIPv4() {
	src, dst := [4]byte{172, 22, 104, 109}, [4]byte{74, 125, 159, 103}
	segment := []byte{
		0xaf, 0x1f, 0x00, 0x50, 0xe8, 0x33, 0x8b, 0x62, 0xfc, 0x13, 0xda, 0x66,
		0x80, 0x10, 0x00, 0x5c, 0x37, 0xa6, 0x00, 0x00, 0x01, 0x01, 0x08, 0x0a,
		0x04, 0xb8, 0x66, 0xf7, 0x4a, 0xdd, 0x90, 0x45,
	}
	ph := checksum.PseudoHeaderIPv4(src, dst, checksum.ProtocolTCP, uint16(len(segment)))
	fmt.Println("valid:", checksum.Verify(segment, ph))
	segment[30] ^= 0x04 // one bit flipped in transit
	fmt.Println("valid after a bit flip:", checksum.Verify(segment, ph))
	// Output:
	// valid: true
	// valid after a bit flip: false
}

// Sums of pieces computed separately (in parallel, or as they arrive) are
// joined by their offsets; a piece at an odd offset is byte-swapped.
func ExampleCombineAt() {
	data := []byte("an odd split of a payload")
	whole := checksum.Checksum(data, 0)
	a := checksum.Checksum(data[:7], 0) // 7 bytes: the next piece starts at an odd offset
	b := checksum.Checksum(data[7:], 0)
	fmt.Println(checksum.CombineAt(a, b, 7) == whole, checksum.CombineOdd(a, b) == whole, checksum.Combine(a, b) == whole)
	// Output: true true false
}

// A Checksummer as the tap of a DMA engine: each chunk is copied and summed
// in one pass, whatever its length.
func ExampleChecksummer() {
	payload := []byte("sector data moved in uneven chunks by a DMA engine")
	dst := make([]byte, len(payload))
	c := checksum.New(0)
	for off := 0; off < len(payload); {
		n := min(7, len(payload)-off)
		c.CopyAndWrite(dst[off:], payload[off:off+n])
		off += n
	}
	fmt.Printf("%#04x %v %x\n", c.Sum16(), c.Sum16() == checksum.Checksum(payload, 0), c.Sum(nil))
	// Output: 0x4da1 true 4da1
}

func ExampleCopyAndChecksum() {
	src := []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}
	dst := make([]byte, len(src))
	sum := checksum.CopyAndChecksum(dst, src, 0)
	fmt.Printf("%#04x % x\n", sum, dst)
	// Output: 0xddf2 00 01 f2 03 f4 f5 f6 f7
}

// A router decrements the TTL and patches the header checksum with RFC 1624
// instead of summing the header again.
func ExampleUpdate() {
	h := []byte{
		0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
		0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
	}
	old := binary.BigEndian.Uint16(h[8:]) // TTL and protocol share a word
	h[8]--
	field := checksum.Update(binary.BigEndian.Uint16(h[10:]), old, binary.BigEndian.Uint16(h[8:]))
	binary.BigEndian.PutUint16(h[10:], field)
	fmt.Printf("%#04x %v\n", field, checksum.Verify(h, 0))
	// Output: 0xb961 true
}
