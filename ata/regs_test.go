package ata_test

import (
	"io"
	"testing"

	"github.com/nhdkit/nhd/ata"
)

var errUnexpectedEOF = io.ErrUnexpectedEOF

func TestStrings(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{(ata.StatusDRDY | ata.StatusDSC).String(), "DRDY|DSC"},
		{(ata.StatusBSY | ata.StatusERR).String(), "BSY|ERR"},
		{ata.Status(0xFF).String(), "BSY|DRDY|DF|DSC|DRQ|CORR|IDX|ERR"},
		{ata.Status(0).String(), "0"},
		{(ata.ErrorIDNF | ata.ErrorABRT).String(), "IDNF|ABRT"},
		{ata.ErrorBits(0xFF).String(), "ICRC|UNC|MC|IDNF|MCR|ABRT|TK0NF|AMNF"},
		{(ata.ControlHOB | ata.ControlNIEN).String(), "HOB|nIEN"},
		{(ata.DeviceLBA | ata.DeviceDEV | 5).String(), "LBA|DEV|head=05h"},
		{ata.CmdReadDMAExt.String(), "READ DMA EXT"},
		{ata.CmdWriteMultipleFUAExt.String(), "WRITE MULTIPLE FUA EXT"},
		{ata.CmdDataSetManagement.String(), "DATA SET MANAGEMENT"},
		{ata.Opcode(0x5A).String(), "opcode(5Ah)"},
		{ata.ProtocolPIOIn.String(), "PIO in"},
		{ata.AddrCHS.String(), "CHS"},
		{ata.StatePIOOut.String(), "PIO out"},
		{ata.EvSRSTRelease.String(), "srst-release"},
		{ata.RegLBAMid.String(), "lba-mid"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func TestStatusOK(t *testing.T) {
	for v := 0; v < 256; v++ {
		s := ata.Status(v)
		want := s&0xE9 == 0x40 // BSY|DRDY|DF|DRQ|ERR = E9h
		if s.OK() != want {
			t.Errorf("Status(%02x).OK() = %v", v, s.OK())
		}
	}
}

// Every opcode the issue lists has a name and the device implements it.
func TestCommandSetSupported(t *testing.T) {
	for _, op := range []ata.Opcode{
		0x20, 0x21, 0x24, 0x30, 0x31, 0x34, 0xC4, 0xC5, 0x29, 0x39, 0xC6, 0xC8, 0xC9, 0xCA, 0xCB, 0x25, 0x35,
		0x3D, 0xCE, 0x40, 0x41, 0x42, 0xEC, 0xEF, 0xE7, 0xEA, 0x06, 0xF8, 0x27, 0xE5, 0x98, 0xE0, 0xE1, 0xE2,
		0xE3, 0xE6, 0x90, 0x91, 0x70, 0x10, 0x00,
	} {
		if !op.Supported() || !op.Known() {
			t.Errorf("%02x %v not supported", uint8(op), op)
		}
	}
	n := 0
	for v := 0; v < 256; v++ {
		if ata.Opcode(v).Supported() {
			n++
		}
	}
	if n != 43 { // 41, then SMART and SECURITY FREEZE LOCK
		t.Errorf("%d supported opcodes, want 43", n)
	}
}

// The register file's HOB FIFO: each write pushes the old byte; HOB=1 reads
// it back; a write clears HOB.
func TestHOBFIFO(t *testing.T) {
	d := newTestDevice(t, plainInfo(4096), nil)
	regs := []ata.Reg{ata.RegCount, ata.RegLBALow, ata.RegLBAMid, ata.RegLBAHigh}
	for i, r := range regs {
		d.WriteReg(r, uint8(0x10+i))
		d.WriteReg(r, uint8(0x20+i))
	}
	for i, r := range regs {
		if got := d.ReadReg(r); got != uint8(0x20+i) {
			t.Errorf("%v current = %02x", r, got)
		}
	}
	d.WriteReg(ata.RegDeviceControl, uint8(ata.ControlHOB))
	for i, r := range regs {
		if got := d.ReadReg(r); got != uint8(0x10+i) {
			t.Errorf("%v HOB = %02x", r, got)
		}
	}
	// A third write pushes the second byte and clears HOB.
	d.WriteReg(ata.RegCount, 0x30)
	if got := d.ReadReg(ata.RegCount); got != 0x30 {
		t.Errorf("after write with HOB set: count = %02x, want 30 (HOB cleared)", got)
	}
	d.WriteReg(ata.RegDeviceControl, uint8(ata.ControlHOB))
	if got := d.ReadReg(ata.RegCount); got != 0x20 {
		t.Errorf("HOB count = %02x, want 20", got)
	}
	if tf := d.TaskFile(); tf.Count != 0x30 || tf.HOBCount != 0x20 || tf.Control != ata.ControlHOB {
		t.Errorf("TaskFile = %+v", tf)
	}
}

func TestTransition(t *testing.T) {
	states := []ata.State{ata.StateIdle, ata.StateBusy, ata.StatePIOIn, ata.StatePIOOut, ata.StateDMA, ata.StateReset}
	edges := map[[2]int]ata.State{
		{0, int(ata.EvCommand)}:     ata.StateBusy,
		{1, int(ata.EvDataIn)}:      ata.StatePIOIn,
		{1, int(ata.EvDataOut)}:     ata.StatePIOOut,
		{1, int(ata.EvDMA)}:         ata.StateDMA,
		{1, int(ata.EvComplete)}:    ata.StateIdle,
		{2, int(ata.EvBlockDone)}:   ata.StateBusy,
		{3, int(ata.EvBlockDone)}:   ata.StateBusy,
		{4, int(ata.EvDMADone)}:     ata.StateBusy,
		{5, int(ata.EvSRSTRelease)}: ata.StateIdle,
	}
	for si, s := range states {
		for e := ata.EvCommand; e <= ata.EvSRSTRelease; e++ {
			got, err := ata.Transition(s, e)
			want, ok := edges[[2]int{si, int(e)}]
			if e == ata.EvSRST {
				want, ok = ata.StateReset, true
			}
			if ok {
				if err != nil || got != want {
					t.Errorf("%v --%v--> %v, %v; want %v", s, e, got, err, want)
				}
				continue
			}
			var te *ata.TransitionError
			if err == nil || !asTransition(err, &te) || te.State != s || te.Event != e || got != s {
				t.Errorf("%v --%v--> %v, %v; want a TransitionError", s, e, got, err)
			}
		}
	}
}
