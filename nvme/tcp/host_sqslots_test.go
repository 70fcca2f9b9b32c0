package tcp

import (
	"testing"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
)

// On a queue with SQ flow control on, an SQ of N entries holds N-1
// commands (full when the head is one past the tail), so the host keeps
// at most N-1 in flight there: on the admin queue (32 entries, flow
// control always on) and on I/O queues whose controller refused to turn
// it off. Without flow control it may fill all N.
func TestHostSQFlowSlots(t *testing.T) {
	_, addr := startServer(t, nbd.NewMemDisk(1<<20), 512)
	for _, tc := range []struct {
		name   string
		refuse nvme.Status
		io     int
	}{
		{"flow control off", 0, 8},
		{"flow control on", nvme.StatusConnectInvalidParam | nvme.StatusDNR, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, paddr := startProxy(t, addr, tc.refuse)
			h := dialTest(t, paddr, &Config{IOQueues: 1, QueueDepth: 8, KeepAlive: -1})
			if n := len(h.admin.Load().slots); n != 31 {
				t.Errorf("%d admin commands may be in flight on 32 entries, want 31", n)
			}
			if n := len(h.io[0].slots); n != tc.io {
				t.Errorf("%d I/O commands may be in flight on 8 entries, want %d", n, tc.io)
			}
		})
	}
}
