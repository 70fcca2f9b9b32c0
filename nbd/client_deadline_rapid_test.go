package nbd

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// Property: whatever a reply looks like (simple, or structured in data,
// hole and error chunks) and wherever the server stalls in it, a call
// whose context ends returns its context's error with its buffer zeroed,
// nothing is written into that buffer afterwards, and once the server
// sends the rest the next call on the connection gets its data right.
func TestClientDeadlineAnyCutRapid(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		structured := rapid.Bool().Draw(rt, "structured")
		size := 512 * rapid.IntRange(1, 512).Draw(rt, "sectors")
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i*7 + 3)
		}
		var pieces [][2]int // [off, len) of each chunk
		var kinds []int     // 0 data, 1 hole, 2 error then data
		for off := 0; off < size; {
			n := min(size-off, 512*rapid.IntRange(1, 128).Draw(rt, "piece"))
			pieces = append(pieces, [2]int{off, n})
			kinds = append(kinds, rapid.IntRange(0, 2).Draw(rt, "kind"))
			off += n
		}
		reply := func(p *clientPeer, r Request) []byte {
			var out []byte
			if !structured {
				var h [SimpleReplySize]byte
				(&SimpleReply{Cookie: r.Cookie}).Put(&h)
				return append(append(out, h[:]...), data[:r.Length]...)
			}
			chunk := func(flags ReplyFlags, typ ChunkType, payload ...[]byte) {
				var h [ChunkHeaderSize]byte
				(&ChunkHeader{Flags: flags, Type: typ, Cookie: r.Cookie, Length: uint32(len(bytes.Join(payload, nil)))}).Put(&h)
				out = append(append(out, h[:]...), bytes.Join(payload, nil)...)
			}
			for i, pc := range pieces {
				var flags ReplyFlags
				if i == len(pieces)-1 {
					flags = ReplyFlagDone
				}
				switch kinds[i] {
				case 1:
					chunk(flags, ChunkOffsetHole, p.u64(r.Offset+uint64(pc[0])), p.u32(uint32(pc[1])))
				case 2:
					chunk(0, ChunkError, p.u32(uint32(EIO)), p.u16(3), []byte("bad"))
					fallthrough
				default:
					chunk(flags, ChunkOffsetData, p.u64(r.Offset+uint64(pc[0])), data[pc[0]:pc[0]+pc[1]])
				}
			}
			return out
		}
		cutAt := make(chan int, 1) // where the server stalls
		resume := make(chan struct{})
		var once sync.Once
		resumeNow := func() { once.Do(func() { close(resume) }) }
		defer resumeNow()
		cfg := clientDefaultScript()
		cfg.structured = structured
		c := clientSocketScripted(t, func(p *clientPeer) {
			p.handshake(cfg)
			r, _ := p.request()
			b := reply(p, r)
			cut := <-cutAt
			p.write(b[:cut])
			<-resume
			p.write(b[cut:])
			r, _ = p.request()
			if structured {
				p.chunk(r.Cookie, ReplyFlagDone, ChunkOffsetData, p.u64(r.Offset), data[:r.Length])
			} else {
				p.simple(r.Cookie, 0, data[:r.Length])
			}
			p.request() // DISC
		})
		defer c.Close()
		// The reply to the READ of the whole buffer, as the server will
		// build it: draw where in it the server stalls.
		full := len(reply(&clientPeer{}, Request{Length: uint32(size)}))
		cut := rapid.IntRange(0, full-1).Draw(rt, "cut")
		cutAt <- cut
		buf := make([]byte, size)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := c.Pread(ctx, buf, 0, 0)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			rt.Fatalf("stalled reply cut at %d of %d: %v", cut, full, err)
		}
		if !bytes.Equal(buf, make([]byte, size)) {
			rt.Fatal("abandoned buffer not zeroed")
		}
		resumeNow()
		got := make([]byte, 512)
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.Pread(ctx, got, 0, 0); err != nil || !bytes.Equal(got, data[:512]) {
			rt.Fatalf("next call: %v", err)
		}
		if !bytes.Equal(buf, make([]byte, size)) {
			rt.Fatal("the rest of the abandoned reply was written into its buffer")
		}
	})
}
