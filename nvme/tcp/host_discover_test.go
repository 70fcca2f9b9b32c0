package tcp

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
)

// Discover reads the discovery log's header and entries in separate
// commands: when the log changes between them (here, after the first
// read: a listener added), its GENCTR changes and Discover reads it again
// rather than return a list that mixes both. A log that changes at every
// read fails with ErrDiscoveryChanged.
func TestDiscoverLogChanging(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ports func(call int32) int32
		want  int
		err   error
	}{
		{"changed once", func(call int32) int32 { return min(call, 2) }, 2, nil},
		{"changing", func(call int32) int32 { return call }, 0, ErrDiscoveryChanged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			f := &nvme.Fabric{Subsystems: []*nvme.Subsystem{{NQN: testNQN, Namespaces: []nvme.Namespace{{Backend: nbd.NewMemDisk(1 << 20)}}}}}
			f.Discovery = func(net.Addr) []nvme.DiscoveryLogEntry {
				var es []nvme.DiscoveryLogEntry
				for p := range tc.ports(calls.Add(1)) {
					es = append(es, nvme.DiscoveryLogEntry{TrType: nvme.TransportTCP, Subtype: nvme.SubtypeNVM, SubNQN: testNQN, PortID: uint16(p + 1), TrAddr: "127.0.0.1", TrSvcID: "4420"})
				}
				return es
			}
			s := &Server{Fabric: f}
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go s.Serve(l)
			defer s.Close()
			es, err := Discover(context.Background(), l.Addr().String(), nil)
			if !errors.Is(err, tc.err) || len(es) != tc.want {
				t.Fatalf("%d entries, err %v; want %d, err %v", len(es), err, tc.want, tc.err)
			}
			for i, e := range es {
				if e.PortID != uint16(i+1) {
					t.Fatalf("entry %d of port %d: a mixed list %+v", i, e.PortID, es)
				}
			}
		})
	}
}
