package aoe

import (
	"bytes"
	"testing"

	"github.com/nhdkit/nhd/ata"
)

// FuzzTarget hands arbitrary frames to a target's dispatcher and runs any
// ATA command on the reading goroutine (one ATA host): nothing may panic,
// every frame the target sends must be a well-formed reply to the request
// (R set, the request's tag, the target's own address, at least 60 bytes),
// and a frame may change only the sectors its ATA opcode addresses (the
// LBA layout follows the opcode whatever the E flag says).
func FuzzTarget(f *testing.F) {
	f.Add(frameFrom(initiatorMAC, CmdATA, ataReq(ATAWrite, 0x34, 1, 0x01000005, make([]byte, 512))))
	f.Add(frameFrom(initiatorMAC, CmdATA, ataReq(ATAWrite|ATAExtended, 0x30, 1, 0xE1000005, make([]byte, 512))))
	f.Fuzz(func(t *testing.T, frame []byte) {
		st, mem := newSyncTarget(t, 64)
		for i := range mem.data {
			mem.data[i] = 0x5A
		}
		before := bytes.Clone(mem.data)
		out := st.do(frame)
		var req Header
		for _, out := range out {
			var h Header
			if ParseHeader(frame, &req) != nil || ParseHeader(out, &h) != nil {
				t.Fatalf("reply %x to a frame that does not parse", out)
			}
			if !h.Flags.Has(FlagResponse) || h.Tag != req.Tag || h.Major != 0 || h.Minor != 1 || h.Src != targetMAC || h.Dst != req.Src || len(out) < MinFrameSize {
				t.Fatalf("reply %+v (%d bytes) to %+v", h, len(out), req)
			}
		}
		if first, last, changed := diffRange(before, mem.data); changed {
			lba, n, ok := addressedSectors(frame)
			if !ok || first < lba*SectorSize || last >= (lba+n)*SectorSize {
				t.Fatalf("bytes %d..%d changed; the frame addresses sectors %d+%d (%v)", first, last, lba, n, ok)
			}
		}
	})
}

// diffRange returns the first and last offsets where a and b differ.
func diffRange(a, b []byte) (first, last uint64, changed bool) {
	for i := range a {
		if a[i] != b[i] {
			if !changed {
				first, changed = uint64(i), true
			}
			last = uint64(i)
		}
	}
	return first, last, changed
}

// addressedSectors decodes the first sector and the count of an ATA
// write frame independently of the target: 48-bit for an EXT opcode,
// otherwise 28-bit, LBA 27:24 in lba3's low nibble.
func addressedSectors(frame []byte) (lba, n uint64, ok bool) {
	var h Header
	var a ATAArg
	if ParseHeader(frame, &h) != nil || h.Command != CmdATA || ParseATAArg(frame, &a) != nil {
		return 0, 0, false
	}
	op := ata.Opcode(a.CmdStatus)
	if !op.ToDevice() {
		return 0, 0, false
	}
	lba = a.LBA
	if !op.Ext() {
		lba &= 0x0FFFFFFF
	}
	return lba, uint64(a.SectorCount), true
}
