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
// commands must end (completed or failed) once the target hangs up. A
// third command, a read of bigRead bytes, takes the direct path of
// pduReader.readPayload when the target's bytes come in small pieces
// (dg&4).
// Seeds live in testdata/fuzz/FuzzHostQueue.
func FuzzHostQueue(f *testing.F) {
	const bigRead = directMin + 512
	var ok [HeaderSize]byte
	(&CapsuleResp{Header: framing{}.layout(TypeCapsuleResp, 0), Cpl: nvme.Completion{CID: 1}}).Put(&ok)
	f.Add(uint8(0), ok[:])
	data := make([]byte, HeaderSize+512)
	(&Data{Header: framing{}.layout(TypeC2HData, 512), DataL: 512}).Put((*[HeaderSize]byte)(data))
	f.Add(uint8(0), append(data, ok[:]...))
	var r2t [HeaderSize]byte
	(&R2T{Header: framing{}.layout(TypeR2T, 0), CCCID: 1, R2TL: 4096}).Put(&r2t)
	f.Add(uint8(3), r2t[:])
	big := make([]byte, HeaderSize+bigRead)
	(&Data{Header: framing{}.layout(TypeC2HData, bigRead), CCCID: 2, DataL: bigRead}).Put((*[HeaderSize]byte)(big))
	f.Add(uint8(4), big)
	f.Fuzz(func(t *testing.T, dg uint8, in []byte) {
		host, target := net.Pipe()
		q := pipeQueue(host, framing{dg&1 != 0, dg&2 != 0}, 4)
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
		bcmd := nvme.Command{Opcode: nvme.OpRead, NSID: 1}
		bcmd.SetRange(0, bigRead/512)
		bi, err := q.start(ctx, &bcmd, make([]byte, bigRead), nil) // read straight from the connection
		if err != nil {
			t.Fatal(err)
		}
		target.SetWriteDeadline(time.Now().Add(2 * time.Second))
		if dg&4 != 0 { // in small pieces: the reader's buffer holds no whole payload
			for p := in; len(p) > 0; p = p[min(len(p), 61):] {
				target.Write(p[:min(len(p), 61)])
			}
		} else {
			target.Write(in)
		}
		target.Close()
		done := make(chan struct{})
		go func() {
			q.wait(ri)
			q.wait(wi)
			q.wait(bi)
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
