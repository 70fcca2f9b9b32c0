package tcp

import (
	"net"
	"testing"
	"time"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
)

// A namespace change must not block on a host that does not read its
// admin queue (the AER's completion cannot be written), and the
// controller's Keep Alive Timer must still end that host's association,
// closing its connection. net.Pipe stands for a host whose receive
// window is full: a write blocks until the other end reads.
func TestEventNotBlockedByStalledHost(t *testing.T) {
	f := &nvme.Fabric{KeepAliveSlack: -1, Subsystems: []*nvme.Subsystem{{NQN: testNQN, Namespaces: []nvme.Namespace{{Backend: nbd.NewMemDisk(1 << 20)}}}}}
	s := &Server{Fabric: f}
	defer s.Close()
	cs, hs := net.Pipe()
	defer hs.Close()
	served := make(chan error, 1)
	go func() { served <- s.ServeConn(cs) }()
	h := &rawHost{t: t, nc: skipEmpty{hs}}
	h.icreq(0)
	h.connect(0, nvme.DynamicControllerID)
	h.enable(1)
	h.capsule(nvme.Command{Opcode: nvme.OpSetFeatures, CID: 2, CDW10: nvme.FeatAsyncEventConfig, CDW11: nvme.OAESNamespaceAttr}, nil)
	h.resp()
	// Keep Alive Timeout 1 s: the controller ends the association of a
	// host that goes silent.
	h.capsule(nvme.Command{Opcode: nvme.OpSetFeatures, CID: 3, CDW10: nvme.FeatKeepAliveTimer, CDW11: 1000}, nil)
	h.resp()
	h.capsule(nvme.Command{Opcode: nvme.OpAsyncEventRequest, CID: 4}, nil)
	// The admin queue runs its commands in order: once the next one is
	// answered, the AER is held.
	var cmd nvme.Command
	nvme.Property{Offset: nvme.PropCSTS}.Encode(&cmd)
	cmd.CID = 5
	h.capsule(cmd, nil)
	if cpl := h.resp(); cpl.CID != 5 {
		t.Fatalf("completion of CID %d before the Property Get's", cpl.CID)
	}
	// The host now stops reading.
	done := make(chan error, 1)
	go func() { done <- f.ResizeNamespace(testNQN, 1) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second): // failure detector only
		t.Fatal("Fabric.ResizeNamespace blocked on a host that does not read")
	}
	select {
	case <-served:
	case <-time.After(10 * time.Second): // failure detector only
		t.Fatal("the connection of a host that does not read outlived its Keep Alive Timeout")
	}
}

// skipEmpty drops empty writes, which block on a net.Pipe.
type skipEmpty struct{ net.Conn }

func (c skipEmpty) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	return c.Conn.Write(b)
}
