package nvme_test

import (
	"context"
	"fmt"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
)

// printer is a transport that prints what its controller asks of it.
type printer struct{}

func (printer) Complete(cpl nvme.Completion) {
	e := nvme.AsyncEventOf(cpl.Result)
	fmt.Printf("AER %d completes: type %d, log page %#02x\n", cpl.CID, e.Type, e.LID)
}

func (printer) Abort() { fmt.Println("connection aborted") }

// A namespace added at run time completes the Asynchronous Event Request
// the host left, once it enabled the event; the Changed Namespace List
// names the new namespace.
func ExampleFabric_AddNamespace() {
	ctx := context.Background()
	const nqn = "nqn.2026-01.io.nhd:example"
	f := &nvme.Fabric{Subsystems: []*nvme.Subsystem{{NQN: nqn, Namespaces: []nvme.Namespace{{Backend: nbd.NewMemDisk(1 << 20)}}}}}
	q := f.NewQueue()
	q.Transport = printer{}
	exec := func(cmd nvme.Command, data []byte) {
		if cpl, held := q.Exec(ctx, &cmd, data); !held && cpl.Status != nvme.StatusSuccess {
			fmt.Println(cpl.Status)
		}
	}
	var cmd nvme.Command
	nvme.Connect{SQSize: 31}.Encode(&cmd)
	var data [nvme.ConnectDataSize]byte
	(&nvme.ConnectData{ControllerID: nvme.DynamicControllerID, SubNQN: nqn, HostNQN: "nqn.host"}).Put(&data)
	exec(cmd, data[:])
	nvme.Property{Set: true, Offset: nvme.PropCC, Value: uint64(nvme.CCEnable)}.Encode(&cmd)
	exec(cmd, nil)
	exec(nvme.Command{Opcode: nvme.OpSetFeatures, CDW10: nvme.FeatAsyncEventConfig, CDW11: nvme.OAESNamespaceAttr}, nil)
	exec(nvme.Command{Opcode: nvme.OpAsyncEventRequest, CID: 7}, nil)

	nsid, _ := f.AddNamespace(nqn, nvme.Namespace{Backend: nbd.NewMemDisk(1 << 20)})
	fmt.Println("added namespace", nsid)

	page := make([]byte, nvme.IdentifySize)
	nvme.GetLogPage{LID: nvme.LogChangedNamespaces, Length: nvme.IdentifySize}.Encode(&cmd)
	exec(cmd, page)
	fmt.Println("changed:", nvme.ParseChangedNamespaces((*[nvme.IdentifySize]byte)(page), nil))
	q.Close()
	// Output:
	// AER 7 completes: type 2, log page 0x04
	// added namespace 2
	// changed: [2]
}
