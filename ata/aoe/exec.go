package aoe

import (
	"errors"

	"github.com/nhdkit/nhd/ata"
)

// execATA runs the ATA command of req (header h, argument a) on host and
// builds the reply in reply, returning the reply's length. Read data lands
// straight in the reply frame and write data is taken straight from the
// request frame. maxSectors is what one frame carries.
//
// Commands the device ends in error, and data commands longer than a
// frame, are answered with the ATA status and error registers (as Linux
// wants: it fails the request at once); only a write whose data is
// missing from the frame gets the AoE error "bad argument".
func execATA(host *ata.Host, req []byte, h *Header, a *ATAArg, reply []byte, maxSectors int) int {
	var tf ata.TaskFile
	tf.Command = ata.Opcode(a.CmdStatus)
	tf.Features, tf.Count = a.ErrFeature, a.SectorCount
	tf.LBALow, tf.LBAMid, tf.LBAHigh = uint8(a.LBA), uint8(a.LBA>>8), uint8(a.LBA>>16)
	if a.Flags.Has(ATAExtended) {
		tf.HOBLBALow, tf.HOBLBAMid, tf.HOBLBAHigh = uint8(a.LBA>>24), uint8(a.LBA>>32), uint8(a.LBA>>40)
		tf.Device = ata.DeviceLBA
	} else {
		// lba3 is the device register (Linux: 0xE0 | LBA 27:24).
		tf.Device = ata.DeviceBits(a.LBA>>24) &^ ata.DeviceDEV
	}
	var c ata.Command
	out := *a
	out.ErrFeature, out.SectorCount = 0, 0
	n := int64(0)
	err := ata.Decode(&tf, host.Geometry, &c)
	if err == nil {
		n = c.Bytes(SectorSize)
		if n > int64(maxSectors)*SectorSize || (a.SectorCount == 0 && n > 0) {
			err = &ata.Error{Op: c.Op, Status: ata.StatusDRDY | ata.StatusERR, Err: ata.ErrorABRT}
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
		err = host.Exec(&c, data)
	}
	length := ATADataOffset
	var ae *ata.Error
	switch {
	case err == nil:
		out.CmdStatus = host.Port.ReadReg(ata.RegStatus)
		out.ErrFeature = host.Port.ReadReg(ata.RegError)
		if !c.ToDevice() {
			length += int(n)
		}
	case errors.As(err, &ae):
		out.CmdStatus, out.ErrFeature, out.SectorCount = uint8(ae.Status), uint8(ae.Err), a.SectorCount
		if ae.LBA != 0 {
			out.LBA = ae.LBA
		}
	default: // the device broke the protocol (ata.ErrTimeout, ErrProtocol)
		out.CmdStatus = uint8(ata.StatusDRDY | ata.StatusDF | ata.StatusERR)
		out.ErrFeature, out.SectorCount = uint8(ata.ErrorABRT), a.SectorCount
	}
	h.Put(reply)
	out.Put(reply)
	return pad(reply, length)
}

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
