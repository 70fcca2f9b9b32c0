package ata

// Power modes reported by CHECK POWER MODE in the sector count register.
const (
	PowerStandby = 0x00
	PowerActive  = 0xFF
)

// command starts op with the task file in the registers.
func (d *Device) command(op Opcode) {
	if !d.selected() && op != CmdExecuteDeviceDiagnostic {
		return
	}
	d.step(EvCommand)
	d.status = StatusBSY | StatusDRDY
	d.errReg = 0
	d.intrq = false
	d.lastErr = nil
	switch op {
	case CmdCheckPowerMode, CmdCheckPowerModeAlt, CmdStandby, CmdStandbyImmediate, CmdSleep:
	default:
		d.standby = false
	}
	tf := d.taskFile()
	tf.Command = op
	if err := Decode(&tf, d.set.geom, &d.cmd); err != nil {
		// A CHS address outside the current geometry.
		d.fail(0, ErrorIDNF|ErrorABRT, false)
		return
	}
	d.dispatch()
}

// dispatch runs d.cmd. It is entered in StateBusy.
func (d *Device) dispatch() {
	c := &d.cmd
	switch c.Op {
	case CmdReadSectors, CmdReadSectorsNoRetry, CmdReadSectorsExt, CmdReadMultiple, CmdReadMultipleExt:
		if d.rangeOK() && d.multipleOK() {
			d.lba, d.left = c.LBA, c.Count
			d.nextIn()
		}
	case CmdWriteSectors, CmdWriteSectorsNoRetry, CmdWriteSectorsExt, CmdWriteMultiple, CmdWriteMultipleExt, CmdWriteMultipleFUAExt:
		if d.rangeOK() && d.multipleOK() {
			d.lba, d.left = c.LBA, c.Count
			d.nextOut()
		}
	case CmdReadDMA, CmdReadDMANoRetry, CmdReadDMAExt, CmdWriteDMA, CmdWriteDMANoRetry, CmdWriteDMAExt, CmdWriteDMAFUAExt:
		if d.dma == nil {
			d.abort()
		} else if d.rangeOK() {
			d.transferDMA()
		}
	case CmdReadVerifySectors, CmdReadVerifySectorsNoRetry, CmdReadVerifySectorsExt:
		if d.rangeOK() {
			d.succeed()
		}
	case CmdSeek:
		if c.LBA >= d.addressable() {
			d.fail(c.LBA, ErrorIDNF|ErrorABRT, true)
		} else {
			d.succeed()
		}
	case CmdIdentifyDevice:
		d.id.Put(d.buf)
		d.lba, d.left, d.blk = 0, 0, 1
		d.pos, d.end = 0, IdentifySize
		d.step(EvDataIn)
		d.status |= StatusDRDY | StatusDSC
		d.raise()
	case CmdSetFeatures:
		d.setFeatures()
	case CmdSetMultipleMode:
		n := uint8(c.Count)
		if n != 0 && (n > d.info.maxMultiple() || n&(n-1) != 0) {
			d.abort()
			return
		}
		d.set.multiple = n
		d.refreshIdentify()
		d.succeed()
	case CmdInitializeDeviceParams:
		spt, heads := uint8(c.Count), c.Device.Head()+1
		if spt == 0 {
			d.abort()
			return
		}
		d.set.geom = TranslatedGeometry(d.info.Sectors, heads, spt)
		d.refreshIdentify()
		d.succeed()
	case CmdFlushCache, CmdFlushCacheExt:
		if err := d.flush(); err != nil {
			d.flushFailed(err, 0, false)
			return
		}
		d.succeed()
	case CmdDataSetManagement:
		d.trim()
	case CmdReadNativeMaxAddress:
		// The last sector words 60-61 count: 0FFFFFFEh at most (ACS:
		// a larger native max reads as 268,435,454 here).
		d.setLBA(min(d.info.Sectors, MaxLBA28)-1, AddrLBA28)
		d.succeed()
	case CmdReadNativeMaxAddressExt:
		d.setLBA(d.info.Sectors-1, AddrLBA48)
		d.succeed()
	case CmdCheckPowerMode, CmdCheckPowerModeAlt:
		if d.standby {
			d.count[0] = PowerStandby
		} else {
			d.count[0] = PowerActive
		}
		d.succeed()
	case CmdStandby, CmdStandbyImmediate, CmdSleep:
		// SLEEP is taken as STANDBY, as QEMU does: the device stays
		// reachable without a reset.
		d.standby = true
		d.succeed()
	case CmdIdle, CmdIdleImmediate, CmdRecalibrate:
		d.succeed()
	case CmdSMART:
		d.smart()
	case CmdSecurityFreezeLock:
		// No security feature set to freeze; succeeds as on QEMU, since
		// hosts send it at boot.
		d.succeed()
	case CmdExecuteDeviceDiagnostic:
		d.signature()
		d.step(EvComplete)
		d.status = StatusDRDY | StatusDSC
		d.raise()
	default:
		// NOP (ACS: always aborts) and every unsupported opcode.
		d.abort()
	}
}

// rangeOK checks that the command's sectors exist and that its addressing
// reaches them (see addressable); if not it fails the command with
// IDNF|ABRT and the first sector out of reach.
func (d *Device) rangeOK() bool {
	c := &d.cmd
	end := d.addressable()
	if c.LBA >= end {
		d.fail(c.LBA, ErrorIDNF|ErrorABRT, true)
		return false
	}
	if c.LBA+uint64(c.Count) > end {
		d.fail(end, ErrorIDNF|ErrorABRT, true)
		return false
	}
	return true
}

// addressable returns how many sectors, from LBA 0, the current command's
// addressing reaches: the capacity for a 48-bit command; for a 28-bit
// (LBA28 or CHS) one at most MaxLBA28, the count IDENTIFY words 60-61
// report, so its last sector is 0FFFFFFEh however large the device.
func (d *Device) addressable() uint64 {
	if d.cmd.Addressing == AddrLBA48 {
		return d.info.Sectors
	}
	return min(d.info.Sectors, MaxLBA28)
}

func (d *Device) multipleOK() bool {
	if d.cmd.Op.Multiple() && d.set.multiple == 0 {
		d.abort()
		return false
	}
	return true
}

// succeed ends the command with DRDY|DSC and an interrupt.
func (d *Device) succeed() {
	d.step(EvComplete)
	d.status = StatusDRDY | StatusDSC
	d.errReg = 0
	d.raise()
}

// abort ends the command with DRDY|ERR, ABRT and an interrupt.
func (d *Device) abort() { d.fail(0, ErrorABRT, false) }

// fail ends the command with DRDY|ERR and e, the failing LBA in the LBA
// registers if withLBA, and an interrupt.
func (d *Device) fail(lba uint64, e ErrorBits, withLBA bool) {
	if withLBA {
		d.setLBA(lba, d.cmd.Addressing)
	}
	d.step(EvComplete)
	d.status = StatusDRDY | StatusERR
	d.errReg = e
	d.pos, d.end = 0, 0
	d.raise()
}
