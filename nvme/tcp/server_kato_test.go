package tcp

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
)

// deadlineConn records the read deadline last set on a connection.
type deadlineConn struct {
	net.Conn
	mu sync.Mutex
	rd time.Time
}

func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.rd = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *deadlineConn) readDeadline() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rd
}

// Set Features Keep Alive Timer 0 turns keep alive off: the admin
// queue's read deadline, set from the KATO of Connect, goes with it,
// rather than drop the connection 2 x KATO + 5 s later.
func TestKATOZeroClearsDeadline(t *testing.T) {
	f := &nvme.Fabric{Subsystems: []*nvme.Subsystem{{NQN: testNQN, Namespaces: []nvme.Namespace{{Backend: nbd.NewMemDisk(1 << 20)}}}}}
	s := &Server{Fabric: f}
	defer s.Close()
	cs, hs := net.Pipe()
	defer hs.Close()
	dc := &deadlineConn{Conn: cs}
	go s.ServeConn(dc)
	h := &rawHost{t: t, nc: skipEmpty{hs}}
	hs.SetDeadline(time.Now().Add(20 * time.Second)) // failure detector only
	h.icreq(0)
	var cmd nvme.Command
	nvme.Connect{QID: 0, SQSize: 7, KATO: 1000}.Encode(&cmd)
	var d [nvme.ConnectDataSize]byte
	(&nvme.ConnectData{ControllerID: nvme.DynamicControllerID, SubNQN: testNQN, HostNQN: "nqn.raw"}).Put(&d)
	h.capsule(cmd, d[:])
	h.resp()
	h.enable(1)
	if dc.readDeadline().IsZero() {
		t.Fatal("no read deadline with KATO 1000")
	}
	h.capsule(nvme.Command{Opcode: nvme.OpSetFeatures, CID: 2, CDW10: nvme.FeatKeepAliveTimer, CDW11: 0}, nil)
	if cpl := h.resp(); cpl.Status != 0 {
		t.Fatal(cpl.Status)
	}
	// The deadline for this command is set before the server reads it,
	// so before it answers.
	nvme.Property{Offset: nvme.PropCSTS}.Encode(&cmd)
	cmd.CID = 3
	h.capsule(cmd, nil)
	if cpl := h.resp(); cpl.Status != 0 {
		t.Fatal(cpl.Status)
	}
	if rd := dc.readDeadline(); !rd.IsZero() {
		t.Fatalf("read deadline %v still set after KATO 0", rd)
	}
}
