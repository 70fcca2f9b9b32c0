package nvme

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nhdkit/nhd/nbd"
	"pgregory.net/rapid"
)

// growDisk is a MemDisk whose reported size the test sets.
type growDisk struct {
	*nbd.MemDisk
	size atomic.Int64
}

func (d *growDisk) Size() int64 { return d.size.Load() }

func (h *harness) changedLog(rae bool) []uint32 {
	h.t.Helper()
	var cmd Command
	GetLogPage{LID: LogChangedNamespaces, Length: IdentifySize, RAE: rae}.Encode(&cmd)
	page := make([]byte, IdentifySize)
	h.ok(h.exec(h.admin, cmd, page), "changed namespace log")
	return ParseChangedNamespaces((*[IdentifySize]byte)(page), nil)
}

// aer sends an Asynchronous Event Request and reports whether it was held.
func (h *harness) aer() (Completion, bool) {
	h.cid++
	return h.admin.Exec(context.Background(), &Command{Opcode: OpAsyncEventRequest, CID: h.cid}, nil)
}

// Namespace Attribute Changed: advertised in OAES; a namespace added,
// resized or removed through the Fabric completes a held AER with a
// notice naming the Changed Namespace List, which lists the ids and,
// read without RAE, clears and unmasks the event.
func TestAsyncEventNamespaceChanged(t *testing.T) {
	f := newFabric(nbd.NewMemDisk(1<<20), 0)
	h := bringUp(t, f)
	tr := transportOf(h.admin)
	page := make([]byte, IdentifySize)
	h.ok(h.exec(h.admin, Command{Opcode: OpIdentify, CDW10: CNSController}, page), "identify")
	var id IdentifyController
	id.Parse((*[IdentifySize]byte)(page))
	if id.OAES&OAESNamespaceAttr == 0 || id.AERL != aerLimit-1 {
		t.Fatalf("OAES %#x AERL %d", id.OAES, id.AERL)
	}
	// Not enabled: a change is logged but not reported.
	if _, err := f.AddNamespace(testNQN, Namespace{Backend: nbd.NewMemDisk(1 << 20)}); err != nil {
		t.Fatal(err)
	}
	if _, held := h.aer(); !held {
		t.Fatal("AER not held")
	}
	if cpls, _ := tr.state(); len(cpls) != 0 {
		t.Fatalf("event reported while disabled: %+v", cpls)
	}
	if got := h.changedLog(false); !cmp.Equal(got, []uint32{2}) {
		t.Fatalf("changed list %v", got)
	}
	h.ok(h.exec(h.admin, Command{Opcode: OpSetFeatures, CDW10: FeatAsyncEventConfig, CDW11: OAESNamespaceAttr}, nil), "AEC")
	for range aerLimit - 1 {
		if _, held := h.aer(); !held {
			t.Fatal("AER not held")
		}
	}
	if cpl, held := h.aer(); held || cpl.Status != StatusAERLimitExceeded|StatusDNR {
		t.Fatalf("AER past AERL: held %v %v", held, cpl.Status)
	}
	disk3 := &growDisk{MemDisk: nbd.NewMemDisk(2 << 20)}
	disk3.size.Store(1 << 20)
	nsid, err := f.AddNamespace(testNQN, Namespace{Backend: disk3, BlockSize: 4096})
	if err != nil || nsid != 3 {
		t.Fatalf("add: %d %v", nsid, err)
	}
	want := AsyncEvent{Type: AsyncEventNotice, Info: AsyncInfoNamespaceAttrChng, LID: LogChangedNamespaces}
	cpls, _ := tr.state()
	if len(cpls) != 1 || cpls[0].Status != StatusSuccess || AsyncEventOf(cpls[0].Result) != want {
		t.Fatalf("completions %+v", cpls)
	}
	// Masked until the log is read: another change completes nothing.
	if err := f.RemoveNamespace(testNQN, 2); err != nil {
		t.Fatal(err)
	}
	if cpls, _ := tr.state(); len(cpls) != 1 {
		t.Fatalf("masked event reported: %+v", cpls)
	}
	if got := h.changedLog(true); !cmp.Equal(got, []uint32{2, 3}) {
		t.Fatalf("changed list with RAE %v", got)
	}
	if got := h.changedLog(false); !cmp.Equal(got, []uint32{2, 3}) {
		t.Fatalf("changed list %v", got)
	}
	// Reading it cleared the list and reported the pending change.
	if cpls, _ := tr.state(); len(cpls) != 2 || AsyncEventOf(cpls[1].Result) != want {
		t.Fatalf("pending event not reported after the log was read: %+v", cpls)
	}
	if got := h.changedLog(false); len(got) != 0 {
		t.Fatalf("changed list not cleared: %v", got)
	}
	h.ok(h.exec(h.admin, Command{Opcode: OpIdentify, CDW10: CNSActiveNamespaces}, page), "ns list")
	if ids := ParseNamespaceList((*[IdentifySize]byte)(page), nil); !cmp.Equal(ids, []uint32{1, 3}) {
		t.Fatalf("active namespaces %v", ids)
	}
	h.ok(h.exec(h.admin, Command{Opcode: OpIdentify, NSID: 2, CDW10: CNSNamespace}, page), "identify inactive")
	if !cmp.Equal(page, make([]byte, IdentifySize)) {
		t.Fatal("an inactive namespace's Identify is not zero filled")
	}
	if st := h.exec(h.io, Command{Opcode: OpFlush, NSID: 2}, nil).Status; st.Code() != StatusInvalidNamespace {
		t.Fatalf("I/O to a removed namespace: %v", st)
	}
	// Resize: the namespace's size follows its backend's.
	disk3.size.Store(2 << 20)
	if err := f.ResizeNamespace(testNQN, 3); err != nil {
		t.Fatal(err)
	}
	h.ok(h.exec(h.admin, Command{Opcode: OpIdentify, NSID: 3, CDW10: CNSNamespace}, page), "identify resized")
	var ns IdentifyNamespace
	ns.Parse((*[IdentifySize]byte)(page))
	if ns.Size != 512 {
		t.Fatalf("resized namespace has %d blocks", ns.Size)
	}
	if cpls, _ := tr.state(); len(cpls) != 3 {
		t.Fatalf("resize not reported: %+v", cpls)
	}
	if err := f.RemoveNamespace(testNQN, 2); !errors.Is(err, ErrNoNamespace) {
		t.Fatalf("removing an inactive namespace: %v", err)
	}
	if _, err := f.AddNamespace("nqn.none", Namespace{Backend: disk3}); !errors.Is(err, ErrNoSubsystem) {
		t.Fatalf("adding to no subsystem: %v", err)
	}
	// A reset aborts the held requests; a closed queue gets nothing more.
	h.ok(h.prop(true, PropCC, 0), "CC.EN 0")
	cpls, _ = tr.state()
	if len(cpls) != aerLimit || cpls[3].Status != StatusAbortedSQDeletion {
		t.Fatalf("after reset: %+v", cpls)
	}
	h.ok(h.prop(true, PropCC, uint64(CCEnable)), "CC.EN 1")
	if _, held := h.aer(); !held {
		t.Fatal("AER not held")
	}
	h.admin.Close()
	f.ResizeNamespace(testNQN, 3)
	if cpls, _ := tr.state(); len(cpls) != aerLimit {
		t.Fatalf("completion after close: %+v", cpls)
	}
}

// The notice Linux acts on: type 2 (notice), information 0 (namespace
// attribute changed), log page 04h, in dword 0 of the AER's completion.
func TestGoldenAsyncEvent(t *testing.T) {
	e := AsyncEvent{Type: AsyncEventNotice, Info: AsyncInfoNamespaceAttrChng, LID: LogChangedNamespaces}
	if got := e.Result(); got != 0x00040002 {
		t.Fatalf("result %#x, want 0x00040002", got)
	}
	if back := AsyncEventOf(0x00040002); back != e {
		t.Fatalf("decoded %+v", back)
	}
}

func TestRapidAsyncEvent(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		e := AsyncEvent{Type: rapid.Uint8Range(0, 7).Draw(t, "type"), Info: rapid.Uint8().Draw(t, "info"), LID: rapid.Uint8().Draw(t, "lid")}
		if back := AsyncEventOf(e.Result()); back != e {
			t.Fatalf("%+v -> %#x -> %+v", e, e.Result(), back)
		}
	})
}

// FuzzAsyncEvent decodes any completion dword: re-encoding keeps exactly
// the defined bits. Seeds live in testdata/fuzz/FuzzAsyncEvent.
func FuzzAsyncEvent(f *testing.F) {
	f.Fuzz(func(t *testing.T, r uint64) {
		if got, want := AsyncEventOf(r).Result(), r&0xFFFF07; got != want {
			t.Fatalf("%#x -> %#x, want %#x", r, got, want)
		}
	})
}
