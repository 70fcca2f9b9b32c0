package nbd_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/nhdkit/nhd/nbd"
)

// Serve an upstream NBD export again (a proxy): ExportOf gives the
// export as the upstream describes it, and the proxy's clients see the
// same export, CAN_MULTI_CONN included.
func ExampleExportOf() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	serve := func(name string, e nbd.Export) *nbd.Server {
		srv := &nbd.Server{Exports: []nbd.Export{e}}
		l, err := net.Listen("unix", filepath.Join(dir, name))
		if err != nil {
			panic(err)
		}
		go srv.Serve(l)
		return srv
	}
	ctx := context.Background()

	// The upstream: a read-only disk with 4 KiB blocks.
	up := serve("up.sock", nbd.Export{Name: "disk", Description: "a 1 MiB disk", Backend: nbd.NewMemDisk(1 << 20),
		ReadOnly: true, MinBlockSize: 4096, PreferredBlockSize: 4096})
	defer up.Close()
	c, err := nbd.Dial(ctx, "nbd+unix:///disk?socket="+filepath.Join(dir, "up.sock"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	// The proxy serves the client as it is.
	e := nbd.ExportOf(c, "proxied")
	fmt.Printf("%q read-only=%v blocks=%d/%d no-read-holes=%v\n",
		e.Description, e.ReadOnly, e.MinBlockSize, e.PreferredBlockSize, e.NoReadHoles)
	proxy := serve("proxy.sock", e)
	defer proxy.Close()

	down, err := nbd.Dial(ctx, "nbd+unix:///proxied?socket="+filepath.Join(dir, "proxy.sock"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer down.Close()
	minimum, preferred, _ := down.BlockSize()
	fmt.Println(down.Size(), down.Flags().Has(nbd.ExportReadOnly), down.Flags().Has(nbd.ExportCanMultiConn), minimum, preferred)
	// Output:
	// "a 1 MiB disk" read-only=true blocks=4096/4096 no-read-holes=true
	// 1048576 true true 4096 4096
}
