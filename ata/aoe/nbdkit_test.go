package aoe

import (
	"context"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/internal/diskmodel"
	"github.com/nhdkit/nhd/internal/testenv"
	"github.com/nhdkit/nhd/nbd"
)

// TestTargetNbdkitInjectedErrors serves an NBD export (host -> AoE -> ATA
// device -> NBD client) whose server, nbdkit's memory plugin behind its
// error filter, fails a quarter of the reads (EIO) and writes (ENOSPC):
// each failure reaches the initiator as an ATA response with the device's
// registers, ERR with UNC for a read and DF|ERR with ABRT for a write, and
// the failing LBA inside the command; each read that succeeds holds what a
// write that may have reached it wrote (internal/diskmodel), and the disk
// read back at the end every write that succeeded.
func TestTargetNbdkitInjectedErrors(t *testing.T) {
	_, uri := testenv.Nbdkit(t, "--filter=error", "memory", "size=1M",
		"error-pread-rate=0.25", "error-pwrite=ENOSPC", "error-pwrite-rate=0.25")
	client, err := nbd.Dial(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	r := startRigOn(t, client, 2)
	m := diskmodel.New(testSectors)
	rng := rand.New(rand.NewPCG(3, 4))
	failed := 0
	for range 600 {
		n := uint64(1 + rng.IntN(2)) // a 1500-byte frame carries two sectors
		lba := uint64(rng.IntN(testSectors - int(n) + 1))
		if rng.IntN(2) == 0 {
			gen := m.Next()
			data := make([]byte, n*512)
			diskmodel.Fill(data, lba, gen)
			a, _ := r.ata(initiatorMAC, ATAExtended|ATAWrite, 0x34, uint8(n), lba, data)
			if a.CmdStatus&uint8(ata.StatusERR) == 0 {
				m.Done(lba, n, gen)
				continue
			}
			failed++
			m.Maybe(lba, n, gen)
			if a.CmdStatus&uint8(ata.StatusDF) == 0 || !ata.ErrorBits(a.ErrFeature).Has(ata.ErrorABRT) || a.LBA < lba || a.LBA >= lba+n {
				t.Fatalf("failed write of %d sectors at %d: %+v, want DF|ERR, ABRT and an LBA inside", n, lba, a)
			}
			continue
		}
		a, data := r.ata(initiatorMAC, ATAExtended, 0x24, uint8(n), lba, nil)
		if a.CmdStatus&uint8(ata.StatusERR) != 0 {
			failed++
			if !ata.ErrorBits(a.ErrFeature).Has(ata.ErrorUNC) || a.LBA < lba || a.LBA >= lba+n {
				t.Fatalf("failed read of %d sectors at %d: %+v, want ERR, UNC and an LBA inside", n, lba, a)
			}
			continue
		}
		if err := m.Check(data[:n*512], lba); err != nil {
			t.Fatalf("read of %d sectors at %d: %v", n, lba, err)
		}
	}
	if failed == 0 {
		t.Fatal("no command met an injected error")
	}
	t.Logf("%d of 600 commands failed", failed)
	if err := m.Check(readBack(t, client, testSectors*512), 0); err != nil {
		t.Fatalf("the disk at the end: %v", err)
	}
}

// readBack reads n bytes from r in 64 KiB pieces, each read tried again
// (up to 50 times) while the error filter fails it.
func readBack(t *testing.T, r io.ReaderAt, n int) []byte {
	p := make([]byte, n)
	for off := 0; off < n; off += 64 << 10 {
		q := p[off:min(off+64<<10, n)]
		var err error
		for try := 0; try < 50; try++ {
			if _, err = r.ReadAt(q, int64(off)); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return p
}
