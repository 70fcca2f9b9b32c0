package main

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"testing"

	"github.com/nhdkit/nhd/internal/testenv"
	"github.com/nhdkit/nhd/nbd"
)

// TestServeUpstreamURI runs the command as a proxy of another server's
// export (-uri): the proxy's clients see the upstream's export and write
// through to its disk.
func TestServeUpstreamURI(t *testing.T) {
	disk := nbd.NewMemDisk(4 << 20)
	upSock := filepath.Join(testenv.SocketDir(t), "up.sock")
	ul, err := net.Listen("unix", upSock)
	if err != nil {
		t.Fatal(err)
	}
	up := &nbd.Server{Exports: []nbd.Export{{Name: "up", Description: "upstream", Backend: disk, MinBlockSize: 512}}}
	go up.Serve(ul)
	defer up.Close()

	sock := testenv.SocketPath(t, "proxy.sock")
	ctx, cancel := context.WithCancel(context.Background())
	_, done, log := startRun(t, ctx, "-uri", "nbd+unix:///up?socket="+upSock, "-unix", sock, "-name", "p")
	c, err := nbd.Dial(context.Background(), "nbd+unix:///p?socket="+sock)
	if err != nil {
		t.Fatal(err)
	}
	minimum, _, _ := c.BlockSize()
	if c.Size() != 4<<20 || c.Export().Description != "upstream" || minimum != 512 || !c.Flags().Has(nbd.ExportCanMultiConn) {
		t.Fatalf("proxy export %+v, minimum block %d: not the upstream's", c.Export(), minimum)
	}
	want := bytes.Repeat([]byte("through "), 512)
	if _, err := c.WriteAt(want, 8192); err != nil {
		t.Fatal(err)
	}
	c.Close()
	got := make([]byte, len(want))
	if _, err := disk.ReadAt(got, 8192); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the upstream disk does not hold the write: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v\n%s", err, log)
	}

	// An upstream export that does not exist fails the start.
	if err := run(context.Background(), []string{"-uri", "nbd+unix:///nothing?socket=" + upSock, "-unix", sock}, new(bytes.Buffer), nil); err == nil {
		t.Fatal("-uri of an export that does not exist: run succeeded")
	}
	for _, args := range [][]string{
		{"-uri", "nbd+unix:///up?socket=" + upSock, "-file", "x", "-unix", sock}, // two backends
		{"-uri", "nbd+unix:///up?socket=" + upSock, "-inetd", "-unix", sock},     // two sources
	} {
		if _, err := parseArgs(args, new(bytes.Buffer)); err == nil {
			t.Errorf("parseArgs %q succeeded", args)
		}
	}
}
