package nvme

import (
	"context"

	"github.com/nhdkit/nhd/nbd"
)

// zeroes backs Write Zeroes on a backend that is not an nbd.Zeroer.
var zeroes [64 << 10]byte

// io runs an I/O command of the NVM command set on namespace cmd.NSID.
func (s *subsystem) io(ctx context.Context, cmd *Command, data []byte) Status {
	if cmd.NSID == 0 || cmd.NSID > uint32(len(s.ns)) {
		return StatusInvalidNamespace | StatusDNR
	}
	ns := &s.ns[cmd.NSID-1]
	switch cmd.Opcode {
	case OpRead, OpWrite, OpWriteZeroes:
		return s.rw(ctx, ns, cmd, data)
	case OpFlush:
		if f, ok := ns.Backend.(nbd.Flusher); ok {
			return StatusOf(f.Flush(ctx))
		}
		return StatusSuccess
	case OpDatasetManagement:
		return ns.dsm(ctx, cmd, data)
	}
	return StatusInvalidOpcode | StatusDNR
}

func (s *subsystem) rw(ctx context.Context, ns *namespace, cmd *Command, data []byte) Status {
	lba, n := cmd.LBA(), uint64(cmd.Blocks())
	if lba >= ns.blocks || n > ns.blocks-lba {
		return StatusLBAOutOfRange | StatusDNR
	}
	off, length := int64(lba<<ns.shift), int64(n<<ns.shift)
	if cmd.Opcode != OpWriteZeroes && int64(len(data)) != length {
		return StatusSGLLengthInvalid | StatusDNR
	}
	if cmd.Opcode == OpRead {
		s.stats.reads.Add(1)
		s.stats.unitsRead.Add(uint64(length+511_999) / 512_000)
		_, err := ns.Backend.ReadAt(data, off)
		return StatusOf(err)
	}
	if ns.ReadOnly {
		return StatusNamespaceProtected | StatusDNR
	}
	s.stats.writes.Add(1)
	s.stats.unitsWritten.Add(uint64(length+511_999) / 512_000)
	fua := cmd.CDW12&CDW12FUA != 0
	var err error
	switch {
	case cmd.Opcode == OpWriteZeroes:
		err = ns.writeZeroes(ctx, off, length, cmd.CDW12&CDW12Deallocate != 0)
	case fua:
		if w, ok := ns.Backend.(nbd.FUAWriter); ok {
			_, err = w.WriteAtFUA(data, off)
			fua = false
		} else {
			_, err = ns.Backend.WriteAt(data, off)
		}
	default:
		_, err = ns.Backend.WriteAt(data, off)
	}
	if f, ok := ns.Backend.(nbd.Flusher); ok && fua && err == nil {
		err = f.Flush(ctx)
	}
	return StatusOf(err)
}

func (ns *namespace) writeZeroes(ctx context.Context, off, length int64, deallocate bool) error {
	if z, ok := ns.Backend.(nbd.Zeroer); ok {
		var flags nbd.CmdFlags
		if !deallocate {
			flags = nbd.FlagNoHole
		}
		return z.WriteZeroes(ctx, off, length, flags)
	}
	for length > 0 {
		k := min(length, int64(len(zeroes)))
		if _, err := ns.Backend.WriteAt(zeroes[:k], off); err != nil {
			return err
		}
		off, length = off+k, length-k
	}
	return nil
}

// dsm runs a Dataset Management command: ranges are checked, and
// deallocated through an nbd.Trimmer when the AD bit is set (the other
// attributes are hints, ignored).
func (ns *namespace) dsm(ctx context.Context, cmd *Command, data []byte) Status {
	nr := int(cmd.CDW10&0xFF) + 1
	if len(data) < nr*DSMRangeSize {
		return StatusSGLLengthInvalid | StatusDNR
	}
	if cmd.CDW11&DSMDeallocate == 0 {
		return StatusSuccess
	}
	if ns.ReadOnly {
		return StatusNamespaceProtected | StatusDNR
	}
	for i := range nr { // check every range before changing any
		var r DSMRange
		r.Parse((*[DSMRangeSize]byte)(data[i*DSMRangeSize:]))
		if r.LBA >= ns.blocks || uint64(r.Blocks) > ns.blocks-r.LBA {
			return StatusLBAOutOfRange | StatusDNR
		}
	}
	t, ok := ns.Backend.(nbd.Trimmer)
	for i := 0; ok && i < nr; i++ {
		var r DSMRange
		r.Parse((*[DSMRangeSize]byte)(data[i*DSMRangeSize:]))
		if r.Blocks > 0 {
			if err := t.Trim(ctx, int64(r.LBA<<ns.shift), int64(r.Blocks)<<ns.shift); err != nil {
				return StatusOf(err)
			}
		}
	}
	return StatusSuccess
}
