package tcp

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/nhdkit/nhd/nvme"
)

// FuzzHostQueue plays a target that answers a read and a write with
// arbitrary bytes: the host's queue must neither panic nor hang, and both
// commands must end (completed or failed) once the target hangs up.
// Seeds live in testdata/fuzz/FuzzHostQueue.
func FuzzHostQueue(f *testing.F) {
	var ok [HeaderSize]byte
	(&CapsuleResp{Header: framing{}.layout(TypeCapsuleResp, 0), Cpl: nvme.Completion{CID: 1}}).Put(&ok)
	f.Add(uint8(0), ok[:])
	data := make([]byte, HeaderSize+512)
	(&Data{Header: framing{}.layout(TypeC2HData, 512), DataL: 512}).Put((*[HeaderSize]byte)(data))
	f.Add(uint8(0), append(data, ok[:]...))
	var r2t [HeaderSize]byte
	(&R2T{Header: framing{}.layout(TypeR2T, 0), CCCID: 1, R2TL: 4096}).Put(&r2t)
	f.Add(uint8(3), r2t[:])
	f.Fuzz(func(t *testing.T, dg uint8, in []byte) {
		host, target := net.Pipe()
		q := &hostQueue{nc: host, dead: make(chan struct{}), rdone: make(chan struct{}), maxH2C: 4096, inCap: 0}
		q.f = framing{dg&1 != 0, dg&2 != 0}
		q.r = newPDUReader(host, maxHostPDUData)
		q.r.framing = q.f
		q.slots = make([]hslot, 4)
		q.free = make(chan uint16, 4)
		for i := range q.slots {
			q.slots[i].done = make(chan struct{}, 1)
			q.free <- uint16(i)
		}
		for i := range q.pend {
			q.pend[i] = make([][]byte, 0, 32)
		}
		go q.reader()
		go io.Copy(io.Discard, target) // the commands and H2CData
		ctx := context.Background()
		rcmd := nvme.Command{Opcode: nvme.OpRead, NSID: 1}
		rcmd.SetRange(0, 1)
		ri, err := q.start(ctx, &rcmd, make([]byte, 512), nil)
		if err != nil {
			t.Fatal(err)
		}
		wcmd := nvme.Command{Opcode: nvme.OpWrite, NSID: 1}
		wcmd.SetRange(0, 8)
		wi, err := q.start(ctx, &wcmd, nil, make([]byte, 4096))
		if err != nil {
			t.Fatal(err)
		}
		target.SetWriteDeadline(time.Now().Add(2 * time.Second))
		target.Write(in)
		target.Close()
		done := make(chan struct{})
		go func() {
			q.wait(ri)
			q.wait(wi)
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("commands did not end after the target hung up")
		}
		q.close()
	})
}
