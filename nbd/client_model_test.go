package nbd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// A rapid state machine drives a Client against a scripted in-memory
// server and checks every result against a plain byte slice. The server
// answers reads with structured replies cut at random into data and hole
// chunks sent in random order, and its maximum payload is 36 KiB, so reads
// and writes are split and large pieces take the direct read path; actions also run in parallel on disjoint ranges.

const clientModelSize = 64 << 10

// clientMemServer serves a memory disk of len(disk) bytes on conn after a
// standard handshake, until the client disconnects.
func clientMemServer(t testing.TB, conn net.Conn, disk []byte, seed uint64) {
	p := &clientPeer{t: t, conn: conn}
	cfg := clientDefaultScript()
	cfg.size = uint64(len(disk))
	cfg.blockSize = [3]uint32{1, 4096, 36 << 10}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(clientPeerDone); !ok {
				panic(r)
			}
		}
		conn.Close()
	}()
	p.handshake(cfg)
	rng := rand.New(rand.NewPCG(seed, 7))
	var mu sync.Mutex // replies of concurrent handlers must not interleave
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		_ = conn.SetReadDeadline(time.Time{})
		var hb [RequestSize]byte
		if _, err := io.ReadFull(conn, hb[:]); err != nil {
			return
		}
		var r Request
		if err := r.Parse(&hb); err != nil {
			t.Errorf("server: %v", err)
			return
		}
		var data []byte
		if r.Type == CmdWrite {
			data = make([]byte, r.Length)
			if _, err := io.ReadFull(conn, data); err != nil {
				return
			}
		}
		if r.Type == CmdDisc {
			return
		}
		if r.Offset+uint64(r.Length) > uint64(len(disk)) {
			t.Errorf("server: request %+v past the end", r)
		}
		end := r.Offset + uint64(r.Length)
		switch r.Type {
		case CmdWrite:
			copy(disk[r.Offset:], data)
		case CmdTrim, CmdWriteZeroes:
			clear(disk[r.Offset:end])
		}
		// Answer in a goroutine after a random pause, so replies of
		// concurrent requests come back out of order.
		var snap []byte
		if r.Type == CmdRead {
			snap = bytes.Clone(disk[r.Offset:end])
		}
		delay := time.Duration(rng.IntN(200)) * time.Microsecond
		cut := rng.Uint64()
		wg.Go(func() {
			defer func() {
				if r := recover(); r != nil {
					if _, ok := r.(clientPeerDone); !ok {
						panic(r)
					}
				}
			}()
			time.Sleep(delay)
			mu.Lock()
			defer mu.Unlock()
			switch r.Type {
			case CmdRead:
				clientSendRead(p, r, snap, rand.New(rand.NewPCG(cut, 1)))
			case CmdBlockStatus:
				p.chunk(r.Cookie, ReplyFlagDone, ChunkBlockStatus, AppendBlockStatus(nil, 7, []Extent{{r.Length, 0}}))
			default:
				p.simple(r.Cookie, 0, nil)
			}
		})
	}
}

// clientSendRead answers a READ with its data cut into 1 to 4 pieces, each
// sent as data or (if all zero) a hole, in random order.
func clientSendRead(p *clientPeer, r Request, data []byte, rng *rand.Rand) {
	cuts := []int{0, len(data)}
	for range rng.IntN(4) {
		cuts = append(cuts, rng.IntN(len(data)+1))
	}
	slicesSortInts(cuts)
	type piece struct{ lo, hi int }
	var ps []piece
	for i := 1; i < len(cuts); i++ {
		if cuts[i] > cuts[i-1] {
			ps = append(ps, piece{cuts[i-1], cuts[i]})
		}
	}
	rng.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	for i, pc := range ps {
		var fl ReplyFlags
		if i == len(ps)-1 {
			fl = ReplyFlagDone
		}
		off := r.Offset + uint64(pc.lo)
		if bytes.Equal(data[pc.lo:pc.hi], make([]byte, pc.hi-pc.lo)) && rng.IntN(2) == 0 {
			p.chunk(r.Cookie, fl, ChunkOffsetHole, p.u64(off), p.u32(uint32(pc.hi-pc.lo)))
		} else {
			p.chunk(r.Cookie, fl, ChunkOffsetData, p.u64(off), data[pc.lo:pc.hi])
		}
	}
}

func slicesSortInts(a []int) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

type clientModel struct {
	c     *Client
	model []byte
}

func (m *clientModel) rangeOf(t *rapid.T) (int64, int) {
	off := rapid.IntRange(0, clientModelSize-1).Draw(t, "off")
	n := rapid.IntRange(1, min(clientModelSize-off, 48<<10)).Draw(t, "len")
	return int64(off), n
}

func (m *clientModel) Write(t *rapid.T) {
	off, n := m.rangeOf(t)
	p := make([]byte, n)
	v := rapid.Byte().Draw(t, "fill")
	for i := range p {
		p[i] = v + byte(i)
	}
	if _, err := m.c.WriteAt(p, off); err != nil {
		t.Fatal(err)
	}
	copy(m.model[off:], p)
}

func (m *clientModel) Read(t *rapid.T) {
	off, n := m.rangeOf(t)
	p := bytes.Repeat([]byte{0xee}, n)
	if _, err := m.c.ReadAt(p, off); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p, m.model[off:off+int64(n)]) {
		t.Fatalf("ReadAt(%d, %d) differs from the model", off, n)
	}
}

func (m *clientModel) ReadPastEnd(t *rapid.T) {
	off := rapid.IntRange(clientModelSize-4096, clientModelSize+100).Draw(t, "off")
	p := make([]byte, 8192)
	n, err := m.c.ReadAt(p, int64(off))
	want := max(0, clientModelSize-off)
	if n != want || err != io.EOF {
		t.Fatalf("ReadAt past the end at %d = %d, %v; want %d, EOF", off, n, err, want)
	}
	if n > 0 && !bytes.Equal(p[:n], m.model[off:off+n]) {
		t.Fatal("data before the end differs")
	}
}

func (m *clientModel) Zero(t *rapid.T) {
	off, n := m.rangeOf(t)
	ctx := context.Background()
	var err error
	if rapid.Bool().Draw(t, "trim") {
		err = m.c.Trim(ctx, off, int64(n))
	} else {
		err = m.c.WriteZeroes(ctx, off, int64(n), 0)
	}
	if err != nil {
		t.Fatal(err)
	}
	clear(m.model[off : off+int64(n)])
}

func (m *clientModel) Flush(t *rapid.T) {
	if err := m.c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Parallel writes then reads on disjoint ranges from several goroutines.
func (m *clientModel) Parallel(t *rapid.T) {
	k := rapid.IntRange(2, 8).Draw(t, "goroutines")
	span := clientModelSize / k
	fill := rapid.Byte().Draw(t, "fill")
	var wg sync.WaitGroup
	errs := make(chan error, k)
	for i := range k {
		wg.Go(func() {
			off := int64(i * span)
			p := bytes.Repeat([]byte{fill + byte(i)}, span)
			if _, err := m.c.WriteAt(p, off); err != nil {
				errs <- err
				return
			}
			q := make([]byte, span)
			if _, err := m.c.ReadAt(q, off); err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(p, q) {
				errs <- fmt.Errorf("goroutine %d read back wrong", i)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range k {
		for j := range span {
			m.model[i*span+j] = fill + byte(i)
		}
	}
}

// A call whose context has ended fails with its error, leaves a zeroed
// buffer, and does not disturb the connection.
func (m *clientModel) Cancelled(t *rapid.T) {
	off, n := m.rangeOf(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p := bytes.Repeat([]byte{1}, n)
	if err := m.c.Pread(ctx, p, off, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Pread with a cancelled context: %v", err)
	}
	if !bytes.Equal(p, make([]byte, n)) {
		t.Fatal("buffer not zeroed")
	}
}

func (m *clientModel) Check(t *rapid.T) {}

func TestClientModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cs, ss := net.Pipe()
		disk := make([]byte, clientModelSize)
		done := make(chan struct{})
		seed := rapid.Uint64().Draw(rt, "seed")
		go func() {
			defer close(done)
			clientMemServer(t, ss, disk, seed)
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := NewClient(ctx, cs, WithMaxInFlight(rapid.IntRange(1, 8).Draw(rt, "inflight")))
		if err != nil {
			rt.Fatal(err)
		}
		m := &clientModel{c: c, model: make([]byte, clientModelSize)}
		defer func() {
			c.Close()
			cs.Close()
			<-done
		}()
		rt.Repeat(rapid.StateMachineActions(m))
	})
}
