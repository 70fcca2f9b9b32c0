package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/nhdkit/nhd/nbd/nbdtest"
)

func TestInProcess(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), nil, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"ata2nbd", 2097152 sectors of 512 bytes`, "WRITE DMA EXT: ok", "READ DMA EXT: ok", "FLUSH CACHE EXT: ok", "verified 65536 bytes"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestServer runs the bridge against a server given by URI and checks that
// the data landed on its disk at LBA 2048.
func TestServer(t *testing.T) {
	srv := nbdtest.Start(t, nbdtest.WithSize(4<<20))
	var out bytes.Buffer
	if err := run(context.Background(), []string{srv.URI}, &out); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 64<<10)
	if _, err := srv.Disk.ReadAt(got, 2048*512); err != nil {
		t.Fatal(err)
	}
	if want := bytes.Repeat([]byte("NHD!"), len(got)/4); !bytes.Equal(got, want) {
		t.Errorf("the server's disk at LBA 2048 does not hold what the host wrote")
	}
	if !strings.Contains(out.String(), "8192 sectors") {
		t.Errorf("output:\n%s", out.String())
	}
}

func TestUnreachable(t *testing.T) {
	err := run(context.Background(), []string{"nbd+unix:///?socket=/nonexistent/ata2nbd.sock"}, &bytes.Buffer{})
	if err == nil || strings.Contains(err.Error(), "\n") {
		t.Fatalf("error %v, want one line", err)
	}
}
