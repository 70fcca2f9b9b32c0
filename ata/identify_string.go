package ata

import (
	"fmt"
	"strconv"
	"strings"
)

// IDENTIFY DEVICE words read only for printing (ACS-3 Table 45).
const (
	IDQueueDepth = 75 // bits 4:0: maximum queue depth - 1
	IDSATACaps   = 76 // SATA capabilities: bit 8 NCQ; 0000h or FFFFh: not reported
)

// NCQ reports whether the device supports Native Command Queueing (word
// 76 bit 8), and its queue depth (word 75 bits 4:0, plus one).
func (id *Identify) NCQ() (ok bool, depth int) {
	w := id[IDSATACaps]
	if w == 0 || w == 0xFFFF || w&0x0100 == 0 {
		return false, 0
	}
	return true, int(id[IDQueueDepth]&0x1F) + 1
}

// PhysicalSectorSize returns the bytes per physical sector: the logical
// size times 2^(word 106 bits 3:0) when word 106 says so.
func (id *Identify) PhysicalSectorSize() int {
	w := id[IDSectorSize]
	if w&0xC000 == 0x4000 && w&0x2000 != 0 {
		return id.LogicalSectorSize() << (w & 0xF)
	}
	return id.LogicalSectorSize()
}

// String prints the data as `hdparm -I` does, in its words, for the parts
// this package reads: identity, capacity and sector sizes, the multiple
// count, the DMA and PIO modes (the selected DMA mode starred), write
// cache, 48-bit addressing, NCQ and TRIM (starred when enabled), and the
// checksum. Each line it prints is a line hdparm prints for the same
// data, in the same order, so the two can be compared line by line; only
// a wrong checksum is told differently (with the byte word 255 should
// hold).
func (id *Identify) String() string {
	var b strings.Builder
	b.WriteString("ATA device, with non-removable media\n")
	fmt.Fprintf(&b, "\tModel Number:       %s\n", id.Model())
	fmt.Fprintf(&b, "\tSerial Number:      %s\n", id.Serial())
	fmt.Fprintf(&b, "\tFirmware Revision:  %s\n", id.Firmware())
	id.printConfiguration(&b)
	id.printCapabilities(&b)
	id.printFeatures(&b)
	switch {
	case uint8(id[IDIntegrity]) != IntegritySignature:
		fmt.Fprintf(&b, "Integrity word not set (found 0x%04x, expected 0x%02xa5)\n", id[IDIntegrity], id.Checksum())
	case id.ChecksumOK():
		b.WriteString("Checksum: correct\n")
	default:
		sum := uint8(id[IDIntegrity]>>8) - id.Checksum() // what the 512 bytes sum to
		fmt.Fprintf(&b, "Checksum: incorrect (bytes sum to 0x%02x; checksum byte 0x%02x, should be 0x%02x)\n",
			sum, id[IDIntegrity]>>8, id.Checksum())
	}
	return b.String()
}

// printConfiguration prints the capacities, the sector sizes and the
// device size, which hdparm counts in logical sectors.
func (id *Identify) printConfiguration(b *strings.Builder) {
	b.WriteString("Configuration:\n")
	lba28 := uint32(id[IDLBA28Capacity]) | uint32(id[IDLBA28Capacity+1])<<16
	fmt.Fprintf(b, "\tLBA    user addressable sectors:%12d\n", lba28)
	if id.LBA48() {
		fmt.Fprintf(b, "\tLBA48  user addressable sectors:%12d\n", id.lba48Capacity())
	}
	fmt.Fprintf(b, "\tLogical  Sector size:%22d bytes\n", id.LogicalSectorSize())
	fmt.Fprintf(b, "\tPhysical Sector size:%22d bytes\n", id.PhysicalSectorSize())
	bytes := id.Sectors() * uint64(id.LogicalSectorSize())
	fmt.Fprintf(b, "\tdevice size with M = 1024*1024:%12d MBytes\n", bytes>>20)
	fmt.Fprintf(b, "\tdevice size with M = 1000*1000:%12d MBytes (%d GB)\n", bytes/1e6, bytes/1e9)
	switch r := id[IDRotationRate]; {
	case r == NonRotating:
		b.WriteString("\tNominal Media Rotation Rate: Solid State Device\n")
	case r >= 0x0401 && r != 0xFFFF:
		fmt.Fprintf(b, "\tNominal Media Rotation Rate: %d\n", r)
	}
}

// printCapabilities prints the queue depth, the multiple count and the
// transfer modes.
func (id *Identify) printCapabilities(b *strings.Builder) {
	b.WriteString("Capabilities:\n")
	if ok, depth := id.NCQ(); ok {
		fmt.Fprintf(b, "\tQueue depth: %d\n", depth)
	}
	if m := id.MaxMultiple(); m != 0 {
		fmt.Fprintf(b, "\tR/W multiple sector transfer: Max = %d\tCurrent = ", m)
		if id[IDMultiple]&0x0100 != 0 {
			fmt.Fprintf(b, "%d\n", id.Multiple())
		} else {
			b.WriteString("?\n")
		}
	}
	if id[IDCapabilities]&0x0100 == 0 {
		b.WriteString("\tDMA: not supported\n")
	} else {
		b.WriteString("\tDMA:")
		sel := id.DMAMode()
		for _, m := range id.DMAModes() {
			b.WriteByte(' ')
			if m == sel {
				b.WriteByte('*')
			}
			b.WriteString(m.String())
		}
		b.WriteByte('\n')
	}
	b.WriteString("\tPIO:")
	for i := range min(int(id[IDPIOTiming]>>8), 2) + 1 {
		b.WriteString(" pio" + strconv.Itoa(i))
	}
	if id[IDFieldValid]&2 != 0 {
		for i, name := range [...]string{" pio3", " pio4"} {
			if id[IDPIOModes]&(1<<i) != 0 {
				b.WriteString(name)
			}
		}
	}
	b.WriteByte('\n')
}

// printFeatures prints the features of the list hdparm prints that this
// package sets or reads, in hdparm's order.
func (id *Identify) printFeatures(b *strings.Builder) {
	b.WriteString("Commands/features:\n\tEnabled\tSupported:\n")
	feature := func(enabled bool, name string) {
		star := ' '
		if enabled {
			star = '*'
		}
		fmt.Fprintf(b, "\t   %c\t%s\n", star, name)
	}
	if id[IDCmdSet1]&0x0020 != 0 {
		feature(id.WriteCacheEnabled(), "Write cache")
	}
	if id[IDCmdSet2]&0xC000 == 0x4000 && id[IDCmdSet2]&0x0400 != 0 {
		feature(id[IDCmdEnabled2]&0x0400 != 0, "48-bit Address feature set")
	}
	if ok, _ := id.NCQ(); ok {
		feature(true, "Native Command Queueing (NCQ)")
	}
	if id.TRIM() {
		feature(true, fmt.Sprintf("Data Set Management TRIM supported (limit %d blocks)", id[IDMaxDSMBlocks]))
	}
}
