package ata

import (
	"math/bits"
	"strconv"
)

// XferMode is a transfer-mode code as SET FEATURES 03h takes it in the
// sector count register (the Xfer constants) and Identify.DMAMode
// returns it: the class in bits 7:3, the mode number in bits 2:0.
type XferMode uint8

// String returns hdparm's name for the mode: "pio0"-"pio7", "sdma0"-"sdma2",
// "mdma0"-"mdma2", "udma0"-"udma6"; "pio default" and "pio default
// (IORDY off)" for codes 00h and 01h, and the code in hex for others.
func (m XferMode) String() string {
	n := strconv.Itoa(int(m & 7))
	switch m &^ 7 {
	case XferPIODefault:
		switch m {
		case XferPIODefault:
			return "pio default"
		case XferPIODefNoIORDY:
			return "pio default (IORDY off)"
		}
	case XferPIO0:
		return "pio" + n
	case XferSWDMA0:
		if m&7 <= 2 {
			return "sdma" + n
		}
	case XferMWDMA0:
		if m&7 <= 2 {
			return "mdma" + n
		}
	case XferUDMA0:
		if m&7 <= 6 {
			return "udma" + n
		}
	}
	return "XferMode(0x" + strconv.FormatUint(uint64(m), 16) + ")"
}

// DMAModes returns the DMA transfer modes the device supports (words 62,
// 63 and 88), slowest class first: single-word, multiword, Ultra DMA.
func (id *Identify) DMAModes() []XferMode {
	var out []XferMode
	add := func(class XferMode, mask uint16) {
		for mask != 0 {
			i := bits.TrailingZeros16(mask)
			out = append(out, class+XferMode(i))
			mask &^= 1 << i
		}
	}
	add(XferSWDMA0, id[IDSWDMA]&7)
	add(XferMWDMA0, id[IDMWDMA]&7)
	if id[IDFieldValid]&4 != 0 {
		add(XferUDMA0, id[IDUDMA]&0x7F)
	}
	return out
}

// String names the command family: "PIO", "PIO multiple", "DMA".
func (m RWMode) String() string {
	switch m {
	case RWPIO:
		return "PIO"
	case RWPIOMultiple:
		return "PIO multiple"
	case RWDMA:
		return "DMA"
	}
	return "RWMode(" + strconv.Itoa(int(m)) + ")"
}
