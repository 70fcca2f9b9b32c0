package nbdtest_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nbd/nbdtest"
)

func TestStartUnixAndTCP(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []nbdtest.Option
	}{
		{"unix", nil},
		{"unix named", []nbdtest.Option{nbdtest.WithExportName("/odd name")}},
		{"tcp", []nbdtest.Option{nbdtest.WithTCP(), nbdtest.WithSize(1 << 20)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := nbdtest.Start(t, tc.opts...)
			c, err := nbd.Dial(context.Background(), srv.URI)
			if err != nil {
				t.Fatalf("Dial %s: %v", srv.URI, err)
			}
			defer c.Close()
			if c.Size() != srv.Disk.Size() {
				t.Fatalf("client sees %d bytes, disk has %d", c.Size(), srv.Disk.Size())
			}
			if _, err := c.WriteAt([]byte("hello"), 4096); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, 5)
			srv.Disk.ReadAt(got, 4096)
			if !bytes.Equal(got, []byte("hello")) {
				t.Fatalf("disk holds %q", got)
			}
		})
	}
}

func TestStartReadOnlyBackend(t *testing.T) {
	d := nbd.NewMemDisk(8192)
	d.WriteAt([]byte("fixed"), 0)
	srv := nbdtest.Start(t, nbdtest.WithBackend(d), nbdtest.WithReadOnly(), nbdtest.WithServer(func(s *nbd.Server) { s.MaxInFlight = 2 }))
	if srv.Disk != nil {
		t.Fatal("Disk set for a caller's backend")
	}
	c, err := nbd.Dial(context.Background(), srv.URI)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.WriteAt([]byte("x"), 0); err == nil {
		t.Fatal("write to a read-only export succeeded")
	}
	got := make([]byte, 5)
	if _, err := c.ReadAt(got, 0); err != nil || string(got) != "fixed" {
		t.Fatalf("read %q, %v", got, err)
	}
}

// Start a server for a test and talk to it with the package's client.
func ExampleStart() {
	t := &testing.T{} // in a test, the test's own t, which shuts the server down at its end
	srv := nbdtest.Start(t, nbdtest.WithSize(1<<20))
	defer srv.Server.Close()
	c, err := nbd.Dial(context.Background(), srv.URI)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	c.WriteAt([]byte("through NBD"), 512)
	got := make([]byte, 11)
	srv.Disk.ReadAt(got, 512)
	fmt.Printf("%s, %d bytes\n", got, c.Size())
	// Output: through NBD, 1048576 bytes
}
