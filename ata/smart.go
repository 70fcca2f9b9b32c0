package ata

// SMART subcommands (ACS-3 7.44), in the features register of a SMART
// command (B0h) whose LBA mid and high registers hold the key 4Fh/C2h.
const (
	SMARTReadData       = 0xD0
	SMARTReadThresholds = 0xD1
	SMARTEnable         = 0xD8
	SMARTDisable        = 0xD9
	SMARTReturnStatus   = 0xDA

	// SMARTKey is the LBA mid (bits 7:0) and high (bits 15:8) registers
	// every SMART command carries; RETURN STATUS leaves it there when no
	// threshold is exceeded (2CF4h would say one is).
	SMARTKey = 0xC24F
)

// smartDataIn reports whether c is SMART READ DATA or READ THRESHOLDS,
// which move one 512-byte page by PIO.
func (c *Command) smartDataIn() bool {
	if c.Op != CmdSMART {
		return false
	}
	f := uint8(c.Features)
	return f == SMARTReadData || f == SMARTReadThresholds
}

// smartAttr is one attribute the device reports: an ID, its flags (bit 0
// pre-failure, bit 1 online), normalized value and threshold, raw value.
type smartAttr struct {
	id        uint8
	flags     uint16
	value     uint8
	threshold uint8
	raw       uint64
}

// smartAttrs are the attributes of a device that never wears: every value
// at 100, far above its threshold.
var smartAttrs = [...]smartAttr{
	{0x01, 0x000B, 100, 6, 0},  // read error rate
	{0x05, 0x0033, 100, 36, 0}, // reallocated sectors
	{0x09, 0x0032, 100, 0, 0},  // power-on hours
	{0x0C, 0x0032, 100, 0, 1},  // power cycles
}

// smart runs a SMART command. With SMART disabled only ENABLE OPERATIONS
// is accepted; a command without the key aborts.
func (d *Device) smart() {
	c := &d.cmd
	sub := uint8(c.Features)
	if uint16(c.LBA>>8) != SMARTKey || (d.set.smartOff && sub != SMARTEnable) {
		d.abort()
		return
	}
	switch sub {
	case SMARTEnable, SMARTDisable:
		d.set.smartOff = sub == SMARTDisable
		d.refreshIdentify()
		d.succeed()
	case SMARTReturnStatus:
		d.lbam[0], d.lbah[0] = SMARTKey&0xFF, SMARTKey>>8
		d.succeed()
	case SMARTReadData, SMARTReadThresholds:
		putSMARTPage(d.buf[:512], sub == SMARTReadThresholds)
		d.lba, d.left, d.blk = 0, 0, 1
		d.pos, d.end = 0, 512
		d.step(EvDataIn)
		d.status |= StatusDRDY | StatusDSC
		d.raise()
	default:
		d.abort()
	}
}

// putSMARTPage writes the SMART data structure (ACS-3 table 130, or the
// thresholds page its vendors share) into b: a revision word, 30 entries
// of 12 bytes, for data the capability fields, and the checksum in byte
// 511 that makes all 512 bytes sum to 0.
func putSMARTPage(b []byte, thresholds bool) {
	clear(b)
	b[0] = 0x10 // data structure revision 0010h
	for i, a := range smartAttrs {
		e := b[2+12*i : 14+12*i]
		e[0] = a.id
		if thresholds {
			e[1] = a.threshold
			continue
		}
		e[1], e[2] = uint8(a.flags), uint8(a.flags>>8)
		e[3], e[4] = a.value, a.value // current, worst
		for j := range 6 {
			e[5+j] = uint8(a.raw >> (8 * j))
		}
	}
	if !thresholds {
		b[362] = 0x00 // off-line data collection never started
		b[363] = 0x00 // no self-test has run
		// SMART capability: bit 0, saves data before power saving. Bit 1
		// (attribute autosave, subcommand D2h) stays clear: smart aborts D2h.
		b[368] = 0x01
	}
	var sum uint8
	for _, x := range b[:511] {
		sum += x
	}
	b[511] = -sum
}
