package tcp

import (
	"fmt"
	"testing"
	"time"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
)

// On a queue with SQ flow control on, an SQ of N entries holds N-1
// commands (full when the head is one past the tail), so the host keeps
// at most N-1 in flight there: on the admin queue (32 entries, flow
// control always on), and on an I/O queue whose controller refused to turn
// it off the host asks for one entry more than its commands. Without flow
// control it may fill all N.
func TestHostSQFlowSlots(t *testing.T) {
	_, addr := startServer(t, nbd.NewMemDisk(1<<20), 512)
	for _, tc := range []struct {
		name   string
		refuse nvme.Status
		asked  string // the I/O queue's Connects: SQSIZE/CATTR
	}{
		{"flow control off", 0, "[7/4]"},
		{"flow control on", nvme.StatusConnectInvalidParam | nvme.StatusDNR, "[7/4 8/0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			px, paddr := startProxy(t, addr, tc.refuse)
			h := dialTest(t, paddr, &Config{IOQueues: 1, QueueDepth: 8, KeepAlive: -1})
			if n := len(h.admin.Load().slots); n != 31 {
				t.Errorf("%d admin commands may be in flight on 32 entries, want 31", n)
			}
			if n := len(h.io[0].slots); n != 8 {
				t.Errorf("%d I/O commands may be in flight, want QueueDepth 8", n)
			}
			if got := ioConnects(px); got != tc.asked {
				t.Errorf("I/O queue Connects (SQSIZE/CATTR) %s, want %s", got, tc.asked)
			}
		})
	}
}

// ioConnects lists the SQSIZE and CATTR of the I/O queue Connects p saw.
func ioConnects(p *pduProxy) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var s []string
	for _, k := range p.connects {
		if k.QID != 0 {
			s = append(s, fmt.Sprintf("%d/%d", k.SQSize, k.CATTR))
		}
	}
	return fmt.Sprint(s)
}

// A queue connected with SQ flow control off, at the default depth (the
// controller's MQES), reconnects to a controller that keeps it on: the
// host asks for one entry more, which MQES leaves room for. It used to ask
// for MQES+1 entries and was refused until LossTimeout.
func TestHostReconnectSQFlowOn(t *testing.T) {
	_, addr := startServer(t, nbd.NewMemDisk(1<<20), 512)
	px, paddr := startProxy(t, addr, 0)
	cp := newCutProxy(t, paddr)
	h := dialTest(t, cp.addr(), &Config{IOQueues: 1, KeepAlive: -1, ReconnectDelay: 20 * time.Millisecond, LossTimeout: 10 * time.Second})
	slots := len(h.io[0].slots)
	px.setRefuse(nvme.StatusConnectInvalidParam | nvme.StatusDNR)
	cp.cut()
	if _, err := h.ReadAt(make([]byte, 4096), 0); err != nil {
		t.Fatalf("read after the reconnection: %v", err)
	}
	want := fmt.Sprintf("[%d/4 %d/4 %d/0]", slots-1, slots-1, slots)
	if got := ioConnects(px); got != want {
		t.Errorf("I/O queue Connects (SQSIZE/CATTR) %s, want %s", got, want)
	}
}
