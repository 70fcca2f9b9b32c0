package nvme

import (
	"context"
	"testing"
	"time"

	"github.com/nhdkit/nhd/nbd"
)

// lockingTransport's Complete takes its controller's lock (Ended), as a
// transport that asks the controller anything would: it deadlocks if
// Complete is called with that lock held.
type lockingTransport struct {
	fakeTransport
	c *Controller
}

func (t *lockingTransport) Complete(cpl Completion) {
	t.c.Ended()
	t.fakeTransport.Complete(cpl)
}

// Transport.Complete is never called with the controller's lock held:
// not for an event raised by a namespace change (Fabric.AddNamespace),
// nor for one unmasked by reading the Changed Namespace List, nor for the
// requests a controller reset aborts. Otherwise a transport slow to take
// a completion would stall the controller's Keep Alive Timer and the
// Fabric's namespace changes.
func TestCompleteWithoutControllerLock(t *testing.T) {
	f := newFabric(nbd.NewMemDisk(1<<20), 0)
	h := bringUp(t, f)
	tr := &lockingTransport{c: h.admin.Controller()}
	h.admin.Transport = tr
	h.ok(h.exec(h.admin, Command{Opcode: OpSetFeatures, CDW10: FeatAsyncEventConfig, CDW11: OAESNamespaceAttr}, nil), "AEC")
	ctx := context.Background()
	var cmd Command
	GetLogPage{LID: LogChangedNamespaces, Length: IdentifySize}.Encode(&cmd)
	page := make([]byte, IdentifySize)
	var reset Command
	Property{Set: true, Offset: PropCC, Value: 0}.Encode(&reset)
	done := make(chan [3]bool)
	go func() {
		var held [3]bool
		_, held[0] = h.aer()
		f.AddNamespace(testNQN, Namespace{Backend: nbd.NewMemDisk(1 << 20)}) // completes it
		_, held[1] = h.aer()
		f.AddNamespace(testNQN, Namespace{Backend: nbd.NewMemDisk(1 << 20)}) // masked
		h.admin.Exec(ctx, &cmd, page)                                        // unmasks it: completes the AER
		_, held[2] = h.aer()
		h.admin.Exec(ctx, &reset, nil) // a controller reset: aborts it
		done <- held
	}()
	var held [3]bool
	select {
	case held = <-done:
	case <-time.After(10 * time.Second): // failure detector only
		t.Fatal("Transport.Complete called with the controller's lock held")
	}
	cpls, _ := tr.state()
	if held != [3]bool{true, true, true} || len(cpls) != 3 || !cpls[0].Status.Success() || !cpls[1].Status.Success() || cpls[2].Status != StatusAbortedSQDeletion {
		t.Fatalf("held %v, completions %+v", held, cpls)
	}
}
