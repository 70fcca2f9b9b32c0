package nbd

import (
	"encoding/binary"
	"io"
	"testing"
	"time"
)

// Benchmarks of the server's request path through a unix socket, with a
// raw client that allocates nothing itself, so allocs/op is the server's:
// it must be 0 in steady state.

func serverBenchConn(b *testing.B, structured, copied bool) (*serverRawClient, *MemDisk) {
	d := NewMemDisk(64 << 20)
	d.WriteAt(make([]byte, 64<<20), 0) // all data: reads are not holes
	var backend Backend = d
	if copied { // not a Lender or PageTaker: the pooled buffer paths
		backend = serverCopiedDisk{MemDisk: d}
	}
	path := serverTestStart(b, &Server{Exports: []Export{{Backend: backend}}})
	c := serverTestDial(b, path)
	c.negotiate("", structured, false)
	c.nc.SetDeadline(time.Time{})
	return c, d
}

// serverBench runs requests with depth of them in flight: a goroutine
// sends, this one reads the replies.
func serverBench(b *testing.B, structured bool, typ Command, size int, depth int) {
	serverBenchOn(b, structured, false, typ, size, depth)
}

func serverBenchOn(b *testing.B, structured, copied bool, typ Command, size int, depth int) {
	c, _ := serverBenchConn(b, structured, copied)
	req := make([]byte, RequestSize+size)
	payload := 0
	if typ == CmdWrite {
		payload = size
	}
	replyLen := SimpleReplySize
	if typ == CmdRead {
		replyLen += size
		if structured {
			replyLen = ChunkHeaderSize + OffsetDataHeaderSize + size
		}
	}
	reply := make([]byte, replyLen)
	tokens := make(chan struct{}, depth)
	done := make(chan struct{})
	b.SetBytes(int64(size))
	b.ReportAllocs()
	n := b.N
	go func() {
		defer close(done)
		var r Request
		r.Type, r.Length = typ, uint32(size)
		for i := range n {
			tokens <- struct{}{}
			r.Cookie = uint64(i)
			r.Offset = uint64(i*size*7) % (64<<20 - uint64(size))
			r.Put((*[RequestSize]byte)(req))
			if _, err := c.nc.Write(req[:RequestSize+payload]); err != nil {
				b.Error(err)
				return
			}
		}
	}()
	b.ResetTimer()
	for range n {
		if _, err := io.ReadFull(c.nc, reply); err != nil {
			b.Fatal(err)
		}
		if m := binary.BigEndian.Uint32(reply); m == MagicSimpleReply && binary.BigEndian.Uint32(reply[4:]) != 0 {
			b.Fatalf("error reply %d", binary.BigEndian.Uint32(reply[4:]))
		}
		<-tokens
	}
	b.StopTimer()
	<-done
}

func BenchmarkServerRead4KQD1(b *testing.B)            { serverBench(b, false, CmdRead, 4096, 1) }
func BenchmarkServerRead4KQD32(b *testing.B)           { serverBench(b, false, CmdRead, 4096, 32) }
func BenchmarkServerRead4KQD32Structured(b *testing.B) { serverBench(b, true, CmdRead, 4096, 32) }
func BenchmarkServerRead64KQD8(b *testing.B)           { serverBench(b, true, CmdRead, 64<<10, 8) }
func BenchmarkServerWrite4KQD32(b *testing.B)          { serverBench(b, false, CmdWrite, 4096, 32) }
func BenchmarkServerWrite64KQD8(b *testing.B)          { serverBench(b, false, CmdWrite, 64<<10, 8) }
func BenchmarkServerWrite256KQD8(b *testing.B)         { serverBench(b, false, CmdWrite, 256<<10, 8) }
func BenchmarkServerWrite1MQD4(b *testing.B)           { serverBench(b, false, CmdWrite, 1<<20, 4) }

// The same through a backend that lends nothing and takes no pages: read
// replies and write payloads in the server's pooled buffers.
func BenchmarkServerCopiedRead64KQD8(b *testing.B) { serverBenchOn(b, true, true, CmdRead, 64<<10, 8) }
func BenchmarkServerCopiedRead1MQD4(b *testing.B)  { serverBenchOn(b, false, true, CmdRead, 1<<20, 4) }
func BenchmarkServerCopiedWrite64KQD8(b *testing.B) {
	serverBenchOn(b, false, true, CmdWrite, 64<<10, 8)
}
func BenchmarkServerCopiedWrite1MQD4(b *testing.B) { serverBenchOn(b, false, true, CmdWrite, 1<<20, 4) }
