package nbd

import (
	"context"
	"testing"
)

// BenchmarkClientReplySpin reads 4 KiB at depth one with the spin for the
// reply (the default) and without it (WithReplySpin(0)), from nbdkit's
// memory plugin (another process) and from this package's server in this
// process, both on a unix socket. Where the spin saves the wake-up it
// must be chosen, and where it delays the reply (its spins run out, or
// the server answers later) the connection must park; spun-µs and
// parked-µs are the connection's means of its waits each way.
//
//	go test -run '^$' -bench ClientReplySpin -count 5 ./nbd
func BenchmarkClientReplySpin(b *testing.B) {
	servers := []struct {
		name string
		uri  func(b *testing.B) string
	}{
		{"nbdkit", func(b *testing.B) string {
			_, uri := clientNbdkit(b, "memory", "size=64M")
			return uri
		}},
		{"in-process", func(b *testing.B) string {
			d := NewMemDisk(64 << 20)
			d.WriteAt(make([]byte, 64<<20), 0)
			return "nbd+unix:///?socket=" + serverTestStart(b, &Server{Exports: []Export{{Backend: d}}})
		}},
	}
	for _, srv := range servers {
		for _, spin := range []struct {
			name string
			opts []Option
		}{{"spin", nil}, {"park", []Option{WithReplySpin(0)}}} {
			b.Run(srv.name+"/"+spin.name, func(b *testing.B) {
				c, err := Dial(context.Background(), srv.uri(b), spin.opts...)
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				buf := make([]byte, 4096)
				b.SetBytes(int64(len(buf)))
				b.ReportAllocs()
				var off int64
				for b.Loop() {
					if _, err := c.ReadAt(buf, off); err != nil {
						b.Fatal(err)
					}
					off = (off + 7*4096) % (64<<20 - 4096)
				}
				// The connection's means of its waits each way, which
				// choose the way (client_spin.go).
				sp := &c.conns[0].spin
				b.ReportMetric(float64(sp.ways[waySpun].mean())/1e3, "spun-µs")
				b.ReportMetric(float64(sp.ways[wayParked].mean())/1e3, "parked-µs")
			})
		}
	}
}
