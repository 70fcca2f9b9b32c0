package ata

func (d *Device) transferDMA() {
	c := &d.cmd
	off, n := int64(c.LBA)*int64(d.sector), int64(c.Count)*int64(d.sector)
	d.track.reset(off, off+n)
	d.step(EvDMA)
	d.status |= StatusDRDY | StatusDSC
	var err error
	if c.ToDevice() {
		err = d.dma.HostToDevice(&d.track, off, n)
	} else {
		err = d.dma.DeviceToHost(&d.track, off, n)
	}
	d.step(EvDMADone)
	d.status = StatusBSY | StatusDRDY
	if err != nil {
		switch {
		case !d.track.failed || d.track.err == ErrOutsideTransfer:
			// The engine failed on its own (host memory): not a media
			// error.
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

func (d *Device) failedLBA() uint64 {
	if d.track.failed {
		return uint64(d.track.off) / uint64(d.sector)
	}
	return d.lba
}

func (d *Device) readFailed(err error) {
	d.lastErr = err
	d.fail(d.failedLBA(), ErrorUNC, true)
}

func (d *Device) writeFailed(err error) {
	d.lastErr = err
	d.fail(d.failedLBA(), ErrorABRT, true)
	d.status |= StatusDF
}

func (d *Device) flush() error {
	switch {
	case d.flusher != nil:
		return d.flusher.Flush(d.ctx)
	case d.syncer != nil:
		return d.syncer.Sync()
	}
	return nil
}
