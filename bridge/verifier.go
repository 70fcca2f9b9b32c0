package bridge

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"

	"github.com/nhdkit/nhd/checksum"
)

// Host is the host's side of the commands Measure makes: the data it
// writes and the check of what it reads. Its work is part of every
// bridge command's time, as a host's work per command is; Measure does
// not count it in the bare backend's.
//
// Measure calls a Host from one goroutine. Offsets are multiples of the
// command size, and p is one command's data.
type Host interface {
	// Fill fills p with the data the host writes at off next. From the
	// call on, the host expects that data at off.
	Fill(p []byte, off int64)
	// Check checks that p, read at off, holds what was last written
	// there.
	Check(p []byte, off int64) error
	// Sum returns the Internet checksum (package checksum) of p, which
	// holds the data at off: a host that knows it without reading p
	// returns it at no cost.
	Sum(p []byte, off int64) uint16
}

// Verifier is a Host that writes data it can check cheaply: every block
// starts with a 16-byte stamp (its number and the generation of its
// data, one more on every Fill) followed by bytes from one of a few
// random patterns chosen by the stamp, so a read is checked with one
// comparison, a stale or misplaced block is caught by its stamp, and the
// checksum of a block is known from its stamp alone.
//
// Its memory is the patterns (8 blocks) and 4 bytes per block of the
// disk. A Verifier is safe for concurrent use by callers that touch
// different blocks.
type Verifier struct {
	block int
	gens  []uint32 // generation of each block's data, 0: never written
	pats  [][]byte // the patterns, a block each
	sums  []uint16 // checksum of each pattern past the stamp
}

const (
	numPatterns = 8
	stampSize   = 16
	stampMark   = 0x5a5a << 48 // in the generation's word, so zeros never pass
)

// NewVerifier returns a Verifier of a disk of size bytes in blocks of
// block bytes (at least 16), its patterns drawn from seed.
func NewVerifier(size int64, block int, seed uint64) *Verifier {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	v := &Verifier{block: block, gens: make([]uint32, size/int64(block)),
		pats: make([][]byte, numPatterns), sums: make([]uint16, numPatterns)}
	for i := range v.pats {
		b := make([]byte, block)
		for j := 0; j+8 <= len(b); j += 8 {
			binary.LittleEndian.PutUint64(b[j:], r.Uint64())
		}
		v.pats[i] = b
		v.sums[i] = checksum.Checksum(v.pats[i][stampSize:], 0)
	}
	return v
}

func (v *Verifier) pattern(blk uint64, gen uint32) int {
	return int((blk*7 + uint64(gen)) % numPatterns)
}

func putStamp(b []byte, blk uint64, gen uint32) {
	binary.LittleEndian.PutUint64(b, blk)
	binary.LittleEndian.PutUint64(b[8:], uint64(gen)|stampMark)
}

// Fill fills p with the next generation of the block at off.
func (v *Verifier) Fill(p []byte, off int64) {
	blk := uint64(off / int64(v.block))
	v.gens[blk]++
	gen := v.gens[blk]
	copy(p[stampSize:], v.pats[v.pattern(blk, gen)][stampSize:len(p)])
	putStamp(p, blk, gen)
}

// Sum returns the checksum of the block at off, from its stamp.
func (v *Verifier) Sum(p []byte, off int64) uint16 {
	blk := uint64(off / int64(v.block))
	gen := v.gens[blk]
	var st [stampSize]byte
	putStamp(st[:], blk, gen)
	return checksum.Combine(checksum.Checksum(st[:], 0), v.sums[v.pattern(blk, gen)])
}

// Check checks that p holds the block at off as last filled.
func (v *Verifier) Check(p []byte, off int64) error {
	blk := uint64(off / int64(v.block))
	gen := v.gens[blk]
	if gen == 0 {
		return fmt.Errorf("bridge: block %d read before it was written", blk)
	}
	gotBlk, gotGen := binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint64(p[8:])
	if gotBlk != blk || gotGen != uint64(gen)|stampMark {
		return fmt.Errorf("bridge: block %d: read stamp (block %d, generation %#x), want (block %d, generation %d)", blk, gotBlk, gotGen, blk, gen)
	}
	want := v.pats[v.pattern(blk, gen)][stampSize:len(p)]
	if bytes.Equal(p[stampSize:], want) {
		return nil
	}
	for i := range want {
		if p[stampSize+i] != want[i] {
			return fmt.Errorf("bridge: block %d generation %d: byte %d reads %#02x, want %#02x", blk, gen, stampSize+i, p[stampSize+i], want[i])
		}
	}
	return nil
}
