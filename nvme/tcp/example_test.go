package tcp_test

import (
	"context"
	"fmt"
	"net"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
	"github.com/nhdkit/nhd/nvme/tcp"
)

// A memory disk served as an NVMe/TCP namespace, read and written by this
// package's host.
func Example() {
	const nqn = "nqn.2026-01.io.nhd:example"
	f := &nvme.Fabric{Subsystems: []*nvme.Subsystem{{
		NQN:        nqn,
		Namespaces: []nvme.Namespace{{Backend: nbd.NewMemDisk(16 << 20), BlockSize: 4096}},
	}}}
	srv := &tcp.Server{Fabric: f}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(l)
	defer srv.Close()

	ctx := context.Background()
	es, err := tcp.Discover(ctx, l.Addr().String(), nil)
	if err != nil {
		panic(err)
	}
	fmt.Println("discovered:", es[0].SubNQN)

	h, err := tcp.Dial(ctx, l.Addr().String(), nqn, &tcp.Config{IOQueues: 2})
	if err != nil {
		panic(err)
	}
	defer h.Close()
	fmt.Println("namespace:", h.Size(), "bytes in blocks of", h.BlockSize(), "over", h.IOQueues(), "I/O queues")
	if _, err := h.WriteAt([]byte("hello, NVMe/TCP!"+string(make([]byte, 4080))), 8192); err != nil {
		panic(err)
	}
	buf := make([]byte, 4096)
	if _, err := h.ReadAt(buf, 8192); err != nil {
		panic(err)
	}
	fmt.Printf("read back: %s\n", buf[:16])
	// Output:
	// discovered: nqn.2026-01.io.nhd:example
	// namespace: 16777216 bytes in blocks of 4096 over 2 I/O queues
	// read back: hello, NVMe/TCP!
}
