package dma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// SectorSize is the size of an ATA sector and of a FIFO block, in bytes.
const SectorSize = 512

// A Physical Region Descriptor, SFF-8038i (Bus Master IDE) section 1.2,
// 8 bytes, little-endian:
//
//	byte   3               2               1               0
//	     +---------------------------------------------------+-+
//	0    |      Memory Region Physical Base Address [31:1]   |0|
//	     +-+-----------------------------+-------------------+-+
//	4    |E|      reserved (0)           | Byte Count [15:1] |0|
//	     |O|                             | (0 means 64 KiB)  | |
//	     |T|                             |                   | |
//	     +-+-----------------------------+-------------------+-+
const (
	PRDSize       = 8          // bytes per entry
	prdAddrOff    = 0          // physical base address, dword
	prdCountOff   = 4          // byte count, bits 15:0 of the second dword
	prdEOT        = 1 << 31    // end of table, bit 31 of the second dword
	prdReserved   = 0x7fff0000 // bits 30:16 of the second dword
	prdCountMask  = 0xfffe     // what the bus master reads of the count
	MaxRegionSize = 1 << 16    // largest region (byte count 0)
	// MaxTableBytes is how much of a PRD table a bus master reads before
	// it gives up looking for the end-of-table bit (QEMU's limit, 512
	// entries).
	MaxTableBytes = 4096
	// MaxTableEntries is MaxTableBytes / PRDSize.
	MaxTableEntries = MaxTableBytes / PRDSize
)

// Errors from PRD encoding, decoding and validation. Errors returned by the
// functions wrap these with the entry index and the values involved.
var (
	// ErrOdd reports an odd base address or byte count: both must be even
	// (bit 0 is reserved).
	ErrOdd = errors.New("dma: PRD address or byte count is odd")
	// ErrReserved reports reserved bits 30:16 set in a PRD's second dword.
	ErrReserved = errors.New("dma: PRD reserved bits set")
	// ErrRegionSize reports a region of 0 or more than 64 KiB bytes.
	ErrRegionSize = errors.New("dma: PRD region size out of range 2..65536")
	// ErrBoundary reports a region that crosses a 64 KiB boundary, which
	// the bus master cannot do (Linux's ata_bmdma_fill_sg splits there).
	ErrBoundary = errors.New("dma: PRD region crosses a 64 KiB boundary")
	// ErrNoEOT reports a table without an end-of-table entry.
	ErrNoEOT = errors.New("dma: PRD table has no end-of-table entry")
	// ErrEarlyEOT reports an end-of-table bit before the last entry.
	ErrEarlyEOT = errors.New("dma: PRD end-of-table before the last entry")
	// ErrTableLength reports a table whose total byte count does not match
	// the command's transfer length.
	ErrTableLength = errors.New("dma: PRD table length does not match the transfer")
	// ErrTableSize reports a table of more than MaxTableEntries entries.
	ErrTableSize = errors.New("dma: PRD table too long")
	// ErrAddress reports a region outside the host memory given.
	ErrAddress = errors.New("dma: PRD region outside host memory")
)

// PRD is one Physical Region Descriptor: a region of host physical memory
// for the bus master to read or write.
type PRD struct {
	Addr uint32 // physical base address, even
	Len  uint32 // byte count, even, 2..65536 (encoded as 0 for 65536)
	EOT  bool   // last entry of the table
}

// Validate checks p alone: an even address, an even length of 2..65536
// bytes, and a region that does not cross a 64 KiB boundary.
func (p PRD) Validate() error {
	if p.Len == 0 || p.Len > MaxRegionSize {
		return fmt.Errorf("%w: %d bytes", ErrRegionSize, p.Len)
	}
	if p.Addr&1 != 0 || p.Len&1 != 0 {
		return fmt.Errorf("%w: address %#x, %d bytes", ErrOdd, p.Addr, p.Len)
	}
	if uint64(p.Addr)>>16 != (uint64(p.Addr)+uint64(p.Len)-1)>>16 {
		return fmt.Errorf("%w: %d bytes at %#x", ErrBoundary, p.Len, p.Addr)
	}
	return nil
}

// Put validates p and encodes it into b[:PRDSize].
// It panics if len(b) < PRDSize, like binary.LittleEndian.PutUint32.
func (p PRD) Put(b []byte) error {
	_ = b[PRDSize-1]
	if err := p.Validate(); err != nil {
		return err
	}
	w := p.Len & 0xffff // 65536 encodes as 0
	if p.EOT {
		w |= prdEOT
	}
	binary.LittleEndian.PutUint32(b[prdAddrOff:], p.Addr)
	binary.LittleEndian.PutUint32(b[prdCountOff:], w)
	return nil
}

// AppendPRD appends the encoding of p to b.
func AppendPRD(b []byte, p PRD) ([]byte, error) {
	var e [PRDSize]byte
	if err := p.Put(e[:]); err != nil {
		return b, err
	}
	return append(b, e[:]...), nil
}

// DecodePRD decodes one entry from b strictly: it accepts exactly the
// encodings Put produces. Reserved bits, an odd address or count, and a
// region crossing a 64 KiB boundary are errors; a short b is
// io.ErrUnexpectedEOF. DecodePRDLax reads an entry the way the hardware
// does instead.
func DecodePRD(b []byte) (PRD, error) {
	if len(b) < PRDSize {
		return PRD{}, io.ErrUnexpectedEOF
	}
	addr := binary.LittleEndian.Uint32(b[prdAddrOff:])
	w := binary.LittleEndian.Uint32(b[prdCountOff:])
	if w&prdReserved != 0 {
		return PRD{}, fmt.Errorf("%w: second dword %#08x", ErrReserved, w)
	}
	p := PRD{Addr: addr, Len: w & 0xffff, EOT: w&prdEOT != 0}
	if p.Len == 0 {
		p.Len = MaxRegionSize
	}
	return p, p.Validate()
}

// DecodePRDLax decodes one entry from b[:PRDSize] as a bus master does
// (QEMU's bmdma_prepare_buf): the count is masked with 0xfffe, and 0 means
// 64 KiB; address bit 0 and the reserved bits are ignored. It does not
// check the 64 KiB boundary. It panics if len(b) < PRDSize.
func DecodePRDLax(b []byte) PRD {
	_ = b[PRDSize-1]
	w := binary.LittleEndian.Uint32(b[prdCountOff:])
	p := PRD{
		Addr: binary.LittleEndian.Uint32(b[prdAddrOff:]) &^ 1,
		Len:  w & prdCountMask,
		EOT:  w&prdEOT != 0,
	}
	if p.Len == 0 {
		p.Len = MaxRegionSize
	}
	return p
}

// ParseTable decodes a PRD table from b, the bytes at the table pointer,
// strictly (DecodePRD), up to and including the first entry with EOT. It
// appends the entries to dst and returns the extended slice. The table
// must end within b and within MaxTableBytes: ErrNoEOT otherwise.
func ParseTable(dst []PRD, b []byte) ([]PRD, error) {
	for i := 0; ; i++ {
		off := i * PRDSize
		if off >= MaxTableBytes {
			return dst, fmt.Errorf("%w within %d bytes", ErrNoEOT, MaxTableBytes)
		}
		if off+PRDSize > len(b) {
			return dst, fmt.Errorf("%w in %d bytes", ErrNoEOT, len(b))
		}
		p, err := DecodePRD(b[off:])
		if err != nil {
			return dst, fmt.Errorf("dma: PRD entry %d: %w", i, err)
		}
		dst = append(dst, p)
		if p.EOT {
			return dst, nil
		}
	}
}

// AppendTable validates t as a table (see ValidateTable, without the
// length check) and appends its encoding to b.
func AppendTable(b []byte, t []PRD) ([]byte, error) {
	if err := validateEntries(t); err != nil {
		return b, err
	}
	for _, p := range t {
		b, _ = AppendPRD(b, p)
	}
	return b, nil
}

// TableLen returns the total byte count of t.
func TableLen(t []PRD) int64 {
	var n int64
	for _, p := range t {
		n += int64(p.Len)
	}
	return n
}

// ValidateTable checks t as the table for a transfer of n bytes (the
// command's sector count times SectorSize): every entry valid, the EOT bit
// on the last entry and on no other, at most MaxTableEntries entries, and a
// total of exactly n bytes.
func ValidateTable(t []PRD, n int64) error {
	if err := validateEntries(t); err != nil {
		return err
	}
	if total := TableLen(t); total != n {
		return fmt.Errorf("%w: table has %d bytes, transfer %d", ErrTableLength, total, n)
	}
	return nil
}

func validateEntries(t []PRD) error {
	if len(t) == 0 {
		return ErrNoEOT
	}
	if len(t) > MaxTableEntries {
		return fmt.Errorf("%w: %d entries, at most %d", ErrTableSize, len(t), MaxTableEntries)
	}
	for i, p := range t {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("dma: PRD entry %d: %w", i, err)
		}
		last := i == len(t)-1
		if p.EOT && !last {
			return fmt.Errorf("%w: entry %d of %d", ErrEarlyEOT, i, len(t))
		}
		if !p.EOT && last {
			return ErrNoEOT
		}
	}
	return nil
}

// Segment is a contiguous piece of host physical memory.
type Segment struct {
	Addr uint32
	Len  uint32
}

// BuildTable appends to dst the PRD table describing segs in order: each
// segment split at 64 KiB boundaries (as Linux's ata_bmdma_fill_sg does),
// the last entry marked EOT. Segments must be non-empty, even in address
// and length, and must not run past 4 GiB.
func BuildTable(dst []PRD, segs ...Segment) ([]PRD, error) {
	start := len(dst)
	for i, s := range segs {
		if s.Len == 0 || s.Addr&1 != 0 || s.Len&1 != 0 || uint64(s.Addr)+uint64(s.Len) > 1<<32 {
			return dst[:start], fmt.Errorf("dma: segment %d (%d bytes at %#x): %w", i, s.Len, s.Addr, ErrRegionSize)
		}
		addr, left := uint64(s.Addr), uint64(s.Len)
		for left > 0 {
			n := min(left, MaxRegionSize-addr&(MaxRegionSize-1))
			dst = append(dst, PRD{Addr: uint32(addr), Len: uint32(n)})
			addr += n
			left -= n
		}
	}
	if len(dst) == start {
		return dst, ErrNoEOT
	}
	if len(dst)-start > MaxTableEntries {
		return dst[:start], fmt.Errorf("%w: %d entries, at most %d", ErrTableSize, len(dst)-start, MaxTableEntries)
	}
	dst[len(dst)-1].EOT = true
	return dst, nil
}

// Memory is host physical memory as a bus master sees it: Bytes holds the
// bytes at physical addresses Base to Base+len(Bytes).
type Memory struct {
	Base  uint32
	Bytes []byte
}

// Region returns the n bytes at physical address addr, aliasing m.Bytes.
func (m Memory) Region(addr uint32, n uint32) ([]byte, error) {
	lo := int64(addr) - int64(m.Base)
	hi := lo + int64(n)
	if lo < 0 || hi > int64(len(m.Bytes)) {
		return nil, fmt.Errorf("%w: %d bytes at %#x, memory is %d bytes at %#x",
			ErrAddress, n, addr, len(m.Bytes), m.Base)
	}
	return m.Bytes[lo:hi:hi], nil
}
