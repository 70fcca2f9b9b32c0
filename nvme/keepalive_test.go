package nvme

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nhdkit/nhd/nbd"
)

// fakeTransport records what a controller asks of a queue's transport.
type fakeTransport struct {
	mu      sync.Mutex
	cpls    []Completion
	aborted int
}

func (t *fakeTransport) Complete(cpl Completion) {
	t.mu.Lock()
	t.cpls = append(t.cpls, cpl)
	t.mu.Unlock()
}

func (t *fakeTransport) Abort() {
	t.mu.Lock()
	t.aborted++
	t.mu.Unlock()
}

func (t *fakeTransport) state() ([]Completion, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Completion(nil), t.cpls...), t.aborted
}

func transportOf(q *Queue) *fakeTransport { return q.Transport.(*fakeTransport) }

// waitAborted waits up to d for both queues' transports to be aborted.
func waitAborted(h *harness, d time.Duration) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		_, a := transportOf(h.admin).state()
		_, b := transportOf(h.io).state()
		if a > 0 && b > 0 {
			return true
		}
	}
	return false
}

// A controller that gets no Keep Alive within KATO (rounded up to a
// second) plus the slack ends its association: both queues' transports
// are aborted, its commands fail, Connect no longer finds it.
func TestKeepAliveExpires(t *testing.T) {
	t.Parallel()
	f := newFabric(nbd.NewMemDisk(1<<20), 0)
	f.KeepAliveSlack = 200 * time.Millisecond
	h := bringUpKATO(t, f, 300)
	c := h.admin.Controller()
	start := time.Now()
	if !waitAborted(h, 5*time.Second) {
		t.Fatal("no abort within 5 s of the last Keep Alive")
	}
	if d := time.Since(start); d < 1200*time.Millisecond {
		t.Fatalf("aborted after %v, before KATO rounded up plus slack", d)
	}
	if !c.Ended() {
		t.Fatal("controller not ended")
	}
	// A command that still arrives is dropped unanswered while its
	// connection closes, so the host sends it again after reconnecting
	// rather than taking an error (DNR) for it.
	if cpl, held := h.io.Exec(t.Context(), &Command{Opcode: OpFlush, NSID: 1, CID: 7}, nil); !held {
		t.Fatalf("I/O after expiry answered: %v", cpl.Status)
	}
	// Without a transport to close the queue it fails instead.
	bare := h.io.Transport
	h.io.Transport = nil
	if st := h.exec(h.io, Command{Opcode: OpFlush, NSID: 1}, nil).Status; st.Code() != StatusCommandSequence {
		t.Fatalf("I/O after expiry on a queue without a transport: %v", st)
	}
	h.io.Transport = bare
	q := h.f.NewQueue()
	if st := h.connect(q, 2, c.ID(), testNQN).Status; st.Code() != StatusConnectInvalidParam {
		t.Fatalf("connect to an expired controller: %v", st)
	}
	// The queues close as their transports would; nothing is aborted twice.
	h.io.Close()
	h.admin.Close()
	if _, n := transportOf(h.admin).state(); n != 1 {
		t.Fatalf("admin transport aborted %d times", n)
	}
}

// Keep Alive commands every KATO/2, as Linux's host sends them, keep the
// association up past several timeouts.
func TestKeepAliveKeepsUp(t *testing.T) {
	t.Parallel()
	f := newFabric(nbd.NewMemDisk(1<<20), 0)
	f.KeepAliveSlack = -1
	h := bringUpKATO(t, f, 1000)
	for range 6 {
		time.Sleep(500 * time.Millisecond)
		h.ok(h.exec(h.admin, Command{Opcode: OpKeepAlive}, nil), "keep alive")
	}
	if _, n := transportOf(h.admin).state(); n != 0 || h.admin.Controller().Ended() {
		t.Fatal("association ended while Keep Alives came")
	}
	// Set Features KATO 0 turns the timer off; a Keep Alive then has no
	// timer to restart (Keep Alive Timeout Invalid, as nvmet answers).
	h.ok(h.exec(h.admin, Command{Opcode: OpSetFeatures, CDW10: FeatKeepAliveTimer}, nil), "KATO 0")
	time.Sleep(1500 * time.Millisecond)
	if _, n := transportOf(h.admin).state(); n != 0 || h.admin.Controller().Ended() {
		t.Fatal("association ended with KATO 0")
	}
	if st := h.exec(h.admin, Command{Opcode: OpKeepAlive}, nil).Status; st != StatusKeepAliveInvalid|StatusDNR {
		t.Fatalf("Keep Alive with KATO 0: %v, want Keep Alive Timeout Invalid (DNR)", st)
	}
	// Closing the admin queue ends the controller and aborts the I/O queue.
	c := h.admin.Controller()
	h.admin.Close()
	if _, n := transportOf(h.io).state(); n != 1 || !c.Ended() {
		t.Fatalf("I/O transport aborted %d times after the admin queue closed", n)
	}
	if _, n := transportOf(h.admin).state(); n != 0 {
		t.Fatal("the closing admin queue's own transport aborted")
	}
}

// A discovery controller whose host asks for no Keep Alive Timeout gets
// DiscoveryKATO, so a discovery connection left open ends; an I/O
// controller's KATO 0 stays 0.
func TestDiscoveryKATODefault(t *testing.T) {
	t.Parallel()
	f := newFabric(nbd.NewMemDisk(1<<20), 0)
	for _, tc := range []struct {
		nqn  string
		want uint32
	}{{DiscoveryNQN, DiscoveryKATO}, {testNQN, 0}} {
		q := f.NewQueue()
		var cmd Command
		Connect{QID: 0, SQSize: 31, KATO: 0}.Encode(&cmd)
		var d [ConnectDataSize]byte
		(&ConnectData{ControllerID: DynamicControllerID, SubNQN: tc.nqn, HostNQN: "nqn.host"}).Put(&d)
		if cpl, _ := q.Exec(context.Background(), &cmd, d[:]); cpl.Status != StatusSuccess {
			t.Fatalf("connect to %s: %v", tc.nqn, cpl.Status)
		}
		if got := q.Controller().kato.Load(); got != tc.want {
			t.Errorf("%s with KATO 0: KATO %d ms, want %d", tc.nqn, got, tc.want)
		}
		if got := q.Controller().keepAliveTimeout(); (got > 0) != (tc.want > 0) {
			t.Errorf("%s: keep alive timeout %v", tc.nqn, got)
		}
		q.Close()
	}
}
