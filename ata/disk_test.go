package ata_test

import (
	"context"
	"errors"
	"sort"
)

var errInjected = errors.New("memdisk: injected I/O error")

// memDisk is the test backend: a byte slice with injectable per-sector
// read and write failures, a flush counter and Trim that zeroes.
type memDisk struct {
	data      []byte
	sector    int64
	badRead   map[int64]bool
	badWrite  map[int64]bool
	failFlush bool
	failTrim  bool
	flushes   int
	trims     [][2]int64 // byte offset, length
	writes    [][2]int64 // byte offset, length of every WriteAt
}

func newMemDisk(sectors, sectorSize int) *memDisk {
	return &memDisk{data: make([]byte, sectors*sectorSize), sector: int64(sectorSize), badRead: map[int64]bool{}, badWrite: map[int64]bool{}}
}

// firstBad returns the byte count before the first bad sector in
// [off, off+n), or n.
func (m *memDisk) firstBad(bad map[int64]bool, off, n int64) int64 {
	if len(bad) == 0 {
		return n
	}
	keys := make([]int64, 0, len(bad))
	for k := range bad {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for _, s := range keys {
		b := s * m.sector
		if b+m.sector > off && b < off+n {
			return max(0, b-off)
		}
	}
	return n
}

func (m *memDisk) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off > int64(len(m.data)) {
		return 0, errInjected
	}
	good := m.firstBad(m.badRead, off, int64(len(p)))
	n := copy(p[:good], m.data[off:])
	if n < len(p) {
		return n, errInjected
	}
	return n, nil
}

func (m *memDisk) WriteAt(p []byte, off int64) (int, error) {
	m.writes = append(m.writes, [2]int64{off, int64(len(p))})
	if off < 0 || off+int64(len(p)) > int64(len(m.data)) {
		return 0, errInjected
	}
	good := m.firstBad(m.badWrite, off, int64(len(p)))
	n := copy(m.data[off:], p[:good])
	if n < len(p) {
		return n, errInjected
	}
	return n, nil
}

func (m *memDisk) Flush(context.Context) error {
	m.flushes++
	if m.failFlush {
		return errInjected
	}
	return nil
}

func (m *memDisk) Trim(_ context.Context, off, length int64) error {
	if m.failTrim {
		return errInjected
	}
	m.trims = append(m.trims, [2]int64{off, length})
	clear(m.data[off : off+length])
	return nil
}

func (m *memDisk) Size() int64 { return int64(len(m.data)) }

// nullDisk reads zeros and discards writes: a backend for capacities too
// large to hold in memory.
type nullDisk struct{}

func (nullDisk) ReadAt(p []byte, off int64) (int, error)  { clear(p); return len(p), nil }
func (nullDisk) WriteAt(p []byte, off int64) (int, error) { return len(p), nil }
func (nullDisk) Trim(context.Context, int64, int64) error { return nil }
