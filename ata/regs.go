package ata

import "strings"

// Reg names one register of the ATA register file as the host addresses it
// (ATA/ATAPI-7 vol. 1 §5.2, ACS-3 §6). The command block registers sit at
// offsets 0-7 of the command block; the control block register (alternate
// status on read, device control on write) is RegControl. Several registers
// share an address and differ by direction: RegError is read and RegFeatures
// is written at offset 1, RegStatus is read and RegCommand is written at
// offset 7, RegAltStatus is read and RegDeviceControl is written in the
// control block.
type Reg uint8

// The registers.
//
//	offset  read          write
//	0       data          data
//	1       error         features
//	2       sector count  sector count
//	3       LBA low       LBA low       (CHS: sector number)
//	4       LBA mid       LBA mid       (CHS: cylinder low)
//	5       LBA high      LBA high      (CHS: cylinder high)
//	6       device        device        (CHS: head in bits 3:0)
//	7       status        command
//	ctl     alt. status   device control
const (
	RegData     Reg = 0
	RegError    Reg = 1
	RegFeatures Reg = 1
	RegCount    Reg = 2
	RegLBALow   Reg = 3
	RegLBAMid   Reg = 4
	RegLBAHigh  Reg = 5
	RegDevice   Reg = 6
	RegStatus   Reg = 7
	RegCommand  Reg = 7
	// RegControl is the control block register: alternate status on read,
	// device control on write.
	RegControl       Reg = 8
	RegAltStatus     Reg = 8
	RegDeviceControl Reg = 8
)

var regNames = [...]string{"data", "error/features", "count", "lba-low", "lba-mid", "lba-high", "device", "status/command", "altstatus/control"}

func (r Reg) String() string {
	if int(r) < len(regNames) {
		return regNames[r]
	}
	return "reg(" + hex8(uint8(r)) + ")"
}

// Status is the status register (ATA/ATAPI-7 §6.15 and ACS-3 §6.2).
//
//	bit  7    6     5   4    3    2     1    0
//	     BSY  DRDY  DF  DSC  DRQ  CORR  IDX  ERR
type Status uint8

// Status bits. DF is named DEVICE FAULT in ACS (Linux ATA_DF), DSC is the
// obsolete "device seek complete" that emulators still set, CORR and IDX are
// obsolete.
const (
	StatusERR  Status = 0x01
	StatusIDX  Status = 0x02
	StatusCORR Status = 0x04
	StatusDRQ  Status = 0x08
	StatusDSC  Status = 0x10
	StatusDF   Status = 0x20
	StatusDRDY Status = 0x40
	StatusBSY  Status = 0x80
)

// Has reports whether all the bits of b are set in s.
func (s Status) Has(b Status) bool { return s&b == b }

// OK reports whether s is the status of a successfully completed command by
// the test Linux libata applies (ata_ok): of BSY, DRDY, DF, DRQ and ERR only
// DRDY is set.
func (s Status) OK() bool {
	return s&(StatusBSY|StatusDRDY|StatusDF|StatusDRQ|StatusERR) == StatusDRDY
}

var statusNames = [8]string{"ERR", "IDX", "CORR", "DRQ", "DSC", "DF", "DRDY", "BSY"}

// String lists the set bits from the most significant, joined by "|", for
// example "DRDY|DSC"; 0 prints as "0".
func (s Status) String() string { return bitString(uint8(s), &statusNames) }

// ErrorBits is the error register (ACS-3 §6.3), valid when StatusERR is set.
//
//	bit  7     6    5   4     3    2     1      0
//	     ICRC  UNC  MC  IDNF  MCR  ABRT  TK0NF  AMNF
type ErrorBits uint8

// Error register bits. After EXECUTE DEVICE DIAGNOSTIC and reset the register
// holds a diagnostic code instead (01h: passed).
const (
	ErrorAMNF  ErrorBits = 0x01
	ErrorTK0NF ErrorBits = 0x02
	ErrorABRT  ErrorBits = 0x04
	ErrorMCR   ErrorBits = 0x08
	ErrorIDNF  ErrorBits = 0x10
	ErrorMC    ErrorBits = 0x20
	ErrorUNC   ErrorBits = 0x40
	ErrorICRC  ErrorBits = 0x80
)

// Has reports whether all the bits of b are set in e.
func (e ErrorBits) Has(b ErrorBits) bool { return e&b == b }

var errorNames = [8]string{"AMNF", "TK0NF", "ABRT", "MCR", "IDNF", "MC", "UNC", "ICRC"}

func (e ErrorBits) String() string { return bitString(uint8(e), &errorNames) }

// DeviceBits is the device (drive/head) register (ACS-3 §6.4).
//
//	bit  7    6    5    4    3:0
//	     obs  LBA  obs  DEV  head (CHS) or LBA 27:24 (LBA28)
type DeviceBits uint8

// Device register bits. DeviceObsolete (A0h) is what old hosts always set;
// the device ignores it.
const (
	DeviceHeadMask DeviceBits = 0x0F
	DeviceDEV      DeviceBits = 0x10
	DeviceLBA      DeviceBits = 0x40
	DeviceObsolete DeviceBits = 0xA0
)

// Has reports whether all the bits of b are set in d.
func (d DeviceBits) Has(b DeviceBits) bool { return d&b == b }

// Head returns bits 3:0: the head in CHS mode, LBA 27:24 in LBA28 mode.
func (d DeviceBits) Head() uint8 { return uint8(d & DeviceHeadMask) }

func (d DeviceBits) String() string {
	var b strings.Builder
	if d&DeviceLBA != 0 {
		b.WriteString("LBA|")
	}
	if d&DeviceDEV != 0 {
		b.WriteString("DEV|")
	}
	if d&0xA0 != 0 {
		b.WriteString("obs=" + hex8(uint8(d&0xA0)) + "|")
	}
	b.WriteString("head=")
	b.WriteString(hex8(d.Head()))
	return b.String()
}

// Control is the device control register (ACS-3 §6.5), written through the
// control block.
//
//	bit  7    6:3                  2     1     0
//	     HOB  reserved (bit 3 obs) SRST  nIEN  0
type Control uint8

// Device control bits. ControlObsolete (08h) is set by Linux and ignored.
const (
	ControlNIEN     Control = 0x02
	ControlSRST     Control = 0x04
	ControlObsolete Control = 0x08
	ControlHOB      Control = 0x80
)

// Has reports whether all the bits of b are set in c.
func (c Control) Has(b Control) bool { return c&b == b }

var controlNames = [8]string{"bit0", "nIEN", "SRST", "obs", "bit4", "bit5", "bit6", "HOB"}

func (c Control) String() string { return bitString(uint8(c), &controlNames) }

func bitString(v uint8, names *[8]string) string {
	if v == 0 {
		return "0"
	}
	var b strings.Builder
	for i := 7; i >= 0; i-- {
		if v&(1<<i) != 0 {
			if b.Len() > 0 {
				b.WriteByte('|')
			}
			b.WriteString(names[i])
		}
	}
	return b.String()
}

const hexDigits = "0123456789ABCDEF"

func hex8(v uint8) string { return string([]byte{hexDigits[v>>4], hexDigits[v&15], 'h'}) }
