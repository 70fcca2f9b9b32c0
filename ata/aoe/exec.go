package aoe

import (
	"errors"

	"github.com/nhdkit/nhd/ata"
)

// execATA runs the ATA command of req (header h, argument a) on host and
// builds the reply in reply, returning the reply's length. Read data lands
// straight in the reply frame and write data is taken straight from the
// request frame. maxSectors is what one frame carries. ae (not nil) is
// the calling goroutine's ata.Error, which a command the device ends in
// error fills (Host.ExecErr) instead of allocating one.
//
// READ/WRITE SECTORS (EXT) run as READ/WRITE DMA (EXT) when the host has
// a bus master (see dmaVariant).
//
// Commands the device ends in error, and data commands longer than a
// frame, are answered with the ATA status and error registers (as Linux
// wants: it fails the request at once); only a write whose data is
// missing from the frame gets the AoE error "bad argument".
func execATA(host *ata.Host, req []byte, h *Header, a *ATAArg, reply []byte, maxSectors int, ae *ata.Error) int {
	var tf ata.TaskFile
	taskFile(a, &tf)
	var c ata.Command
	out := *a
	out.ErrFeature, out.SectorCount = 0, 0
	n := int64(0)
	err := ata.Decode(&tf, host.Geometry, &c)
	if err == nil {
		n = c.Bytes(SectorSize)
		if n > int64(maxSectors)*SectorSize || (a.SectorCount == 0 && n > 0) {
			err = errFrameSectors
		}
	}
	var data []byte
	if err == nil && n > 0 {
		if c.ToDevice() {
			if len(req) < ATADataOffset+int(n) {
				return errorReply(reply, h, ErrBadArgument)
			}
			data = req[ATADataOffset : ATADataOffset+int(n)]
		} else {
			data = reply[ATADataOffset : ATADataOffset+int(n)]
		}
	}
	if err == nil {
		if host.BusMaster != nil {
			c.Op = dmaVariant(c.Op)
		}
		err = host.ExecErr(&c, data, ae)
	}
	length := ATADataOffset
	switch {
	case err == nil:
		out.CmdStatus = host.Port.ReadReg(ata.RegStatus)
		out.ErrFeature = host.Port.ReadReg(ata.RegError)
		if !c.ToDevice() {
			length += int(n)
		}
	case err == ae: // the device ended the command in error
		out.CmdStatus, out.ErrFeature, out.SectorCount = uint8(ae.Status), uint8(ae.Err), a.SectorCount
		if ae.LBA != 0 {
			out.LBA = ae.LBA
		}
	default:
		st, e := hostErrorRegs(err)
		out.CmdStatus, out.ErrFeature, out.SectorCount = uint8(st), uint8(e), a.SectorCount
	}
	h.Put(reply)
	out.Put(reply)
	return pad(reply, length)
}

// taskFile fills tf from a. The opcode, not the E flag, says how the six
// LBA bytes are laid out, and addressing is always by LBA, as vblade does:
// an EXT opcode takes all six as a 48-bit LBA, any other takes lba0..lba2
// and the low nibble of lba3 as a 28-bit LBA (Linux puts E0h | LBA 27:24
// in lba3), ignoring lba3's high nibble, lba4 and lba5. So an E flag that
// disagrees with the opcode changes nothing: the command runs at the
// address its opcode names, which is out of range (IDNF) when the
// initiator meant the other layout, never at a truncated address or as a
// CHS address.
func taskFile(a *ATAArg, tf *ata.TaskFile) {
	tf.Command = ata.Opcode(a.CmdStatus)
	tf.Features, tf.Count = a.ErrFeature, a.SectorCount
	tf.LBALow, tf.LBAMid, tf.LBAHigh = uint8(a.LBA), uint8(a.LBA>>8), uint8(a.LBA>>16)
	tf.Device = ata.DeviceLBA
	if tf.Command.Ext() {
		tf.HOBLBALow, tf.HOBLBAMid, tf.HOBLBAHigh = uint8(a.LBA>>24), uint8(a.LBA>>32), uint8(a.LBA>>40)
	} else {
		tf.Device |= ata.DeviceBits(a.LBA>>24) & 0x0F
	}
}

// dmaVariant maps the PIO sector commands Linux's aoe driver sends to the
// DMA commands of the same addressing, so that a frame's sectors move in
// one backend call instead of one per 512-byte DRQ block. Both go through
// the device's registers and state machine and end with the same status
// and error bits.
func dmaVariant(op ata.Opcode) ata.Opcode {
	switch op {
	case ata.CmdReadSectors, ata.CmdReadSectorsNoRetry:
		return ata.CmdReadDMA
	case ata.CmdReadSectorsExt:
		return ata.CmdReadDMAExt
	case ata.CmdWriteSectors, ata.CmdWriteSectorsNoRetry:
		return ata.CmdWriteDMA
	case ata.CmdWriteSectorsExt:
		return ata.CmdWriteDMAExt
	}
	return op
}

// hostErrorRegs returns the status and error registers that report err,
// an error the device did not end the command with: a device that broke
// the protocol (ata.ErrTimeout, ErrProtocol) is a device fault (DF);
// anything else (errFrameSectors, a buffer or field the host driver
// refuses) is ABRT.
func hostErrorRegs(err error) (ata.Status, ata.ErrorBits) {
	if errors.Is(err, ata.ErrTimeout) || errors.Is(err, ata.ErrProtocol) {
		return ata.StatusDRDY | ata.StatusDF | ata.StatusERR, ata.ErrorABRT
	}
	return ata.StatusDRDY | ata.StatusERR, ata.ErrorABRT
}

// errFrameSectors is a data command longer than a frame carries, or with a
// sector count of 0; execATA answers it ABRT without running it.
var errFrameSectors = errors.New("aoe: sector count 0 or over a frame")

// errorReply builds a header-only reply with FlagError and code e.
func errorReply(reply []byte, h *Header, e Error) int {
	r := *h
	r.Flags |= FlagError
	r.Error = e
	r.Put(reply)
	return pad(reply, HeaderSize)
}

// pad zeroes reply[n:MinFrameSize] and returns the padded length.
func pad(reply []byte, n int) int {
	if n < MinFrameSize {
		clear(reply[n:MinFrameSize])
		return MinFrameSize
	}
	return n
}
