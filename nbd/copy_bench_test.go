package nbd_test

import (
	"context"
	"testing"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nbd/nbdtest"
)

// BenchmarkCopyClientToMemory copies a 16 MiB export, half data, from an
// in-process server into a MemDisk through two connections. Figures are
// to be measured on a quiet machine:
//
//	go test ./nbd -run '^$' -bench CopyClientToMemory -benchtime 20x
func BenchmarkCopyClientToMemory(b *testing.B) {
	const size = 16 << 20
	srv := nbdtest.Start(b, nbdtest.WithSize(size))
	copyTestFill(b, srv.Disk, 7)
	ctx := context.Background()
	c, err := nbd.Dial(ctx, srv.URI, nbd.WithConnections(2))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := nbd.Copy(ctx, nbd.NewMemDisk(size), c, nbd.CopyOptions{DestinationIsZero: true}); err != nil {
			b.Fatal(err)
		}
	}
}
