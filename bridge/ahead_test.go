package bridge

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"syscall"
	"testing"

	"github.com/nhdkit/nhd/ata"
	"pgregory.net/rapid"
)

// fakeDisk is a backend in memory whose bad sectors fail every request
// that touches them (a failed write writes nothing).
type fakeDisk struct {
	disk []byte
	bad  []bool // per sector
}

func (f *fakeDisk) hitsBad(n int, off int64) bool {
	for s := off / 512; s < (off+int64(n)+511)/512; s++ {
		if f.bad[s] {
			return true
		}
	}
	return false
}

func (f *fakeDisk) ReadAt(p []byte, off int64) (int, error) {
	if f.hitsBad(len(p), off) {
		clear(p)
		return 0, syscall.EIO
	}
	return copy(p, f.disk[off:]), nil
}

func (f *fakeDisk) WriteAt(p []byte, off int64) (int, error) {
	if f.hitsBad(len(p), off) {
		return 0, syscall.EIO
	}
	return copy(f.disk[off:], p), nil
}

func (f *fakeDisk) Size() int64 { return int64(len(f.disk)) }

// asyncDisk is a fakeDisk that keeps requests in flight: each is made
// when it starts or only when it is waited for, as eager draws, so a
// buffer used before its request is waited for shows as wrong data.
type asyncDisk struct {
	*fakeDisk
	t       *rapid.T
	pending map[uint64]*fakeReq
	next    uint64
}

type fakeReq struct {
	write bool
	p     []byte
	off   int64
	done  bool
	err   error
}

func (a *asyncDisk) do(r *fakeReq) {
	if r.write {
		_, r.err = a.WriteAt(r.p, r.off)
	} else {
		_, r.err = a.ReadAt(r.p, r.off)
	}
	r.done = true
}

func (a *asyncDisk) start(write bool, p []byte, off int64) (uint64, error) {
	r := &fakeReq{write: write, p: p, off: off}
	if rapid.Bool().Draw(a.t, "eager") {
		a.do(r)
	}
	a.next++
	a.pending[a.next] = r
	return a.next, nil
}

func (a *asyncDisk) StartReadAt(ctx context.Context, p []byte, off int64) (uint64, error) {
	return a.start(false, p, off)
}

func (a *asyncDisk) StartWriteAt(ctx context.Context, p []byte, off int64) (uint64, error) {
	return a.start(true, p, off)
}

func (a *asyncDisk) Wait(ctx context.Context, h uint64) error {
	r, ok := a.pending[h]
	if !ok {
		a.t.Fatalf("Wait for handle %d, not in flight", h)
	}
	delete(a.pending, h)
	if !r.done {
		a.do(r)
	}
	return r.err
}

// aheadMachine checks an Ahead against a byte map: what the disk holds
// once the writes the Ahead accepted are made, and the failed writes not
// reported yet.
type aheadMachine struct {
	a      *Ahead
	disk   *fakeDisk
	model  []byte
	failed []int64 // offsets of failed writes behind not reported yet
	block  int
}

const machineSectors = 64

func newAheadMachine(t *rapid.T) *aheadMachine {
	m := &aheadMachine{block: rapid.SampledFrom([]int{512, 1024, 2048}).Draw(t, "block")}
	m.disk = &fakeDisk{disk: make([]byte, machineSectors*512), bad: make([]bool, machineSectors)}
	for range rapid.IntRange(0, 2).Draw(t, "bad sectors") {
		m.disk.bad[rapid.IntRange(0, machineSectors-1).Draw(t, "bad")] = true
	}
	m.model = make([]byte, len(m.disk.disk))
	var be interface {
		ReadAt([]byte, int64) (int, error)
		WriteAt([]byte, int64) (int, error)
	} = m.disk
	if rapid.Bool().Draw(t, "async") {
		be = &asyncDisk{fakeDisk: m.disk, t: t, pending: map[uint64]*fakeReq{}}
	}
	a, err := NewAhead(be, AheadConfig{Block: m.block, Depth: rapid.IntRange(1, 4).Draw(t, "depth")})
	if err != nil {
		t.Fatal(err)
	}
	m.a = a
	return m
}

// span draws a sector-aligned range of the disk.
func (m *aheadMachine) span(t *rapid.T) (int64, int) {
	s := rapid.IntRange(0, machineSectors-1).Draw(t, "sector")
	n := rapid.IntRange(1, min(machineSectors-s, 3*m.block/512)).Draw(t, "sectors")
	return int64(s) * 512, n * 512
}

// reported checks an error that is not the call's own: a failed write
// behind's, reported once.
func (m *aheadMachine) reported(t *rapid.T, err error) bool {
	var de *ata.OffsetError
	if !errors.As(err, &de) {
		return false
	}
	i := slices.Index(m.failed, de.Off)
	if i < 0 {
		t.Fatalf("reported a failed write at %d; failed and unreported: %v", de.Off, m.failed)
	}
	m.failed = slices.Delete(m.failed, i, i+1)
	return true
}

func (m *aheadMachine) Read(t *rapid.T) {
	off, n := m.span(t)
	p := make([]byte, n)
	_, err := m.a.ReadAt(p, off)
	bad := m.disk.hitsBad(n, off)
	switch {
	case err == nil && bad:
		t.Fatalf("read of %d bytes at %d touches a bad sector and succeeded", n, off)
	case err == nil && !bytes.Equal(p, m.model[off:off+int64(n)]):
		t.Fatalf("read of %d bytes at %d: data differ from the model", n, off)
	case err != nil && !m.reported(t, err) && !bad:
		t.Fatalf("read of %d bytes at %d: %v", n, off, err)
	}
}

func (m *aheadMachine) Write(t *rapid.T) {
	off, n := m.span(t)
	p := make([]byte, n)
	fill(p, off, rapid.Byte().Draw(t, "generation"))
	k, err := m.a.WriteAt(p, off)
	if err == nil && k != n {
		t.Fatalf("write of %d bytes at %d: wrote %d and no error", n, off, k)
	}
	// The pieces started: Block bytes at a time from off.
	for pos := off; pos < off+int64(k); pos += int64(m.block) {
		q := p[pos-off : min(pos-off+int64(m.block), int64(k))]
		if m.disk.hitsBad(len(q), pos) {
			m.failed = append(m.failed, pos)
		} else {
			copy(m.model[pos:], q)
		}
	}
	if err != nil && !m.reported(t, err) {
		t.Fatalf("write of %d bytes at %d: %v", n, off, err)
	}
}

// Peek reads a range as a DMA engine borrowing the Ahead's buffers does
// (dma.PeekReaderAt), stopping early now and then as an engine whose tap
// fails does.
func (m *aheadMachine) Peek(t *rapid.T) {
	off, n := m.span(t)
	end := off + int64(n)
	for pos := off; pos < end; {
		p, err := m.a.PeekAt(pos, int(end-pos))
		if err != nil {
			if !m.reported(t, err) && !m.disk.hitsBad(int(end-pos), pos) {
				t.Fatalf("peek of %d bytes at %d: %v", end-pos, pos, err)
			}
			return
		}
		blkEnd := (pos/int64(m.block) + 1) * int64(m.block)
		if len(p) == 0 || len(p)%512 != 0 || pos+int64(len(p)) > min(end, blkEnd) {
			t.Fatalf("peek of %d bytes at %d lent %d", end-pos, pos, len(p))
		}
		if m.disk.hitsBad(len(p), pos) || !bytes.Equal(p, m.model[pos:pos+int64(len(p))]) {
			t.Fatalf("peek of %d bytes at %d: data differ from the model", len(p), pos)
		}
		m.a.ReleasePeek()
		pos += int64(len(p))
		if rapid.IntRange(0, 4).Draw(t, "stop") == 0 {
			return
		}
	}
}

// Reserve writes a range as a DMA engine borrowing the Ahead's buffers
// does (dma.ReserveWriterAt), committing part of a buffer, or none, now
// and then, as an engine that fails part way does.
func (m *aheadMachine) Reserve(t *rapid.T) {
	off, n := m.span(t)
	end := off + int64(n)
	gen := rapid.Byte().Draw(t, "generation")
	for pos := off; pos < end; {
		p, err := m.a.ReserveAt(pos, int(end-pos))
		if err != nil {
			if !m.reported(t, err) {
				t.Fatalf("reserve of %d bytes at %d: %v", end-pos, pos, err)
			}
			return
		}
		if len(p) == 0 || len(p)%512 != 0 || len(p) > min(int(end-pos), m.block) {
			t.Fatalf("reserve of %d bytes at %d lent %d", end-pos, pos, len(p))
		}
		fill(p, pos, gen)
		k := len(p)
		if rapid.IntRange(0, 4).Draw(t, "partial") == 0 {
			k = 512 * rapid.IntRange(0, len(p)/512-1).Draw(t, "sectors committed")
		}
		if err := m.a.CommitReserved(k); err != nil {
			t.Fatalf("commit of %d bytes at %d: %v", k, pos, err)
		}
		switch {
		case k == 0:
		case m.disk.hitsBad(k, pos):
			m.failed = append(m.failed, pos)
		default:
			copy(m.model[pos:], p[:k])
		}
		if k < len(p) {
			return
		}
		pos += int64(k)
	}
}

func (m *aheadMachine) Flush(t *rapid.T) {
	err := m.a.Flush(context.Background())
	switch {
	case err == nil && len(m.failed) > 0:
		t.Fatalf("flush succeeded with failed writes behind unreported at %v", m.failed)
	case err != nil && !m.reported(t, err):
		t.Fatalf("flush: %v", err)
	}
}

func (m *aheadMachine) Check(t *rapid.T) {
	if n, _ := m.a.inFlight(); n > m.a.depth {
		t.Fatalf("%d requests in flight, depth %d", n, m.a.depth)
	}
	if len(m.a.slots) != m.a.depth+1 {
		t.Fatalf("%d buffers, depth %d", len(m.a.slots), m.a.depth)
	}
	if m.a.lent >= 0 {
		t.Fatalf("slot %d still lent", m.a.lent)
	}
}

func TestAheadStateMachine(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := newAheadMachine(t)
		t.Repeat(rapid.StateMachineActions(m))
		err := m.a.Close()
		if (err == nil) != (len(m.failed) == 0) {
			t.Fatalf("close: %v with failed writes unreported at %v", err, m.failed)
		}
	})
}
