package ata

// transferDMA runs the data phase of a DMA read or write through the DMA
// engine, with the device's view of the backend (d.src, d.dst), and ends
// the command: a backend read error in UNC, a write error in DF|ERR with
// ABRT, each with the failing LBA; an error of the engine's own in ABRT.
func (d *Device) transferDMA() {
	c := &d.cmd
	off, n := int64(c.LBA)*int64(d.sector), int64(c.Count)*int64(d.sector)
	d.track.reset(off, off+n)
	d.step(EvDMA)
	d.status |= StatusDRDY | StatusDSC
	var err error
	if c.ToDevice() {
		err = d.dma.HostToDevice(d.dst, off, n)
	} else {
		err = d.dma.DeviceToHost(d.src, off, n)
	}
	if d.track.drain(d.ctx) && err == nil {
		err = errLeftInFlight
	}
	d.step(EvDMADone)
	d.status = StatusBSY | StatusDRDY
	if err != nil {
		switch {
		case !d.track.backendFailed(err):
			// The engine failed on its own (host memory, its tap, an
			// access outside the transfer): not a media error.
			d.lastErr = err
			d.fail(0, ErrorABRT, false)
		case c.ToDevice():
			d.writeFailed(err)
		default:
			d.readFailed(err)
		}
		return
	}
	if c.ToDevice() {
		d.finishWrite()
		return
	}
	d.succeed()
}

// failedLBA is the sector of the first byte the backend failed on in the
// current transfer (see tracker.fail), or of the current PIO block.
func (d *Device) failedLBA() uint64 {
	if d.track.failed {
		return uint64(d.track.off) / uint64(d.sector)
	}
	return d.lba
}

// readFailed ends a read that failed in the backend: UNC, with the LBA of
// the first sector that failed.
func (d *Device) readFailed(err error) {
	d.lastErr = err
	d.fail(d.failedLBA(), ErrorUNC, true)
}

// writeFailed ends a write that failed in the backend: DF|ERR with ABRT,
// with the LBA of the first sector that failed.
func (d *Device) writeFailed(err error) {
	d.lastErr = err
	d.fail(d.failedLBA(), ErrorABRT, true)
	d.status |= StatusDF
}

// flushFailed ends a flush that failed, after the writes of a FUA or
// write-through command (at lba) or on its own (FLUSH CACHE, with no LBA):
// DF|ERR with ABRT. A flush error carrying an *OffsetError names the write
// that failed, and its LBA is reported instead.
func (d *Device) flushFailed(err error, lba uint64, withLBA bool) {
	d.lastErr = err
	if off, ok := errOffset(err); ok {
		lba, withLBA = uint64(off)/uint64(d.sector), true
	}
	d.fail(lba, ErrorABRT, withLBA)
	d.status |= StatusDF
}

// flush asks the backend to make its writes durable (Flusher, Syncer); a
// backend with neither is write-through.
func (d *Device) flush() error {
	switch {
	case d.flusher != nil:
		return d.flusher.Flush(d.ctx)
	case d.syncer != nil:
		return d.syncer.Sync()
	}
	return nil
}
