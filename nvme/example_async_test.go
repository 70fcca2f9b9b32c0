package nvme_test

import (
	"context"
	"fmt"
	"net"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
)

// A transport keeping an NBD export's reads and writes in flight: Start
// each on the namespace's *nbd.Client, Finish them later, from any
// goroutine (here the same, in order).
func ExampleQueue_Start() {
	ctx := context.Background()
	srv := &nbd.Server{Exports: []nbd.Export{{Name: "disk", Backend: nbd.NewMemDisk(1 << 20)}}}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(l)
	defer srv.Close()
	client, err := nbd.Dial(ctx, "nbd://"+l.Addr().String()+"/disk")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()

	const nqn = "nqn.2026-01.io.nhd:bridge"
	f := &nvme.Fabric{Subsystems: []*nvme.Subsystem{{NQN: nqn, Namespaces: []nvme.Namespace{{Backend: client}}}}}
	connect := func(q *nvme.Queue, qid, cntlid uint16) uint16 {
		var cmd nvme.Command
		nvme.Connect{QID: qid, SQSize: 31}.Encode(&cmd)
		var data [nvme.ConnectDataSize]byte
		(&nvme.ConnectData{ControllerID: cntlid, SubNQN: nqn, HostNQN: "nqn.host"}).Put(&data)
		cpl, _ := q.Exec(ctx, &cmd, data[:])
		return uint16(cpl.Result)
	}
	admin, io := f.NewQueue(), f.NewQueue()
	cntlid := connect(admin, 0, nvme.DynamicControllerID)
	var cmd nvme.Command
	nvme.Property{Set: true, Offset: nvme.PropCC, Value: uint64(nvme.CCEnable)}.Encode(&cmd)
	admin.Exec(ctx, &cmd, nil)
	cmd = nvme.Command{Opcode: nvme.OpSetFeatures, CDW10: nvme.FeatNumberOfQueues, CDW11: nvme.NumberOfQueues(1, 1)}
	admin.Exec(ctx, &cmd, nil)
	connect(io, 1, cntlid)

	// Four writes of one block each in flight at once, then finished.
	var writes [4]nvme.Command
	var pending [4]nvme.Pending
	for i := range writes {
		writes[i] = nvme.Command{Opcode: nvme.OpWrite, NSID: 1, CID: uint16(i)}
		writes[i].SetRange(uint64(i), 1)
		block := make([]byte, 512)
		copy(block, fmt.Sprintf("block %d", i))
		var ok bool
		if pending[i], ok = io.Start(ctx, &writes[i], block); !ok {
			fmt.Println("not started: run it with Exec")
		}
	}
	for i := range writes {
		fmt.Println("write", i, io.Finish(ctx, &writes[i], pending[i]).Status.String())
	}

	read := nvme.Command{Opcode: nvme.OpRead, NSID: 1, CID: 9}
	read.SetRange(2, 1)
	buf := make([]byte, 512)
	p, _ := io.Start(ctx, &read, buf)
	fmt.Println("read", io.Finish(ctx, &read, p).Status.String(), string(buf[:7]))

	// A Flush cannot be started: Exec runs it.
	flush := nvme.Command{Opcode: nvme.OpFlush, NSID: 1}
	_, ok := io.Start(ctx, &flush, nil)
	fmt.Println("flush started:", ok)
	// Output:
	// write 0 success
	// write 1 success
	// write 2 success
	// write 3 success
	// read success block 2
	// flush started: false
}
