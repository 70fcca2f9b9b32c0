package nvme

import (
	"context"
	"sync"
	"testing"

	"github.com/nhdkit/nhd/nbd"
)

// A connected I/O queue's Exec and LendRead may run on several goroutines
// at once (Queue's contract; the TCP target's reader and workers do):
// under -race, reads, writes, flushes and failing commands (which the
// error log records) run together on one queue.
func TestIOQueueConcurrentExec(t *testing.T) {
	f := newFabric(nbd.NewMemDisk(1<<20), 0)
	h := bringUp(t, f)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			buf := make([]byte, 4096)
			var pieces []nbd.LentPiece
			for i := range 200 {
				cid := uint16(g*1000 + i)
				lba := uint64(g*64 + i%8*8)
				var cmd Command
				switch i % 4 {
				case 0:
					cmd = Command{Opcode: OpWrite, NSID: 1, CID: cid}
				case 1:
					cmd = Command{Opcode: OpRead, NSID: 1, CID: cid}
					var loan Loan
					var ok bool
					cmd.SetRange(lba, 8)
					if pieces, loan, _, ok = h.io.LendRead(&cmd, len(buf), pieces[:0]); ok {
						loan.GiveBack()
						continue
					}
				case 2:
					cmd = Command{Opcode: OpFlush, NSID: 1, CID: cid}
				case 3:
					cmd = Command{Opcode: OpRead, NSID: 1, CID: cid}
					lba = 1 << 40 // out of range: an error log entry
				}
				if cmd.Opcode != OpFlush {
					cmd.SetRange(lba, 8)
				}
				data := buf
				if cmd.Opcode == OpFlush {
					data = nil
				}
				if cpl, held := h.io.Exec(ctx, &cmd, data); held || cpl.CID != cid || cpl.Status.Success() != (i%4 != 3) {
					t.Errorf("command %d (%v): held %v, completion %+v", i, cmd.Opcode, held, cpl)
					return
				}
			}
		}()
	}
	wg.Wait()
}
