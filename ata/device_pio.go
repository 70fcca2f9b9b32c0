package ata

// blockSize returns the sectors in the next PIO block.
func (d *Device) blockSize() uint32 {
	if d.cmd.Op.Multiple() {
		return min(d.left, uint32(d.set.multiple))
	}
	return 1
}

// nextIn reads the next PIO-in block from the backend and raises DRQ.
func (d *Device) nextIn() {
	d.blk = d.blockSize()
	d.left -= d.blk
	d.end = int(d.blk) * d.sector
	d.pos = 0
	off := int64(d.lba) * int64(d.sector)
	d.track.reset(off, off+int64(d.end))
	if _, err := d.track.ReadAt(d.buf[:d.end], off); err != nil {
		d.readFailed(err)
		return
	}
	d.step(EvDataIn)
	d.status |= StatusDRDY | StatusDSC
	d.raise()
}

// nextOut raises DRQ for the next PIO-out block. The first block is
// requested without an interrupt, the later ones with one.
func (d *Device) nextOut() {
	first := d.left == d.cmd.Count
	d.blk = d.blockSize()
	d.left -= d.blk
	d.end = int(d.blk) * d.sector
	d.pos = 0
	d.step(EvDataOut)
	d.status |= StatusDRDY | StatusDSC
	if !first {
		d.raise()
	}
}

// blockDone is called when the host has moved the last word of a block.
func (d *Device) blockDone() {
	st := d.state
	d.step(EvBlockDone)
	d.status = StatusBSY | StatusDRDY
	if st == StatePIOIn {
		d.lba += uint64(d.blk)
		if d.left == 0 {
			// The last block of a PIO-in command ends without an
			// interrupt.
			d.step(EvComplete)
			d.status = StatusDRDY | StatusDSC
			return
		}
		d.nextIn()
		return
	}
	off := int64(d.lba) * int64(d.sector)
	d.track.reset(off, off+int64(d.end))
	if _, err := d.track.WriteAt(d.buf[:d.end], off); err != nil {
		d.writeFailed(err)
		return
	}
	d.lba += uint64(d.blk)
	if d.left == 0 {
		d.finishWrite()
		return
	}
	d.nextOut()
}

// finishWrite flushes a FUA write, or any write with the write cache off,
// and completes the command.
func (d *Device) finishWrite() {
	if d.cmd.FUA() || !d.set.writeCache {
		if err := d.flush(); err != nil {
			d.flushFailed(err, d.cmd.LBA, true)
			return
		}
	}
	d.succeed()
}
