package nvme

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nhdkit/nhd/nbd"
)

// asyncDisk is a MemDisk with the handle methods of an NBD client: a
// request runs at its start and its error waits for Wait. It fails
// starts with startErr and requests with waitErr, and records every
// handle started and waited for.
type asyncDisk struct {
	*nbd.MemDisk
	startErr, waitErr error

	mu      sync.Mutex
	next    uint64
	pending map[uint64]error
	started int
}

func newAsyncDisk(size int64) *asyncDisk {
	return &asyncDisk{MemDisk: nbd.NewMemDisk(size), pending: map[uint64]error{}}
}

func (d *asyncDisk) start(err error) (uint64, error) {
	if d.startErr != nil {
		return 0, d.startErr
	}
	if err == nil {
		err = d.waitErr
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.next++
	d.started++
	d.pending[d.next] = err
	return d.next, nil
}

func (d *asyncDisk) StartReadAt(ctx context.Context, p []byte, off int64) (uint64, error) {
	_, err := d.MemDisk.ReadAt(p, off)
	return d.start(err)
}

func (d *asyncDisk) StartWriteAt(ctx context.Context, p []byte, off int64) (uint64, error) {
	var err error
	if d.startErr == nil && d.waitErr == nil {
		_, err = d.MemDisk.WriteAt(p, off)
	}
	return d.start(err)
}

func (d *asyncDisk) Wait(ctx context.Context, h uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	err, ok := d.pending[h]
	if !ok {
		return fmt.Errorf("handle %d not in flight", h)
	}
	delete(d.pending, h)
	return err
}

// A Read or Write on an asynchronous backend starts there and finishes
// with Finish, the bytes moving as with Exec; every handle is waited for
// once.
func TestQueueStartFinish(t *testing.T) {
	disk := newAsyncDisk(1 << 20)
	h := bringUp(t, newFabric(disk, 512))
	ctx := context.Background()
	want := bytes.Repeat([]byte("started "), 512) // 8 blocks
	w := Command{Opcode: OpWrite, NSID: 1, CID: 7}
	w.SetRange(16, 8)
	p, ok := h.io.Start(ctx, &w, want)
	if !ok {
		t.Fatal("a write on an asynchronous backend did not start")
	}
	if cpl := h.io.Finish(ctx, &w, p); cpl != (Completion{CID: 7, SQID: h.io.ID()}) {
		t.Fatalf("write completion %+v", cpl)
	}
	r := Command{Opcode: OpRead, NSID: 1, CID: 8}
	r.SetRange(16, 8)
	got := make([]byte, len(want))
	p, ok = h.io.Start(ctx, &r, got)
	if !ok {
		t.Fatal("a read on an asynchronous backend did not start")
	}
	if cpl := h.io.Finish(ctx, &r, p); !cpl.Status.Success() || cpl.CID != 8 {
		t.Fatalf("read completion %+v", cpl)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("read back (-want +got):\n%s", diff)
	}
	if disk.started != 2 || len(disk.pending) != 0 {
		t.Fatalf("%d started, %d not waited for", disk.started, len(disk.pending))
	}
	if !h.io.Async(&r) || h.admin.Async(&r) {
		t.Fatal("Async: want true on the I/O queue only")
	}
	// The zero Pending finishes with success.
	if cpl := h.io.Finish(ctx, &r, Pending{}); !cpl.Status.Success() {
		t.Fatalf("zero Pending: %+v", cpl)
	}
}

// Start refuses, doing nothing, what Exec must run or fail itself.
func TestQueueStartRefuses(t *testing.T) {
	disk := newAsyncDisk(1 << 20)
	f := newFabric(disk, 512)
	f.Subsystems[0].Namespaces = append(f.Subsystems[0].Namespaces,
		Namespace{Backend: disk, ReadOnly: true}, Namespace{Backend: nbd.NewMemDisk(1 << 20)})
	h := bringUp(t, f)
	ctx := context.Background()
	rw := func(op Opcode, nsid uint32, lba uint64, blocks uint32) Command {
		c := Command{Opcode: op, NSID: nsid}
		c.SetRange(lba, blocks)
		return c
	}
	fua := rw(OpWrite, 1, 0, 1)
	fua.CDW12 |= CDW12FUA
	for _, tc := range []struct {
		name string
		q    *Queue
		cmd  Command
		n    int
	}{
		{"flush", h.io, Command{Opcode: OpFlush, NSID: 1}, 0},
		{"write zeroes", h.io, rw(OpWriteZeroes, 1, 0, 8), 0},
		{"FUA write", h.io, fua, 512},
		{"past the end", h.io, rw(OpRead, 1, 2047, 2), 1024},
		{"wrong length", h.io, rw(OpRead, 1, 0, 2), 512},
		{"no such namespace", h.io, rw(OpRead, 9, 0, 1), 512},
		{"read-only namespace", h.io, rw(OpWrite, 2, 0, 1), 512},
		{"synchronous backend", h.io, rw(OpRead, 3, 0, 1), 512},
		{"admin queue", h.admin, rw(OpRead, 1, 0, 1), 512},
	} {
		if _, ok := tc.q.Start(ctx, &tc.cmd, make([]byte, tc.n)); ok {
			t.Errorf("%s: started", tc.name)
		}
	}
	if disk.started != 0 {
		t.Fatalf("%d requests started", disk.started)
	}
	if h.io.Async(&Command{Opcode: OpRead, NSID: 3}) {
		t.Error("Async on a synchronous backend")
	}
	// A read from the read-only namespace starts.
	r := rw(OpRead, 2, 0, 1)
	if p, ok := h.io.Start(ctx, &r, make([]byte, 512)); !ok {
		t.Error("a read of a read-only namespace did not start")
	} else {
		h.io.Finish(ctx, &r, p)
	}
}

// A start the backend refuses, and a request that fails, complete with
// the error's status, and each is kept in the error log.
func TestQueueStartErrors(t *testing.T) {
	for _, tc := range []struct {
		name              string
		startErr, waitErr error
		errno             syscall.Errno
	}{
		{"start", syscall.ENOSPC, nil, syscall.ENOSPC},
		{"wait", nil, nbd.EIO, syscall.EIO},
	} {
		t.Run(tc.name, func(t *testing.T) {
			disk := newAsyncDisk(1 << 20)
			disk.startErr, disk.waitErr = tc.startErr, tc.waitErr
			h := bringUp(t, newFabric(disk, 512))
			ctx := context.Background()
			w := Command{Opcode: OpWrite, NSID: 1, CID: 3}
			w.SetRange(5, 1)
			p, ok := h.io.Start(ctx, &w, make([]byte, 512))
			if !ok {
				t.Fatal("not started")
			}
			cpl := h.io.Finish(ctx, &w, p)
			if !errors.Is(cpl.Status, tc.errno) {
				t.Fatalf("status %v is not %v", cpl.Status, tc.errno)
			}
			logp := make([]byte, ErrorLogEntrySize)
			h.ok(h.exec(h.admin, Command{Opcode: OpGetLogPage, CDW10: LogError | uint32(len(logp)/4-1)<<16}, logp), "error log")
			var e ErrorLogEntry
			e.Parse((*[ErrorLogEntrySize]byte)(logp))
			if e.CID != 3 || e.SQID != h.io.ID() || e.Status != cpl.Status || e.LBA != 5 {
				t.Fatalf("error log entry %+v for %+v", e, cpl)
			}
		})
	}
}
