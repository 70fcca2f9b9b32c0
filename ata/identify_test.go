package ata_test

import (
	"errors"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/internal/testenv"
)

func TestIdentifyWords(t *testing.T) {
	info := ata.DeviceInfo{
		Model: "NHD Network Hard Disk", Serial: "NHD0001", Firmware: "1.0",
		Sectors: 0x1_2345_6789, TRIM: true, WriteCache: true, RotationRate: 7200,
		PhysicalSectorSize: 4096,
	}
	if err := info.Validate(); err != nil {
		t.Fatal(err)
	}
	id := info.Identify()
	want := map[int]uint16{
		0:   0x0040,
		1:   16383,
		2:   0xC837,
		3:   16,
		6:   63,
		10:  'N'<<8 | 'H', // first character in the high byte
		11:  'D'<<8 | '0',
		13:  '1'<<8 | ' ',
		19:  ' '<<8 | ' ',
		23:  '1'<<8 | '.',
		24:  '0'<<8 | ' ',
		27:  'N'<<8 | 'H',
		46:  ' '<<8 | ' ',
		47:  0x8010,
		49:  0x0F00,
		50:  0x4000,
		53:  0x0007,
		54:  16383,
		55:  16,
		56:  63,
		57:  0xFC10, // 16514064 = 00FB FC10
		58:  0x00FB,
		59:  0x0110,
		60:  0xFFFF, // LBA28 clamp 0FFFFFFFh
		61:  0x0FFF,
		62:  0x0000,
		63:  0x0007,
		64:  0x0003,
		65:  120,
		66:  120,
		67:  120,
		68:  120,
		80:  0x01F0,
		82:  0x4029,
		83:  0x7400,
		84:  0x4040,
		85:  0x4029,
		86:  0x3400,
		87:  0x4040,
		88:  0x407F, // UDMA 0-6 supported, UDMA6 selected
		93:  0x6001,
		100: 0x6789,
		101: 0x2345,
		102: 0x0001,
		103: 0x0000,
		105: 8,
		106: 0x6003, // 8 logical per physical
		169: 0x0001,
		217: 7200,
	}
	for w, v := range want {
		if id[w] != v {
			t.Errorf("word %d = %04Xh, want %04Xh", w, id[w], v)
		}
	}
	if id[255]&0xFF != 0xA5 {
		t.Errorf("word 255 low byte %02X, want A5", id[255]&0xFF)
	}
	b := id.Bytes()
	var sum byte
	for _, x := range b {
		sum += x
	}
	if sum != 0 {
		t.Errorf("512 bytes sum to %d mod 256, want 0", sum)
	}
	if b[54] != 'H' || b[55] != 'N' {
		t.Errorf("wire bytes 54,55 = %q %q, want H N (little-endian words)", b[54], b[55])
	}
	if id.Model() != info.Model || id.Serial() != info.Serial || id.Firmware() != info.Firmware {
		t.Errorf("strings read back %q %q %q", id.Model(), id.Serial(), id.Firmware())
	}
	if id.Sectors() != info.Sectors || !id.LBA48() || !id.TRIM() || !id.ChecksumOK() || !id.WriteCacheEnabled() {
		t.Errorf("accessors: sectors %d lba48 %v trim %v checksum %v wc %v", id.Sectors(), id.LBA48(), id.TRIM(), id.ChecksumOK(), id.WriteCacheEnabled())
	}
	if id.DMAMode() != ata.XferUDMA0+6 {
		t.Errorf("DMAMode %02x", id.DMAMode())
	}
	parsed, err := ata.ParseIdentify(b[:])
	if err != nil || parsed != id {
		t.Errorf("ParseIdentify: %v", err)
	}
	b[20] ^= 1
	if _, err := ata.ParseIdentify(b[:]); !errors.Is(err, ata.ErrIdentifyChecksum) {
		t.Errorf("corrupted data: %v, want ErrIdentifyChecksum", err)
	}
	if _, err := ata.ParseIdentify(b[:511]); !errors.Is(err, errUnexpectedEOF) {
		t.Errorf("short data: %v", err)
	}
}

func TestIdentifySmallAndOptions(t *testing.T) {
	info := ata.DeviceInfo{Model: "m", Serial: "s", Firmware: "f", Sectors: 5000,
		LogicalSectorSize: 4096, MaxMultiple: 8, MWDMAModes: 0x07, SWDMAModes: 0x07}
	id := info.Identify()
	checks := map[int]uint16{
		60: 5000, 61: 0, 100: 5000, 101: 0,
		47: 0x8008, 59: 0x0108,
		106: 0x5000, 117: 2048, 118: 0, // 4096-byte logical sectors = 2048 words
		62: 0x0007, 63: 0x0407, 88: 0, 53: 0x0003, // MWDMA2 selected, no UDMA
		82: 0x4009, 85: 0x4009, 169: 0, 105: 0, 217: 0,
		1: 4, 54: 4, // 5000/1008 cylinders
	}
	for w, v := range checks {
		if id[w] != v {
			t.Errorf("word %d = %04Xh, want %04Xh", w, id[w], v)
		}
	}
	if id.LogicalSectorSize() != 4096 || !id.ChecksumOK() {
		t.Errorf("logical size %d checksum %v", id.LogicalSectorSize(), id.ChecksumOK())
	}
	nodma := ata.DeviceInfo{Model: "m", Sectors: 10, NoDMA: true}.Identify()
	if nodma[49]&0x0100 != 0 || nodma[62]|nodma[63]|nodma[88] != 0 || nodma[65] != 0 {
		t.Errorf("NoDMA words 49 %04x 62 %04x 63 %04x 88 %04x 65 %d", nodma[49], nodma[62], nodma[63], nodma[88], nodma[65])
	}
	long := ata.DeviceInfo{Model: strings.Repeat("x", 50) + "\x01", Sectors: 1}
	if err := long.Validate(); !errors.Is(err, ata.ErrInfo) {
		t.Errorf("Validate long model: %v", err)
	}
	lid := long.Identify()
	if lid.Model() != strings.Repeat("x", 40) {
		t.Errorf("truncated model %q", lid.Model())
	}
	bad := ata.DeviceInfo{Model: "a\tb", Sectors: 1}
	bid := bad.Identify()
	if bid.Model() != "a?b" {
		t.Errorf("sanitised model %q", bid.Model())
	}
}

func TestValidate(t *testing.T) {
	ok := testInfo(100)
	for name, mut := range map[string]func(*ata.DeviceInfo){
		"serial too long":     func(i *ata.DeviceInfo) { i.Serial = strings.Repeat("s", 21) },
		"firmware non-ascii":  func(i *ata.DeviceInfo) { i.Firmware = "é" },
		"zero sectors":        func(i *ata.DeviceInfo) { i.Sectors = 0 },
		"too many sectors":    func(i *ata.DeviceInfo) { i.Sectors = 1<<48 + 1 },
		"logical 1000":        func(i *ata.DeviceInfo) { i.LogicalSectorSize = 1000 },
		"physical 3x":         func(i *ata.DeviceInfo) { i.PhysicalSectorSize = 1536 },
		"physical smaller":    func(i *ata.DeviceInfo) { i.LogicalSectorSize, i.PhysicalSectorSize = 4096, 512 },
		"rotation 500":        func(i *ata.DeviceInfo) { i.RotationRate = 500 },
		"multiple 3":          func(i *ata.DeviceInfo) { i.MaxMultiple = 3 },
		"udma mask bit 7":     func(i *ata.DeviceInfo) { i.UDMAModes = 0x80 },
		"mwdma mask too wide": func(i *ata.DeviceInfo) { i.MWDMAModes = 0x08 },
	} {
		i := ok
		mut(&i)
		if err := i.Validate(); !errors.Is(err, ata.ErrInfo) {
			t.Errorf("%s: Validate = %v, want ErrInfo", name, err)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid info: %v", err)
	}
}

// hdparm is an independent IDENTIFY decoder: fed our words in the
// /proc/ide identify format it must print what we described and accept the
// checksum.
func TestIdentifyHdparm(t *testing.T) {
	hdparm := testenv.Need(t, "hdparm", "hdparm")
	info := ata.DeviceInfo{
		Model: "NHD Network Hard Disk", Serial: "NHD-SERIAL-42", Firmware: "NHD1.0",
		Sectors: 3_000_000_000, TRIM: true, WriteCache: true, RotationRate: ata.NonRotating,
		PhysicalSectorSize: 4096, WWN: 0x5000C500A1B2C3D4, TrimZeroes: true,
	}
	eng := &ata.BufferDMA{}
	d, err := ata.NewDevice(ata.Config{Info: info, Backend: nullDisk{}, DMA: eng})
	if err != nil {
		t.Fatal(err)
	}
	host := attach(t, d, eng)
	// Read IDENTIFY the way a host does, after selecting UDMA5.
	set := ata.Command{Op: ata.CmdSetFeatures, Features: ata.FeatureSetTransferMode, Count: ata.XferUDMA0 + 5}
	if err := host.Exec(&set, nil); err != nil {
		t.Fatal(err)
	}
	id, err := host.Identify()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(hdparm, "--Istdin")
	cmd.Stdin = strings.NewReader(string(id.AppendHex(nil)))
	done := make(chan struct{})
	var out []byte
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("hdparm --Istdin timed out")
	}
	if err != nil {
		t.Fatalf("hdparm --Istdin: %v\n%s", err, out)
	}
	text := string(out)
	for _, re := range []string{
		`Model Number:\s+NHD Network Hard Disk\s*\n`,
		`Serial Number:\s+NHD-SERIAL-42\s*\n`,
		`Firmware Revision:\s+NHD1\.0\s*\n`,
		`LBA48\s+user addressable sectors:\s+3000000000\n`,
		`LBA\s+user addressable sectors:\s+268435455\n`,
		`Physical Sector size:\s+4096 bytes`,
		`DMA: mdma0 mdma1 mdma2 udma0 udma1 udma2 udma3 udma4 \*udma5 udma6`,
		`Nominal Media Rotation Rate: Solid State Device`,
		`\*\s+48-bit Address feature set`,
		`\*\s+Write cache`,
		`\*\s+WRITE_\{DMA\|MULTIPLE\}_FUA_EXT`,
		`\*\s+Data Set Management TRIM supported \(limit 8 blocks\)`,
		`R/W multiple sector transfer: Max = 16\s+Current = 16`,
		`Checksum: correct`,
		`\*\s+SMART feature set`,
		`Logical Unit WWN Device Identifier: 5000c500a1b2c3d4`,
		`Deterministic read ZEROs after TRIM`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("hdparm output lacks %q", re)
		}
	}
	if t.Failed() {
		t.Logf("hdparm output:\n%s", text)
	}
	// And a corrupted word must be caught by hdparm too.
	id[100]++
	cmd = exec.Command(hdparm, "--Istdin")
	cmd.Stdin = strings.NewReader(string(id.AppendHex(nil)))
	out, _ = cmd.CombinedOutput()
	if strings.Contains(string(out), "Checksum: correct") || !strings.Contains(string(out), "Checksum: incorrect") {
		t.Errorf("hdparm did not reject a corrupted checksum:\n%s", out)
	}
}
