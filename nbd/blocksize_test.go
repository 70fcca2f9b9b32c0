package nbd_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nbd/nbdtest"
)

// blockSizeTestBackend is a Backend that states no block sizes.
type blockSizeTestBackend struct{ nbd.Backend }

func TestBlockSizeOf(t *testing.T) {
	type sizes [3]uint32
	get := func(b nbd.Backend) sizes {
		mn, pr, mx := nbd.BlockSizeOf(b)
		return sizes{mn, pr, mx}
	}
	d := nbd.NewMemDisk(1 << 20)
	if got, want := get(d), (sizes{1, nbd.MemDiskChunkSize, math.MaxUint32}); got != want {
		t.Errorf("MemDisk: %v, want %v", got, want)
	}
	if got, want := get(blockSizeTestBackend{d}), (sizes{1, 4096, nbd.DefaultMaxPayload}); got != want {
		t.Errorf("plain Backend: %v, want %v", got, want)
	}
	srv := nbdtest.Start(t, nbdtest.WithServer(func(s *nbd.Server) {
		s.Exports[0].MinBlockSize = 512
		s.MaxPayload = 1 << 20
	}))
	c, err := nbd.Dial(context.Background(), srv.URI)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, want := get(c), (sizes{512, 4096, 1 << 20}); got != want {
		t.Errorf("Client: %v, want %v (what the server advertised)", got, want)
	}
}

func ExampleBlockSizeOf() {
	mn, pr, mx := nbd.BlockSizeOf(nbd.NewMemDisk(1 << 20))
	fmt.Println(mn, pr, mx == math.MaxUint32)
	// Output: 1 65536 true
}
