package nvme

import (
	"bytes"
	"context"
	"testing"

	"github.com/nhdkit/nhd/nbd"
	"pgregory.net/rapid"
)

// TestControllerModel drives a controller with random admin and I/O
// commands and checks every completion and every byte read against a
// model: a byte slice for the namespace and a flag for CC.EN. On an
// asynchronous backend, reads and writes go as a transport sends them:
// Start and Finish when Start takes them, Exec when it does not, with the
// same outcome.
func TestControllerModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		bs := rapid.SampledFrom([]int{512, 4096}).Draw(rt, "bs")
		blocks := rapid.IntRange(1, 64).Draw(rt, "blocks")
		var disk nbd.Backend = nbd.NewMemDisk(int64(blocks * bs))
		if rapid.Bool().Draw(rt, "async") {
			disk = newAsyncDisk(int64(blocks * bs))
		}
		h := bringUp(t, newFabric(disk, bs))
		m := &ctrlModel{disk: make([]byte, blocks*bs), bs: bs, ready: true}
		rt.Repeat(map[string]func(*rapid.T){
			"write": func(t *rapid.T) {
				lba, n, oob := m.drawRange(t)
				data := rapid.SliceOfN(rapid.Byte(), n*bs, n*bs).Draw(t, "data")
				cmd := Command{Opcode: OpWrite, NSID: 1}
				cmd.SetRange(lba, uint32(n))
				if rapid.Bool().Draw(t, "fua") {
					cmd.CDW12 |= CDW12FUA
				}
				if m.expect(t, h.run(cmd, data).Status, oob) {
					copy(m.disk[int(lba)*bs:], data)
				}
			},
			"read": func(t *rapid.T) {
				lba, n, oob := m.drawRange(t)
				buf := make([]byte, n*bs)
				cmd := Command{Opcode: OpRead, NSID: 1}
				cmd.SetRange(lba, uint32(n))
				if m.expect(t, h.run(cmd, buf).Status, oob) && !bytes.Equal(buf, m.disk[int(lba)*bs:int(lba)*bs+n*bs]) {
					t.Fatalf("read %d+%d differs from the model", lba, n)
				}
			},
			"zeroes": func(t *rapid.T) {
				lba, n, oob := m.drawRange(t)
				cmd := Command{Opcode: OpWriteZeroes, NSID: 1}
				cmd.SetRange(lba, uint32(n))
				if rapid.Bool().Draw(t, "deac") {
					cmd.CDW12 |= CDW12Deallocate
				}
				if m.expect(t, h.exec(h.io, cmd, nil).Status, oob) {
					clear(m.disk[int(lba)*bs : int(lba)*bs+n*bs])
				}
			},
			"deallocate": func(t *rapid.T) {
				nr := rapid.IntRange(1, 4).Draw(t, "ranges")
				data := make([]byte, nr*DSMRangeSize)
				oob := false
				var rs []DSMRange
				for i := range nr {
					lba, n, o := m.drawRange(t)
					oob = oob || o
					r := DSMRange{Blocks: uint32(n), LBA: lba}
					r.Put((*[DSMRangeSize]byte)(data[i*DSMRangeSize:]))
					rs = append(rs, r)
				}
				cmd := Command{Opcode: OpDatasetManagement, NSID: 1, CDW10: uint32(nr - 1), CDW11: DSMDeallocate}
				if m.expect(t, h.exec(h.io, cmd, data).Status, oob) {
					for _, r := range rs { // MemDisk reads trimmed blocks as zeroes (DLFEAT)
						clear(m.disk[int(r.LBA)*bs : int(r.LBA)*bs+int(r.Blocks)*bs])
					}
				}
			},
			"flush": func(t *rapid.T) {
				m.expect(t, h.exec(h.io, Command{Opcode: OpFlush, NSID: 1}, nil).Status, false)
			},
			"bad namespace": func(t *rapid.T) {
				st := h.exec(h.io, Command{Opcode: OpRead, NSID: rapid.SampledFrom([]uint32{0, 2, 0xFFFFFFFF}).Draw(t, "nsid")}, make([]byte, bs)).Status
				if want := m.status(StatusInvalidNamespace); st.Code() != want {
					t.Fatalf("bad namespace: %v, want %v", st, want)
				}
			},
			"toggle enable": func(t *rapid.T) {
				cc := CCEnable
				if m.ready {
					cc = 0
				}
				h.ok(h.prop(true, PropCC, uint64(cc)), "set CC")
				m.ready = !m.ready
				if got := CSTS(h.prop(false, PropCSTS, 0).Result)&CSTSReady != 0; got != m.ready {
					t.Fatalf("CSTS.RDY %v, model %v", got, m.ready)
				}
			},
		})
	})
}

// run runs an I/O command as a transport does: started and finished if
// Start takes it, else by Exec.
func (h *harness) run(cmd Command, data []byte) Completion {
	h.t.Helper()
	h.cid++
	cmd.CID = h.cid
	if p, ok := h.io.Start(context.Background(), &cmd, data); ok {
		return h.io.Finish(context.Background(), &cmd, p)
	}
	h.cid--
	return h.exec(h.io, cmd, data)
}

type ctrlModel struct {
	disk  []byte
	bs    int
	ready bool
}

// drawRange draws a block range, sometimes past the end (oob).
func (m *ctrlModel) drawRange(t *rapid.T) (lba uint64, n int, oob bool) {
	blocks := len(m.disk) / m.bs
	l := rapid.IntRange(0, blocks+1).Draw(t, "lba")
	n = rapid.IntRange(1, 8).Draw(t, "n")
	return uint64(l), n, l+n > blocks
}

// status is the status the model expects for a command that would
// otherwise end with want.
func (m *ctrlModel) status(want Status) Status {
	if !m.ready {
		return StatusCommandSequence
	}
	return want
}

// expect checks st against the model and reports whether the command
// took effect.
func (m *ctrlModel) expect(t *rapid.T, st Status, oob bool) bool {
	want := StatusSuccess
	if oob {
		want = StatusLBAOutOfRange
	}
	want = m.status(want)
	if st.Code() != want {
		t.Fatalf("status %v, model wants %v", st, want)
	}
	return want == StatusSuccess
}
