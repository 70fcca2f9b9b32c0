package ata_test

import (
	"bytes"
	"testing"

	"github.com/nhdkit/nhd/ata"
)

// BusMaster's contract: the engine keeps the buffer of the last Prepare
// after Host.Exec returns, so a DMA command written straight to the
// device's registers lands in it; Prepare(nil) takes it back.
func TestBusMasterKeepsBuffer(t *testing.T) {
	r := newRig(t, plainInfo(64))
	copy(r.disk.data[512:], bytes.Repeat([]byte{0xCD}, 512))
	buf := make([]byte, 512)
	c := ata.Command{Op: ata.CmdReadDMA, Addressing: ata.AddrLBA28, LBA: 0, Count: 1}
	if err := r.host.Exec(&c, buf); err != nil {
		t.Fatal(err)
	}
	direct := func() uint8 { // READ DMA of LBA 1, without Prepare
		r.dev.WriteReg(ata.RegDevice, uint8(ata.DeviceLBA))
		r.dev.WriteReg(ata.RegCount, 1)
		r.dev.WriteReg(ata.RegLBALow, 1)
		r.dev.WriteReg(ata.RegCommand, uint8(ata.CmdReadDMA))
		return r.dev.ReadReg(ata.RegStatus)
	}
	if st := direct(); st&uint8(ata.StatusERR) != 0 || buf[0] != 0xCD {
		t.Fatalf("direct READ DMA after Exec: status %#x, buf[0] %#x: the engine did not keep buf", st, buf[0])
	}
	clear(buf)
	if err := r.host.BusMaster.Prepare(nil); err != nil {
		t.Fatal(err)
	}
	if st := direct(); st&uint8(ata.StatusERR) == 0 || buf[0] != 0 {
		t.Fatalf("direct READ DMA after Prepare(nil): status %#x, buf[0] %#x", st, buf[0])
	}
}
