package ata

import "io"

// TaskFile is one command's worth of register values: the current byte of
// each command block register and, for 48-bit commands, the "previous
// content" byte the host wrote first (read back with HOB=1). It is the
// decoded form of what a host writes through the registers, of an AHCI or
// SATA Host-to-Device Register FIS, or of an ATA-over-Ethernet header.
type TaskFile struct {
	Command  Opcode
	Features uint8
	Count    uint8
	LBALow   uint8
	LBAMid   uint8
	LBAHigh  uint8
	Device   DeviceBits

	HOBFeatures uint8
	HOBCount    uint8
	HOBLBALow   uint8
	HOBLBAMid   uint8
	HOBLBAHigh  uint8

	Control Control
}

// FISSize is the length of a Register Host-to-Device FIS.
const FISSize = 20

// FISTypeRegH2D is byte 0 of a Register Host-to-Device FIS.
const FISTypeRegH2D = 0x27

// FIS byte offsets (Serial ATA 3.x §10.5.5, AHCI 1.3 §4.2.3.1; QEMU's
// handle_reg_h2d_fis reads the same bytes).
//
//	byte   0      1          2        3
//	 0   27h    C|PM port  command  features 7:0
//	 4   LBA 7:0  LBA 15:8  LBA 23:16  device
//	 8   LBA 31:24 LBA 39:32 LBA 47:40 features 15:8
//	12   count 7:0 count 15:8 ICC     control
//	16   auxiliary (reserved, zero)
const (
	fisType     = 0
	fisFlags    = 1
	fisCommand  = 2
	fisFeatures = 3
	fisLBALow   = 4
	fisLBAMid   = 5
	fisLBAHigh  = 6
	fisDevice   = 7
	fisHOBLow   = 8
	fisHOBMid   = 9
	fisHOBHigh  = 10
	fisHOBFeat  = 11
	fisCount    = 12
	fisHOBCount = 13
	fisControl  = 15

	fisC = 0x80 // the FIS updates the command register
)

// PutFIS writes tf into b as a Register Host-to-Device FIS with the C bit
// set (a command) and port multiplier port 0.
func (tf *TaskFile) PutFIS(b *[FISSize]byte) {
	*b = [FISSize]byte{}
	b[fisType] = FISTypeRegH2D
	b[fisFlags] = fisC
	b[fisCommand] = uint8(tf.Command)
	b[fisFeatures] = tf.Features
	b[fisLBALow] = tf.LBALow
	b[fisLBAMid] = tf.LBAMid
	b[fisLBAHigh] = tf.LBAHigh
	b[fisDevice] = uint8(tf.Device)
	b[fisHOBLow] = tf.HOBLBALow
	b[fisHOBMid] = tf.HOBLBAMid
	b[fisHOBHigh] = tf.HOBLBAHigh
	b[fisHOBFeat] = tf.HOBFeatures
	b[fisCount] = tf.Count
	b[fisHOBCount] = tf.HOBCount
	b[fisControl] = uint8(tf.Control)
}

// ParseFIS reads a Register Host-to-Device FIS. A short b is
// io.ErrUnexpectedEOF; another FIS type is ErrNotH2DFIS. The ICC byte and
// the auxiliary field are ignored.
func (tf *TaskFile) ParseFIS(b []byte) error {
	if len(b) < FISSize {
		return io.ErrUnexpectedEOF
	}
	if b[fisType] != FISTypeRegH2D {
		return ErrNotH2DFIS
	}
	*tf = TaskFile{
		Command:     Opcode(b[fisCommand]),
		Features:    b[fisFeatures],
		LBALow:      b[fisLBALow],
		LBAMid:      b[fisLBAMid],
		LBAHigh:     b[fisLBAHigh],
		Device:      DeviceBits(b[fisDevice]),
		HOBLBALow:   b[fisHOBLow],
		HOBLBAMid:   b[fisHOBMid],
		HOBLBAHigh:  b[fisHOBHigh],
		HOBFeatures: b[fisHOBFeat],
		Count:       b[fisCount],
		HOBCount:    b[fisHOBCount],
		Control:     Control(b[fisControl]),
	}
	return nil
}

// lba48 returns the six LBA bytes as a 48-bit number.
func (tf *TaskFile) lba48() uint64 {
	return uint64(tf.LBALow) | uint64(tf.LBAMid)<<8 | uint64(tf.LBAHigh)<<16 |
		uint64(tf.HOBLBALow)<<24 | uint64(tf.HOBLBAMid)<<32 | uint64(tf.HOBLBAHigh)<<40
}

func (tf *TaskFile) lba24() uint64 {
	return uint64(tf.LBALow) | uint64(tf.LBAMid)<<8 | uint64(tf.LBAHigh)<<16
}

func (tf *TaskFile) setLBA48(lba uint64) {
	tf.LBALow, tf.LBAMid, tf.LBAHigh = uint8(lba), uint8(lba>>8), uint8(lba>>16)
	tf.HOBLBALow, tf.HOBLBAMid, tf.HOBLBAHigh = uint8(lba>>24), uint8(lba>>32), uint8(lba>>40)
}

func (tf *TaskFile) setLBA24(lba uint64) {
	tf.LBALow, tf.LBAMid, tf.LBAHigh = uint8(lba), uint8(lba>>8), uint8(lba>>16)
}

// FISTypeRegD2H is byte 0 of a Register Device-to-Host FIS.
const FISTypeRegD2H = 0x34

// PutD2HFIS writes a Register Device-to-Host FIS (Serial ATA 3.x
// §10.5.6), the way an AHCI or SATA front end reports a command's end:
//
//	byte   0      1        2       3
//	 0   34h    I|PM port  status  error
//	 4   LBA 7:0  LBA 15:8  LBA 23:16  device
//	 8   LBA 31:24 LBA 39:32 LBA 47:40 reserved
//	12   count 7:0 count 15:8 reserved reserved
//	16   reserved
//
// tf supplies the LBA, device and count bytes (current and HOB); irq sets
// the I bit.
func PutD2HFIS(b *[FISSize]byte, st Status, e ErrorBits, tf *TaskFile, irq bool) {
	*b = [FISSize]byte{}
	b[0] = FISTypeRegD2H
	if irq {
		b[1] = 0x40
	}
	b[2], b[3] = uint8(st), uint8(e)
	b[4], b[5], b[6], b[7] = tf.LBALow, tf.LBAMid, tf.LBAHigh, uint8(tf.Device)
	b[8], b[9], b[10] = tf.HOBLBALow, tf.HOBLBAMid, tf.HOBLBAHigh
	b[12], b[13] = tf.Count, tf.HOBCount
}
