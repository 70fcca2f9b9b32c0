package ata_test

import (
	"errors"
	"testing"

	"github.com/nhdkit/nhd/ata"
)

// What real hosts ask of the device beyond reading and writing: the
// interrupt line with device 1 selected, SMART, SECURITY FREEZE LOCK, a
// World Wide Name and the TRIM read-back word.

// INTRQ is released while the absent device 1 is selected and shows again,
// still pending, when device 0 is selected; reading status clears it.
func TestINTRQDevice1Selected(t *testing.T) {
	r := newRig(t, testInfo(64))
	r.dev.WriteReg(ata.RegDevice, uint8(ata.DeviceLBA))
	r.dev.WriteReg(ata.RegCommand, uint8(ata.CmdFlushCache))
	if !r.dev.INTRQ() {
		t.Fatal("no INTRQ after FLUSH CACHE")
	}
	r.dev.WriteReg(ata.RegDevice, uint8(ata.DeviceLBA|ata.DeviceDEV))
	if r.dev.INTRQ() {
		t.Fatal("INTRQ asserted with device 1 selected")
	}
	r.dev.WriteReg(ata.RegDevice, uint8(ata.DeviceLBA))
	if !r.dev.INTRQ() {
		t.Fatal("pending INTRQ lost across selecting device 1")
	}
	r.dev.ReadReg(ata.RegStatus)
	if r.dev.INTRQ() {
		t.Fatal("INTRQ still asserted after reading status")
	}
}

func smartCmd(sub uint8) ata.Command {
	return ata.Command{Op: ata.CmdSMART, Features: uint16(sub), LBA: ata.SMARTKey << 8}
}

func pageSum(b []byte) uint8 {
	var s uint8
	for _, x := range b {
		s += x
	}
	return s
}

// The SMART capability word (data bytes 368-369) advertises only what the
// device does: bit 0 (saves data before power saving), not bit 1
// (attribute autosave), since SMART ENABLE/DISABLE ATTRIBUTE AUTOSAVE (D2h)
// aborts. It used to read 0003h, and smartctl -S on then failed.
func TestSMARTCapabilities(t *testing.T) {
	r := newRig(t, testInfo(64))
	data := make([]byte, 512)
	c := smartCmd(ata.SMARTReadData)
	if err := r.host.Exec(&c, data); err != nil {
		t.Fatal(err)
	}
	if data[368] != 0x01 || data[369] != 0x00 {
		t.Errorf("SMART capability bytes 368-369 = %02x %02x, want 01 00", data[368], data[369])
	}
	autosave := smartCmd(0xD2)
	autosave.Count = 0xF1 // enable
	if err := r.host.Exec(&autosave, nil); !errors.Is(err, ata.ErrAborted) {
		t.Errorf("ATTRIBUTE AUTOSAVE: %v, want ABRT (the capability bit is clear)", err)
	}
}

func TestSMART(t *testing.T) {
	r := newRig(t, testInfo(64))
	id := r.dev.Identify()
	if id[82]&1 == 0 || id[85]&1 == 0 {
		t.Fatalf("IDENTIFY words 82/85 = %#04x/%#04x: SMART not supported and enabled", id[82], id[85])
	}
	c := smartCmd(ata.SMARTReturnStatus)
	if err := r.host.Exec(&c, nil); err != nil {
		t.Fatal(err)
	}
	if tf := r.host.ReadTaskFile(false); tf.LBAMid != 0x4F || tf.LBAHigh != 0xC2 {
		t.Fatalf("RETURN STATUS left %02x/%02x, want 4F/C2 (no threshold exceeded)", tf.LBAMid, tf.LBAHigh)
	}
	data, thr := make([]byte, 512), make([]byte, 512)
	c = smartCmd(ata.SMARTReadData)
	if err := r.host.Exec(&c, data); err != nil {
		t.Fatal(err)
	}
	c = smartCmd(ata.SMARTReadThresholds)
	if err := r.host.Exec(&c, thr); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string][]byte{"data": data, "thresholds": thr} {
		if s := pageSum(p); s != 0 {
			t.Errorf("SMART %s: bytes sum to %d, want 0", name, s)
		}
	}
	// Each attribute's value is above its threshold, IDs match between
	// the pages, and power cycles (0Ch) reads 1.
	n := 0
	for i := 0; i < 30; i++ {
		a, th := data[2+12*i:14+12*i], thr[2+12*i:14+12*i]
		if a[0] != th[0] {
			t.Fatalf("entry %d: attribute %#x, threshold for %#x", i, a[0], th[0])
		}
		if a[0] == 0 {
			continue
		}
		n++
		if a[3] <= th[1] {
			t.Errorf("attribute %#x value %d at or below threshold %d", a[0], a[3], th[1])
		}
		if a[0] == 0x0C && a[5] != 1 {
			t.Errorf("power cycle count raw %d", a[5])
		}
	}
	if n == 0 {
		t.Error("no SMART attributes")
	}
	// Disabled: only ENABLE OPERATIONS is accepted, and IDENTIFY says so.
	c = smartCmd(ata.SMARTDisable)
	if err := r.host.Exec(&c, nil); err != nil {
		t.Fatal(err)
	}
	if r.dev.Identify()[85]&1 != 0 {
		t.Error("word 85 bit 0 still set after DISABLE OPERATIONS")
	}
	c = smartCmd(ata.SMARTReadData)
	if err := r.host.Exec(&c, data); !errors.Is(err, ata.ErrAborted) {
		t.Errorf("READ DATA with SMART disabled: %v, want ABRT", err)
	}
	c = smartCmd(ata.SMARTEnable)
	if err := r.host.Exec(&c, nil); err != nil || r.dev.Identify()[85]&1 == 0 {
		t.Errorf("ENABLE OPERATIONS: %v, word 85 %#04x", err, r.dev.Identify()[85])
	}
	for name, c := range map[string]ata.Command{
		"without the key":    {Op: ata.CmdSMART, Features: ata.SMARTReturnStatus},
		"unknown subcommand": smartCmd(0xD4),
	} {
		if err := r.host.Exec(&c, nil); !errors.Is(err, ata.ErrAborted) {
			t.Errorf("SMART %s: %v, want ABRT", name, err)
		}
	}
}

func TestSecurityFreezeLock(t *testing.T) {
	r := newRig(t, testInfo(64))
	c := ata.Command{Op: ata.CmdSecurityFreezeLock}
	if err := r.host.Exec(&c, nil); err != nil {
		t.Fatalf("SECURITY FREEZE LOCK: %v", err)
	}
}

func TestWWN(t *testing.T) {
	info := testInfo(64)
	if id := info.Identify(); id[84]&0x100 != 0 || id[108] != 0 {
		t.Fatalf("no WWN given, yet word 84 = %#04x, 108 = %#04x", id[84], id[108])
	}
	info.WWN = 0x5000C500A1B2C3D4
	id := info.Identify()
	want := [4]uint16{0x5000, 0xC500, 0xA1B2, 0xC3D4}
	if got := [4]uint16(id[108:112]); got != want || id[84]&0x100 == 0 || id[87]&0x100 == 0 {
		t.Fatalf("words 108-111 %04x, 84 %#04x, 87 %#04x", got, id[84], id[87])
	}
	info.WWN = 0x6000C500A1B2C3D4
	if err := info.Validate(); !errors.Is(err, ata.ErrInfo) {
		t.Fatalf("WWN with NAA 6: %v, want ErrInfo", err)
	}
}

func TestTrimZeroesWord69(t *testing.T) {
	for _, tc := range []struct {
		trim, zeroes bool
		want         uint16
	}{{false, false, 0}, {true, false, 0}, {false, true, 0}, {true, true, 0x4020}} {
		info := testInfo(64)
		info.TRIM, info.TrimZeroes = tc.trim, tc.zeroes
		if got := info.Identify()[69]; got != tc.want {
			t.Errorf("TRIM %v TrimZeroes %v: word 69 = %#04x, want %#04x", tc.trim, tc.zeroes, got, tc.want)
		}
	}
}
