package ata

import (
	"encoding/binary"
	"io"
)

// SET FEATURES subcommands (features register) the device implements;
// every other subcommand aborts.
const (
	FeatureEnableWriteCache  = 0x02
	FeatureSetTransferMode   = 0x03
	FeatureDisableWriteCache = 0x82
)

// Transfer-mode codes for SET FEATURES 03h, written to the sector count
// register (Linux XFER_*): the class in bits 7:3, the mode in bits 2:0.
const (
	XferPIODefault    = 0x00
	XferPIODefNoIORDY = 0x01
	XferPIO0          = 0x08
	XferSWDMA0        = 0x10
	XferMWDMA0        = 0x20
	XferUDMA0         = 0x40
)

// DSMTrim is the DATA SET MANAGEMENT features bit that selects TRIM.
const DSMTrim = 0x0001

// memWriter is the io.WriterAt the DMA engine writes DATA SET MANAGEMENT
// range entries into.
type memWriter struct{ b []byte }

func (m *memWriter) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off > int64(len(m.b)) || int64(len(p)) > int64(len(m.b))-off {
		return 0, io.ErrShortWrite
	}
	return copy(m.b[off:], p), nil
}

func (d *Device) setFeatures() {
	c := &d.cmd
	switch c.Features {
	case FeatureEnableWriteCache:
		if !d.info.WriteCache {
			d.abort()
			return
		}
		d.set.writeCache = true
	case FeatureDisableWriteCache:
		if !d.info.WriteCache {
			d.abort()
			return
		}
		if err := d.flush(); err != nil {
			d.lastErr = err
			d.fail(0, ErrorABRT, false)
			d.status |= StatusDF
			return
		}
		d.set.writeCache = false
	case FeatureSetTransferMode:
		mode := uint8(c.Count)
		n := mode & 7
		sw, mw, udma := d.info.dmaModes()
		switch mode &^ 7 {
		case 0x00:
			if n > 1 {
				d.abort()
				return
			}
		case XferPIO0:
			if n > 4 {
				d.abort()
				return
			}
		case XferSWDMA0, XferMWDMA0, XferUDMA0:
			var mask uint8
			switch mode &^ 7 {
			case XferSWDMA0:
				mask = sw
			case XferMWDMA0:
				mask = mw
			default:
				mask = udma
			}
			if mask&(1<<n) == 0 {
				d.abort()
				return
			}
			d.set.dmaMode = mode
		default:
			d.abort()
			return
		}
	default:
		d.abort()
		return
	}
	d.refreshIdentify()
	d.succeed()
}

// trim runs DATA SET MANAGEMENT: the range entries come in by DMA, each is
// checked against the capacity, and the non-empty ones go to the backend's
// Trim, adjacent ranges merged.
func (d *Device) trim() {
	c := &d.cmd
	if c.Features != DSMTrim || !d.info.TRIM || d.trimmer == nil || d.dma == nil || c.Count > MaxDSMBlocks {
		d.abort()
		return
	}
	n := int64(c.Count) * 512
	d.dsm.b = d.buf[:n]
	d.track.reset(0, 0)
	d.step(EvDMA)
	d.status |= StatusDRDY | StatusDSC
	err := d.dma.HostToDevice(&d.dsm, 0, n)
	d.step(EvDMADone)
	d.status = StatusBSY | StatusDRDY
	if err != nil {
		d.lastErr = err
		d.fail(0, ErrorABRT, false)
		return
	}
	entries := d.buf[:n]
	for i := 0; i < len(entries); i += 8 {
		lba, length := DecodeRange(entries[i:])
		if length != 0 && (lba >= d.info.Sectors || lba+uint64(length) > d.info.Sectors) {
			d.fail(max(lba, d.info.Sectors), ErrorIDNF|ErrorABRT, true)
			return
		}
	}
	var runLBA, runLen uint64
	for i := 0; i <= len(entries); i += 8 {
		var lba uint64
		var length uint16
		if i < len(entries) {
			lba, length = DecodeRange(entries[i:])
			if length == 0 {
				continue
			}
			if runLen != 0 && runLBA+runLen == lba {
				runLen += uint64(length)
				continue
			}
		}
		if runLen != 0 {
			sz := int64(d.sector)
			if err := d.trimmer.Trim(d.ctx, int64(runLBA)*sz, int64(runLen)*sz); err != nil {
				d.lastErr = err
				d.fail(runLBA, ErrorABRT, true)
				d.status |= StatusDF
				return
			}
		}
		runLBA, runLen = lba, uint64(length)
	}
	d.succeed()
}

// DecodeRange reads one 8-byte DATA SET MANAGEMENT range entry (ACS-3
// §7.5.3.2): LBA in bits 47:0, the number of sectors in bits 63:48, 0 for
// an unused entry. b must hold 8 bytes.
func DecodeRange(b []byte) (lba uint64, length uint16) {
	v := binary.LittleEndian.Uint64(b)
	return v & MaxLBA48, uint16(v >> 48)
}

// PutRange writes one range entry into b[:8].
func PutRange(b []byte, lba uint64, length uint16) {
	binary.LittleEndian.PutUint64(b, lba&MaxLBA48|uint64(length)<<48)
}
