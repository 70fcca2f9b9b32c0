package tcp

import (
	"bytes"
	"net"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
)

// writeCountConn is a TCP connection whose RawConn counts its Write calls:
// each is one raw writev of the target (zerocopy.Batch).
type writeCountConn struct {
	*net.TCPConn
	writes *atomic.Int64
}

func (c writeCountConn) SyscallConn() (syscall.RawConn, error) {
	rc, err := c.TCPConn.SyscallConn()
	return writeCountRaw{rc, c.writes}, err
}

type writeCountRaw struct {
	syscall.RawConn
	writes *atomic.Int64
}

func (r writeCountRaw) Write(f func(fd uintptr) bool) error {
	r.writes.Add(1)
	return r.RawConn.Write(f)
}

// The completions of commands that arrive together leave together: the
// target holds the pen from the first command it reads, so the first
// completion does not go out alone ahead of the others. maxHeld commands
// sent in one write are answered in one writev.
func TestServerBurstOneWrite(t *testing.T) {
	const burst = maxHeld // at most SQSIZE 7 + 1 of rawHost.connect
	f := &nvme.Fabric{Subsystems: []*nvme.Subsystem{{NQN: testNQN, Namespaces: []nvme.Namespace{{Backend: nbd.NewMemDisk(1 << 20), BlockSize: 512}}}}}
	s := &Server{Fabric: f}
	defer s.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var writes atomic.Int64
	go func() {
		nc, err := l.Accept()
		if err != nil {
			return
		}
		s.ServeConn(writeCountConn{nc.(*net.TCPConn), &writes})
	}()
	h := dialRaw(t, l.Addr().String())
	h.icreq(0)
	h.connect(0, nvme.DynamicControllerID)
	var all bytes.Buffer
	for i := range burst {
		var cmd nvme.Command
		nvme.Property{Size8: true, Offset: nvme.PropCAP}.Encode(&cmd)
		cmd.CID, cmd.Flags = uint16(i), nvme.FlagSGL
		var b [CmdSize]byte
		(&CapsuleCmd{Header: h.f.layout(TypeCapsuleCmd, 0), Cmd: cmd}).Put(&b)
		all.Write(b[:])
	}
	before := writes.Load()
	h.write(all.Bytes())
	for i := range burst {
		if cpl := h.resp(); cpl.CID != uint16(i) || cpl.Status != 0 {
			t.Fatalf("completion %d: CID %d, %v", i, cpl.CID, cpl.Status)
		}
	}
	if got := writes.Load() - before; got != 1 {
		t.Errorf("%d commands that arrived together were answered in %d writes, want 1", burst, got)
	}
}
