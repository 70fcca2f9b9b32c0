package nbd

import (
	"context"
	"testing"
)

// Benchmarks against nbdkit's memory plugin on a unix socket. They show the
// per-request cost of the client and its allocations (0 in steady state).
//
//	go test -run '^$' -bench BenchmarkClient -benchmem -count=5 ./nbd

func clientBenchDial(b *testing.B, opts ...Option) *Client {
	b.Helper()
	_, uri := clientNbdkit(b, "memory", "size=256M")
	c, err := Dial(context.Background(), uri, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

func BenchmarkClientReadAt4K(b *testing.B) {
	c := clientBenchDial(b)
	buf := make([]byte, 4096)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.ReadAt(buf, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkClientWriteAt4K(b *testing.B) {
	c := clientBenchDial(b)
	buf := make([]byte, 4096)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.WriteAt(buf, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkClientReadAt64KParallel(b *testing.B) {
	c := clientBenchDial(b)
	b.SetBytes(64 << 10)
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 64<<10)
		for pb.Next() {
			if _, err := c.ReadAt(buf, 1<<20); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkClientWriteAt64KParallel(b *testing.B) {
	c := clientBenchDial(b)
	b.SetBytes(64 << 10)
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 64<<10)
		for pb.Next() {
			if _, err := c.WriteAt(buf, 1<<20); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkClientReadAt4KParallel(b *testing.B) {
	c := clientBenchDial(b)
	b.SetBytes(4096)
	b.ReportAllocs()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 4096)
		for pb.Next() {
			if _, err := c.ReadAt(buf, 4096); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
