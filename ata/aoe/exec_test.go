package aoe

import (
	"bytes"
	"testing"

	"github.com/nhdkit/nhd/ata"
)

// The golden frames of this file: a request to e0.1 with tag 5, the
// reply's header, and 24 zero bytes (a reply's padding).
const (
	hdr      = `02 00 00 00 ae 01   52 54 00 12 34 56   88 a2   10 00   00 00 01 00   00 00 00 05`
	replyHdr = `52 54 00 12 34 56   02 00 00 00 ae 01   88 a2   18 00   00 00 01 00   00 00 00 05`
	zeros24  = `00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00`
)

// The opcode, not the E flag, sets the LBA layout, and addressing is by
// LBA (vblade's rules). An EXT opcode without E, or a 28-bit opcode with E,
// used to run at a truncated address: a write to LBA 01000005h, past the
// end of the disk, landed on sector 5. Now it is refused with IDNF, and an
// E flag that disagrees with an in-range address changes nothing, also
// when lba3 lacks the LBA bit (a 48-bit layout's lba3 of 00h, which was
// taken as a CHS address, one sector off).
func TestATAEFlagFollowsOpcode(t *testing.T) {
	for _, tc := range []struct {
		name       string
		arg, reply string // the ATA argument of the request and the whole reply
		sector     int    // the sector the write must land on, or -1
	}{
		{"WRITE SECTORS EXT without E, LBA 01000005h",
			`01 00 01 34   05 00 00 01 00 00   00 00`,
			replyHdr + `01 14 01 41   05 00 00 01 00 00   00 00` + zeros24, -1},
		{"WRITE SECTORS with E, lba3 E1h",
			`41 00 01 30   05 00 00 e1 00 00   00 00`,
			replyHdr + `41 14 01 41   05 00 00 01 00 00   00 00` + zeros24, -1},
		{"WRITE SECTORS EXT without E, LBA 5",
			`01 00 01 34   05 00 00 00 00 00   00 00`,
			replyHdr + `01 00 00 50   05 00 00 00 00 00   00 00` + zeros24, 5},
		{"WRITE SECTORS with E, lba3 E0h, lba4-5 ignored",
			`41 00 01 30   05 00 00 e0 ff ff   00 00`,
			replyHdr + `41 00 00 50   05 00 00 e0 ff ff   00 00` + zeros24, 5},
		{"WRITE SECTORS with E, LBA 5 laid out for 48 bits (lba3 00h)",
			`41 00 01 30   05 00 00 00 00 00   00 00`,
			replyHdr + `41 00 00 50   05 00 00 00 00 00   00 00` + zeros24, 5},
		{"WRITE SECTORS without E, lba3 A0h (no LBA bit)",
			`01 00 01 30   05 00 00 a0 00 00   00 00`,
			replyHdr + `01 00 00 50   05 00 00 a0 00 00   00 00` + zeros24, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, mem := newSyncTarget(t, testSectors)
			data := bytes.Repeat([]byte{0xAB}, SectorSize)
			out := s.do(append(unhex(t, hdr+tc.arg), data...))
			if want := unhex(t, tc.reply); len(out) != 1 || !bytes.Equal(out[0], want) {
				t.Fatalf("replies %x\nwant %x", out, want)
			}
			for i := range testSectors {
				got := mem.data[i*SectorSize : (i+1)*SectorSize]
				if written := bytes.Equal(got, data); written != (i == tc.sector) {
					t.Errorf("sector %d written: %v", i, written)
				}
			}
		})
	}
}

// busyPort is a device that never leaves BSY.
type busyPort struct{}

func (busyPort) ReadReg(ata.Reg) uint8   { return uint8(ata.StatusBSY) }
func (busyPort) WriteReg(ata.Reg, uint8) {}
func (busyPort) ReadData16() uint16      { return 0 }
func (busyPort) WriteData16(uint16)      {}
func (busyPort) ReadData32() uint32      { return 0 }
func (busyPort) WriteData32(uint32)      {}
func (busyPort) INTRQ() bool             { return false }

// An error the device did not end the command with is reported as the
// device would: a buffer the host driver refuses as ABRT, and only a
// device that breaks the protocol (here: BSY forever) as a device fault.
// Before, both were DRDY|DF|ERR.
func TestATAHostErrors(t *testing.T) {
	for _, tc := range []struct {
		name       string
		setup      func(*syncTarget)
		arg, reply string
	}{
		{"READ SECTORS EXT, host sector size 1024", func(s *syncTarget) { s.d.Hosts[0].SectorSize = 1024 },
			`40 00 01 24   00 00 00 00 00 00   00 00`,
			replyHdr + `40 04 01 41   00 00 00 00 00 00   00 00` + zeros24},
		{"READ SECTORS EXT, device stuck BSY", func(s *syncTarget) {
			s.d.Hosts[0] = &ata.Host{Port: busyPort{}, MaxPolls: 4}
		},
			`40 00 01 24   00 00 00 00 00 00   00 00`,
			replyHdr + `40 04 01 61   00 00 00 00 00 00   00 00` + zeros24},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newSyncTarget(t, testSectors)
			tc.setup(s)
			out := s.do(unhex(t, hdr+tc.arg))
			if want := unhex(t, tc.reply); len(out) != 1 || !bytes.Equal(out[0], want) {
				t.Fatalf("replies %x\nwant %x", out, want)
			}
		})
	}
}
