package nvme_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
)

// A transport's view of a Fabric: connect a queue, enable the
// controller, identify its namespace.
func ExampleFabric() {
	ctx := context.Background()
	f := &nvme.Fabric{Subsystems: []*nvme.Subsystem{{
		NQN:        "nqn.2026-01.io.nhd:example",
		Namespaces: []nvme.Namespace{{Backend: nbd.NewMemDisk(1 << 20), BlockSize: 4096}},
	}}}
	q := f.NewQueue()

	var cmd nvme.Command
	nvme.Connect{QID: 0, SQSize: 31}.Encode(&cmd)
	var data [nvme.ConnectDataSize]byte
	(&nvme.ConnectData{ControllerID: nvme.DynamicControllerID, SubNQN: "nqn.2026-01.io.nhd:example", HostNQN: "nqn.host"}).Put(&data)
	cpl, _ := q.Exec(ctx, &cmd, data[:])
	fmt.Println("connect:", cpl.Status.String(), "controller", cpl.Result)

	nvme.Property{Set: true, Offset: nvme.PropCC, Value: uint64(nvme.CCEnable)}.Encode(&cmd)
	q.Exec(ctx, &cmd, nil)

	page := make([]byte, nvme.IdentifySize)
	cmd = nvme.Command{Opcode: nvme.OpIdentify, NSID: 1, CDW10: nvme.CNSNamespace}
	cpl, _ = q.Exec(ctx, &cmd, page)
	var ns nvme.IdentifyNamespace
	ns.Parse((*[nvme.IdentifySize]byte)(page))
	fmt.Println("identify:", cpl.Status.String(), ns.Size, "blocks of", ns.BlockSize())
	// Output:
	// connect: success controller 1
	// identify: success 256 blocks of 4096
}

// A status is an error that matches the errno a block layer would see.
func ExampleStatus() {
	err := error(nvme.StatusLBAOutOfRange | nvme.StatusDNR)
	fmt.Println(err, errors.Is(err, syscall.EINVAL), errors.Is(err, nvme.StatusLBAOutOfRange))
	fmt.Println(nvme.StatusOf(syscall.EIO))
	// Output:
	// nvme: LBA out of range (DNR) true true
	// nvme: internal error
}
