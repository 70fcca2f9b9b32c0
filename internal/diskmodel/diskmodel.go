package diskmodel

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"testing"
)

// SectorSize is the size of the sectors the model tracks.
const SectorSize = 512

// Model holds, for each sector of a disk, the generations it may hold.
type Model struct {
	may [][]uint64
	gen uint64
}

// New returns the model of a zeroed disk of n sectors.
func New(n int) *Model {
	m := &Model{may: make([][]uint64, n)}
	for i := range m.may {
		m.may[i] = []uint64{0}
	}
	return m
}

// Sectors returns the disk's size in sectors.
func (m *Model) Sectors() uint64 { return uint64(len(m.may)) }

// Next returns a new generation.
func (m *Model) Next() uint64 {
	m.gen++
	return m.gen
}

// Done records that n sectors from lba hold generation gen (0: zeroes).
func (m *Model) Done(lba, n, gen uint64) {
	for i := range n {
		m.may[lba+i] = []uint64{gen}
	}
}

// Maybe records that n sectors from lba may hold generation gen as well as
// what they may hold already.
func (m *Model) Maybe(lba, n, gen uint64) {
	for i := range n {
		if s := &m.may[lba+i]; !slices.Contains(*s, gen) {
			*s = append(*s, gen)
		}
	}
}

// Check returns an error unless every sector of p, the disk's from lba on,
// is intact and holds a generation it may hold.
func (m *Model) Check(p []byte, lba uint64) error {
	for i := range uint64(len(p) / SectorSize) {
		s := p[i*SectorSize : (i+1)*SectorSize]
		gen := binary.LittleEndian.Uint64(s)
		if !intact(s, lba+i, gen) || !slices.Contains(m.may[lba+i], gen) {
			return fmt.Errorf("diskmodel: sector %d holds generation %d (intact %v), may hold %v",
				lba+i, gen, intact(s, lba+i, gen), m.may[lba+i])
		}
	}
	return nil
}

// Fill fills p, sectors from lba on, with generation gen's pattern.
func Fill(p []byte, lba, gen uint64) {
	for i := range uint64(len(p) / SectorSize) {
		fillSector(p[i*SectorSize:(i+1)*SectorSize], lba+i, gen)
	}
}

func fillSector(s []byte, lba, gen uint64) {
	if gen == 0 {
		clear(s)
		return
	}
	binary.LittleEndian.PutUint64(s, gen)
	binary.LittleEndian.PutUint64(s[8:], lba)
	for i := 16; i < len(s); i++ {
		s[i] = byte(uint64(i)*7 + gen*13 + lba)
	}
}

// intact reports whether s is sector lba's pattern of generation gen.
func intact(s []byte, lba, gen uint64) bool {
	var want [SectorSize]byte
	fillSector(want[:], lba, gen)
	return string(s) == string(want[:])
}

// Workers runs work(w) for w from 0 to n-1 at once, each returning how
// many of its requests failed as injected and the first error of its own,
// and fails t with every error. It fails t too if a worker met no
// failure: a fault test whose faults were never injected proves nothing.
func Workers(t testing.TB, n int, work func(w int) (failed int, err error)) {
	t.Helper()
	failed := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() { failed[w], errs[w] = work(w) })
	}
	wg.Wait()
	for w, err := range errs {
		if err != nil {
			t.Errorf("worker %d: %v", w, err)
		} else if failed[w] == 0 {
			t.Errorf("worker %d met no injected failure", w)
		}
	}
	t.Logf("failed requests per worker: %v", failed)
}
