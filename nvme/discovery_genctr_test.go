package nvme

import (
	"net"
	"sync/atomic"
	"testing"

	"github.com/nhdkit/nhd/nbd"
)

// The discovery log's GENCTR changes whenever its entries do (a host
// reading it in several commands compares the GENCTR of each), and only
// then.
func TestDiscoveryGenCtr(t *testing.T) {
	f := newFabric(nbd.NewMemDisk(1<<20), 0)
	var ports atomic.Int32
	ports.Store(1)
	f.Discovery = func(net.Addr) []DiscoveryLogEntry {
		var es []DiscoveryLogEntry
		for p := range ports.Load() {
			es = append(es, DiscoveryLogEntry{TrType: TransportTCP, Subtype: SubtypeNVM, SubNQN: testNQN, PortID: uint16(p + 1), TrAddr: "127.0.0.1", TrSvcID: "4420"})
		}
		return es
	}
	h := &harness{t: t, f: f, admin: f.NewQueue()}
	h.ok(h.connect(h.admin, 0, DynamicControllerID, DiscoveryNQN), "connect")
	h.ok(h.prop(true, PropCC, uint64(CCEnable)), "enable")
	gen := func() uint64 {
		var cmd Command
		GetLogPage{LID: LogDiscovery, Length: DiscoveryLogPageSize}.Encode(&cmd)
		page := make([]byte, DiscoveryLogPageSize)
		h.ok(h.exec(h.admin, cmd, page), "discovery log header")
		var hd DiscoveryLogHeader
		hd.Parse((*[DiscoveryLogPageSize]byte)(page))
		return hd.GenCtr
	}
	g0, g1 := gen(), gen()
	ports.Store(2)
	g2, g3 := gen(), gen()
	if g0 == 0 || g1 != g0 || g2 == g1 || g3 != g2 {
		t.Fatalf("GENCTR %d, %d, then after a change %d, %d: want it the same until the entries change, then different", g0, g1, g2, g3)
	}
}
