package ata_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/internal/testenv"
)

// stringCases are IDENTIFY pages that exercise each branch of
// Identify.String.
func stringCases() map[string]ata.Identify {
	big := ata.DeviceInfo{
		Model: "NHD Network Hard Disk", Serial: "NHD-SERIAL-42", Firmware: "NHD1.0",
		Sectors: 3_000_000_000, TRIM: true, WriteCache: true, RotationRate: ata.NonRotating,
		PhysicalSectorSize: 4096,
	}.Identify()
	small := ata.DeviceInfo{Model: "m", Serial: "s", Firmware: "f", Sectors: 5000, LogicalSectorSize: 4096,
		MaxMultiple: 8, MWDMAModes: 0x07, SWDMAModes: 0x07, RotationRate: 7200}.Identify()
	nodma := ata.DeviceInfo{Model: "no dma", Sectors: 5000, NoDMA: true, WriteCache: true}.Identify()
	// A SATA drive's words: NCQ with 32 tags, write cache disabled, no
	// multiple count set, 48-bit addressing not enabled.
	ncq := big
	ncq[ata.IDSATACaps], ncq[ata.IDQueueDepth] = 0x0106, 31
	ncq[ata.IDCmdEnabled1] &^= 0x0020
	ncq[ata.IDCmdEnabled2] &^= 0x0400
	ncq[ata.IDMultiple] = 0
	ncq.Seal()
	bad := small
	bad[ata.IDLBA48Capacity]++ // checksum now wrong
	unsealed := nodma
	unsealed[ata.IDIntegrity] = 0
	return map[string]ata.Identify{"big": big, "small": small, "nodma": nodma, "ncq": ncq, "bad checksum": bad, "unsealed": unsealed}
}

func TestIdentifyStringGolden(t *testing.T) {
	id := stringCases()["ncq"]
	want := `ATA device, with non-removable media
	Model Number:       NHD Network Hard Disk
	Serial Number:      NHD-SERIAL-42
	Firmware Revision:  NHD1.0
Configuration:
	LBA    user addressable sectors:   268435455
	LBA48  user addressable sectors:  3000000000
	Logical  Sector size:                   512 bytes
	Physical Sector size:                  4096 bytes
	device size with M = 1024*1024:     1464843 MBytes
	device size with M = 1000*1000:     1536000 MBytes (1536 GB)
	Nominal Media Rotation Rate: Solid State Device
Capabilities:
	Queue depth: 32
	R/W multiple sector transfer: Max = 16	Current = ?
	DMA: mdma0 mdma1 mdma2 udma0 udma1 udma2 udma3 udma4 udma5 *udma6
	PIO: pio0 pio1 pio2 pio3 pio4
Commands/features:
	Enabled	Supported:
	    	Write cache
	    	48-bit Address feature set
	   *	Native Command Queueing (NCQ)
	   *	Data Set Management TRIM supported (limit 8 blocks)
Checksum: correct
`
	if diff := cmp.Diff(want, id.String()); diff != "" {
		t.Errorf("String (-want +got):\n%s", diff)
	}
	nodma := stringCases()["nodma"]
	for _, line := range []string{"\tDMA: not supported\n", "\t   *\tWrite cache\n", "\tLBA    user addressable sectors:        5000\n"} {
		if !strings.Contains(nodma.String(), line) {
			t.Errorf("NoDMA printout lacks %q:\n%s", line, nodma.String())
		}
	}
}

// Every line Identify.String prints is a line hdparm --Istdin prints for
// the same words (hdparm pads strings and the mode lists with trailing
// spaces, which the comparison drops), and in the same order; a wrong
// checksum is told in other words.
func TestIdentifyStringHdparm(t *testing.T) {
	hdparm := testenv.Need(t, "hdparm", "hdparm")
	for name, id := range stringCases() {
		cmd := exec.Command(hdparm, "--Istdin")
		cmd.Stdin = strings.NewReader(string(id.AppendHex(nil)))
		cmd.WaitDelay = 10 * time.Second
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: hdparm --Istdin: %v", name, err)
		}
		theirs := strings.Split(string(out), "\n")
		next := 0
		for _, line := range strings.Split(strings.TrimSuffix(id.String(), "\n"), "\n") {
			found := false
			for ; next < len(theirs); next++ {
				same := strings.TrimRight(theirs[next], " ") == strings.TrimRight(line, " ")
				if strings.HasPrefix(line, "Checksum: incorrect (") { // we name the right byte, hdparm its own way
					same = strings.HasPrefix(theirs[next], "Checksum: incorrect (")
				}
				if same {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("%s: line %q is not in hdparm's output (in order):\n%s", name, line, out)
				break
			}
		}
	}
}

func TestXferModeString(t *testing.T) {
	for m, want := range map[ata.XferMode]string{
		ata.XferPIODefault: "pio default", ata.XferPIODefNoIORDY: "pio default (IORDY off)",
		ata.XferPIO0 + 4: "pio4", ata.XferSWDMA0 + 2: "sdma2", ata.XferMWDMA0: "mdma0",
		ata.XferUDMA0 + 6: "udma6", ata.XferUDMA0 + 7: "XferMode(0x47)", ata.XferMWDMA0 + 3: "XferMode(0x23)",
		0x02: "XferMode(0x2)", 0x80: "XferMode(0x80)",
	} {
		if got := m.String(); got != want {
			t.Errorf("XferMode(%#x) = %q, want %q", uint8(m), got, want)
		}
	}
	for m, want := range map[ata.RWMode]string{ata.RWPIO: "PIO", ata.RWPIOMultiple: "PIO multiple", ata.RWDMA: "DMA", 3: "RWMode(3)"} {
		if got := m.String(); got != want {
			t.Errorf("RWMode(%d) = %q, want %q", m, got, want)
		}
	}
	id := stringCases()["small"]
	if diff := cmp.Diff([]ata.XferMode{0x10, 0x11, 0x12, 0x20, 0x21, 0x22}, id.DMAModes()); diff != "" || id.DMAMode() != ata.XferMWDMA0+2 {
		t.Errorf("DMAModes (-want +got):\n%s DMAMode %v", diff, id.DMAMode())
	}
}

func TestIdentifyStringChecksum(t *testing.T) {
	c := stringCases()
	for name, want := range map[string]string{
		"bad checksum": "Checksum: incorrect (bytes sum to 0x01;",
		"unsealed":     "Integrity word not set (found 0x0000, expected 0x",
		"small":        "Checksum: correct\n",
	} {
		id := c[name]
		if s := id.String(); !strings.Contains(s, want) {
			t.Errorf("%s: printout lacks %q:\n%s", name, want, s)
		}
	}
}
