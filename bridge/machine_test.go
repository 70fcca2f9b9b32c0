package bridge

import (
	"bytes"
	"context"
	"testing"

	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nbd/nbdtest"
	"pgregory.net/rapid"
)

// TestBridgeMachine drives every variant's bridge with random reads, writes
// (of one or two blocks, anywhere, so read-ahead and write-behind meet
// overlaps, neighbours and misses) and flushes, against a plain byte slice:
// every read returns what the model holds, and after a flush the back end
// holds it too. The back end is a memory disk, called directly, or the
// same disk served in process through the NBD client, which the variant
// pipelined across commands keeps several requests in flight on (up to
// four, drawn).
func TestBridgeMachine(t *testing.T) {
	const bs, blocks = 4096, 16
	md := nbd.NewMemDisk(blocks * bs)
	srv := nbdtest.Start(t, nbdtest.WithBackend(md))
	client, err := nbd.Dial(context.Background(), srv.URI)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	for _, v := range Table4() {
		for _, be := range []struct {
			name string
			be   ata.Backend
		}{{"memory disk", md}, {"NBD client", client}} {
			t.Run(v.Name+"/"+be.name, func(t *testing.T) {
				rapid.Check(t, func(t *rapid.T) {
					if err := md.Trim(context.Background(), 0, blocks*bs); err != nil {
						t.Fatal(err)
					}
					d, err := New(Config{Backend: be.be, Datapath: v.Datapath, Sectors: blocks * bs / 512, MaxCommand: 2 * bs,
						Chunk: 2048, Depth: rapid.IntRange(1, 4).Draw(t, "ahead")})
					if err != nil {
						t.Fatal(err)
					}
					defer d.Close()
					model := make([]byte, blocks*bs)
					fillByte := byte(1)
					span := func(t *rapid.T) (int64, int) {
						n := rapid.IntRange(1, 2).Draw(t, "blocks")
						b := rapid.IntRange(0, blocks-n).Draw(t, "block")
						return int64(b * bs), n * bs
					}
					t.Repeat(map[string]func(*rapid.T){
						"write": func(t *rapid.T) {
							off, n := span(t)
							buf := bytes.Repeat([]byte{fillByte}, n)
							for i := range buf {
								buf[i] += byte(i / 512)
							}
							fillByte++
							if err := d.Write(buf, off); err != nil {
								t.Fatal(err)
							}
							copy(model[off:], buf)
						},
						"read": func(t *rapid.T) {
							off, n := span(t)
							buf := make([]byte, n)
							if err := d.Read(buf, off); err != nil {
								t.Fatal(err)
							}
							if !bytes.Equal(buf, model[off:off+int64(n)]) {
								t.Fatalf("read of %d bytes at %d differs from what was written", n, off)
							}
						},
						"sequential reads": func(t *rapid.T) {
							// Runs of reads are what read-ahead serves.
							off, n := span(t)
							for k := 0; k < 3 && off+int64(n) <= blocks*bs; k++ {
								buf := make([]byte, n)
								if err := d.Read(buf, off); err != nil {
									t.Fatal(err)
								}
								if !bytes.Equal(buf, model[off:off+int64(n)]) {
									t.Fatalf("sequential read %d of %d bytes at %d differs", k, n, off)
								}
								off += int64(n)
							}
						},
						"flush": func(t *rapid.T) {
							if err := d.Flush(); err != nil {
								t.Fatal(err)
							}
							got := make([]byte, len(model))
							md.ReadAt(got, 0)
							if !bytes.Equal(got, model) {
								t.Fatal("after FLUSH CACHE the back end differs from what was written")
							}
						},
					})
				})
			})
		}
	}
}
