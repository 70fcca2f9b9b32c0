package nvme

import (
	"context"

	"github.com/nhdkit/nhd/nbd"
)

// zeroes backs Write Zeroes on a backend that is not an nbd.Zeroer.
var zeroes [64 << 10]byte

// io runs an I/O command of the NVM command set on namespace cmd.NSID.
func (s *subsystem) io(ctx context.Context, cmd *Command, data []byte) Status {
	ns := s.namespace(cmd.NSID)
	if ns == nil {
		return StatusInvalidNamespace | StatusDNR
	}
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

// countRead and countWrite add a command of length bytes to the SMART /
// health log's counters (data units are thousands of 512-byte units,
// rounded up).
func (s *subsystem) countRead(length int64) {
	s.stats.reads.Add(1)
	s.stats.unitsRead.Add(uint64(length+511_999) / 512_000)
}

func (s *subsystem) countWrite(length int64) {
	s.stats.writes.Add(1)
	s.stats.unitsWritten.Add(uint64(length+511_999) / 512_000)
}

func (s *subsystem) rw(ctx context.Context, ns *namespace, cmd *Command, data []byte) Status {
	off, length, ok := ns.span(cmd)
	if !ok {
		return StatusLBAOutOfRange | StatusDNR
	}
	if cmd.Opcode != OpWriteZeroes && int64(len(data)) != length {
		return StatusSGLLengthInvalid | StatusDNR
	}
	if cmd.Opcode == OpRead {
		s.countRead(length)
		_, err := ns.Backend.ReadAt(data, off)
		return StatusOf(err)
	}
	if ns.ReadOnly {
		return StatusNamespaceProtected | StatusDNR
	}
	s.countWrite(length)
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

// Loan is the range of a Read that its namespace's backend (an
// nbd.Lender) lent to LendRead's caller, until GiveBack. The zero Loan
// lends nothing.
type Loan struct {
	l      nbd.Lender
	off, n int64
}

// Lent reports whether the loan holds a range.
func (l *Loan) Lent() bool { return l.l != nil }

// GiveBack ends the loan (once: it then holds nothing).
func (l *Loan) GiveBack() {
	if l.l != nil {
		l.l.GiveBack(l.off, l.n)
		*l = Loan{}
	}
}

// ioNamespace returns the namespace of cmd, an I/O command of q, when q
// runs I/O commands now (nil if Exec would refuse cmd before reaching a
// backend).
func (q *Queue) ioNamespace(cmd *Command) *namespace {
	c := q.ctrl
	if q.id == 0 || c == nil || !c.ready.Load() {
		return nil
	}
	return c.sub.namespace(cmd.NSID)
}

// span returns the bytes [off, off+n) of the blocks cmd addresses, ok
// false when they are not all inside the namespace.
func (ns *namespace) span(cmd *Command) (off, n int64, ok bool) {
	lba, blocks := cmd.LBA(), uint64(cmd.Blocks())
	if lba >= ns.blocks || blocks > ns.blocks-lba {
		return 0, 0, false
	}
	return int64(lba << ns.shift), int64(blocks << ns.shift), true
}

// LendRead runs cmd, a Read of n data bytes on an I/O queue whose
// namespace's backend is an nbd.Lender, from the backend's own memory:
// it appends the pieces that hold the data to pieces (nbd.Lender's
// contract: a nil Data is a hole of Len zero bytes), and returns them
// with their loan and the completion. The caller sends the pieces as the
// command's data and then calls loan.GiveBack; until then it must not
// change them. ok is false, and nothing is done, for any other command
// and for a read that Exec would fail (out of range, wrong length): the
// caller then runs Exec. Like Exec, it is safe for concurrent use.
func (q *Queue) LendRead(cmd *Command, n int, pieces []nbd.LentPiece) (_ []nbd.LentPiece, loan Loan, cpl Completion, ok bool) {
	if cmd.Opcode != OpRead {
		return pieces, Loan{}, Completion{}, false
	}
	ns := q.ioNamespace(cmd)
	if ns == nil {
		return pieces, Loan{}, Completion{}, false
	}
	l, isLender := ns.Backend.(nbd.Lender)
	off, length, inside := ns.span(cmd)
	if !isLender || !inside || length != int64(n) {
		return pieces, Loan{}, Completion{}, false
	}
	s := q.ctrl.sub
	s.countRead(length)
	pieces = l.Lend(off, length, pieces)
	return pieces, Loan{l: l, off: off, n: length}, Completion{CID: cmd.CID, SQID: q.id}, true
}

// WritePage runs cmd, a Write of one whole nbd.PageSize page at a page
// boundary (without FUA) on an I/O queue whose namespace's backend is an
// nbd.PageTaker, by handing the backend p, the command's data, instead of
// having it copy the bytes. The caller gives up p and owns old, the page
// the backend gave back for reuse (nil if it gave none). ok is false, and
// nothing is done, for any other command and for a write that Exec would
// fail or that the backend does not take: the caller then runs Exec with
// p's bytes. Like Exec, it is safe for concurrent use.
func (q *Queue) WritePage(cmd *Command, p *[nbd.PageSize]byte) (old *[nbd.PageSize]byte, cpl Completion, ok bool) {
	_, t, off, length := q.pageWrite(cmd)
	if t == nil || length != nbd.PageSize {
		return nil, Completion{}, false
	}
	old, ok = t.TakePage(p, off)
	if !ok {
		return nil, Completion{}, false
	}
	s := q.ctrl.sub
	s.countWrite(length)
	return old, Completion{CID: cmd.CID, SQID: q.id}, true
}
