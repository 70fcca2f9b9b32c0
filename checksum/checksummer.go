package checksum

import (
	"encoding/binary"
	"errors"
	"hash"
	"math/bits"
)

// Size is the size of the sum a Checksummer appends in Sum, in bytes.
const Size = 2

// ErrInvalidState is returned by UnmarshalBinary for data that MarshalBinary
// did not produce.
var ErrInvalidState = errors.New("checksum: invalid Checksummer state")

// A Checksummer computes the Internet checksum of a stream written to it in
// pieces of any length: it carries the parity of the byte count across Write
// calls, so a chunk that starts at an odd offset has its bytes paired with the
// right halves of the 16-bit words. Writing b in any split gives the same sum
// as Checksum(b, initial). It implements hash.Hash (Sum appends the 2-byte
// big-endian sum), hash.Cloner, and encoding.BinaryMarshaler, BinaryAppender
// and BinaryUnmarshaler for saving and resuming a sum.
//
// A Checksummer is the tap a DMA engine calls once per chunk it moves: Write
// never fails, never allocates and does not retain the slice; CopyAndWrite
// moves and sums a chunk in one pass.
//
// A Checksummer is not safe for concurrent use; the zero value is ready to use
// with an initial sum of 0.
type Checksummer struct {
	initial uint16
	sum     uint16
	n       uint64
}

var (
	_ hash.Hash   = (*Checksummer)(nil)
	_ hash.Cloner = (*Checksummer)(nil)
)

// New returns a Checksummer whose sum starts at initial (0, or a
// pseudo-header sum from PseudoHeaderIPv4 or PseudoHeaderIPv6).
func New(initial uint16) *Checksummer {
	return &Checksummer{initial: initial, sum: initial}
}

// Write adds p to the sum. It always returns len(p), nil.
func (c *Checksummer) Write(p []byte) (int, error) {
	c.add(checksum(p, 0), len(p))
	return len(p), nil
}

// CopyAndWrite copies src into dst and adds src to the sum in one pass, like
// CopyAndChecksum, and returns len(src). It panics if len(dst) < len(src).
func (c *Checksummer) CopyAndWrite(dst, src []byte) int {
	if len(dst) < len(src) {
		panic("checksum: CopyAndWrite: dst shorter than src")
	}
	c.add(copyChecksum(dst[:len(src)], src, 0), len(src))
	return len(src)
}

func (c *Checksummer) add(s uint16, n int) {
	if c.n&1 != 0 {
		s = bits.ReverseBytes16(s)
	}
	c.sum = Combine(c.sum, s)
	c.n += uint64(n)
}

// Sum16 returns the sum so far, as Checksum would return it for everything
// written, started from initial. It does not change the state.
func (c *Checksummer) Sum16() uint16 { return c.sum }

// Len returns the number of bytes written since New or Reset.
func (c *Checksummer) Len() uint64 { return c.n }

// Sum appends the big-endian Sum16 to b and returns the result. It does not
// change the state. Note that it appends the sum, not its complement: the
// value to store in a checksum field is ^Sum16() computed with the field zero.
func (c *Checksummer) Sum(b []byte) []byte {
	return binary.BigEndian.AppendUint16(b, c.sum)
}

// Reset returns to the state New(initial) gave, keeping initial.
func (c *Checksummer) Reset() {
	c.sum, c.n = c.initial, 0
}

// Size returns 2.
func (c *Checksummer) Size() int { return Size }

// BlockSize returns 2: writes of even length never need the byte swap that
// joins a chunk starting at an odd offset (it is cheap either way).
func (c *Checksummer) BlockSize() int { return 2 }

// Clone returns an independent copy of c. The error is always nil.
func (c *Checksummer) Clone() (hash.Cloner, error) {
	d := *c
	return &d, nil
}

const (
	stateMagic = "nhdc"
	stateLen   = len(stateMagic) + 2 + 2 + 8
)

// AppendBinary appends c's state (16 bytes: a magic, the initial value, the
// sum and the byte count) to b. It never fails.
func (c *Checksummer) AppendBinary(b []byte) ([]byte, error) {
	b = append(b, stateMagic...)
	b = binary.BigEndian.AppendUint16(b, c.initial)
	b = binary.BigEndian.AppendUint16(b, c.sum)
	b = binary.BigEndian.AppendUint64(b, c.n)
	return b, nil
}

// MarshalBinary returns c's state, as AppendBinary appends it.
func (c *Checksummer) MarshalBinary() ([]byte, error) {
	return c.AppendBinary(make([]byte, 0, stateLen))
}

// UnmarshalBinary restores a state that MarshalBinary or AppendBinary
// produced. On error (ErrInvalidState) c is unchanged.
func (c *Checksummer) UnmarshalBinary(b []byte) error {
	if len(b) != stateLen || string(b[:len(stateMagic)]) != stateMagic {
		return ErrInvalidState
	}
	b = b[len(stateMagic):]
	c.initial = binary.BigEndian.Uint16(b[0:])
	c.sum = binary.BigEndian.Uint16(b[2:])
	c.n = binary.BigEndian.Uint64(b[4:])
	return nil
}
