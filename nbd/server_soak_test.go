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
	"sync/atomic"
	"testing"
	"time"
)

// A bounded soak on loopback (issue 17): honest clients write, read back
// and flush while hostile ones stay silent, drip bytes, send garbage and
// hang up in the middle of write payloads; then the server shuts down with
// the honest writes still in flight. Every write the server acknowledged
// must be in the durable copy of a disk that keeps writes volatile until
// flushed, and no byte of a torn write may reach it.

const (
	soakBlock        = 4096
	soakRegionBlocks = 256 // each honest writer owns this many blocks
	soakWriters      = 6   // honest goroutines, two per client
	soakHostileOff   = soakWriters * soakRegionBlocks * soakBlock
	soakHostileLen   = 1 << 20
	soakTorn         = 0xbd // the payload byte of every hostile write
)

// soakWriter is one honest goroutine's view of its region: what the
// server acknowledged, block by block, and the write it is waiting for.
type soakWriter struct {
	region  int64 // first byte
	acked   [soakRegionBlocks][]byte
	pending struct {
		first int
		data  []byte
	}
	writes int
}

type soakState struct {
	t        *testing.T
	addr     string
	ctx      context.Context // ends when the hostile clients must stop
	shutting atomic.Bool     // honest errors are expected from now on
	hostile  [5]atomic.Int64
}

var soakKinds = [...]string{"silent", "drip-handshake", "drip-payload", "garbage", "hang-up-mid-payload"}

func TestServerSoakHostileAndHonest(t *testing.T) {
	base := serverSettledRSS()
	d := &serverVolatileDisk{cache: NewMemDisk(soakHostileOff + soakHostileLen), durable: NewMemDisk(soakHostileOff + soakHostileLen)}
	s := &Server{Exports: []Export{{Backend: d}}, HandshakeTimeout: 500 * time.Millisecond, MaxPayload: 1 << 20}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	defer s.Close()
	hctx, stopHostile := context.WithCancel(context.Background())
	defer stopHostile()
	st := &soakState{t: t, addr: l.Addr().String(), ctx: hctx}

	var hostile sync.WaitGroup
	for kind := range soakKinds {
		for i := range 4 {
			hostile.Go(func() { st.hostileLoop(kind, uint64(i)) })
		}
	}
	writers := make([]*soakWriter, soakWriters)
	var honest sync.WaitGroup
	for ci := range soakWriters / 2 {
		c, err := Dial(context.Background(), "nbd://"+st.addr+"/", WithMaxInFlight(8))
		if err != nil {
			t.Fatalf("honest client %d beside hostile ones: %v", ci, err)
		}
		defer c.Close()
		for g := range 2 {
			w := &soakWriter{region: int64(2*ci+g) * soakRegionBlocks * soakBlock}
			writers[2*ci+g] = w
			honest.Go(func() { st.honestLoop(c, w, uint64(2*ci+g)) })
		}
	}

	soak := 3 * time.Second
	if testing.Short() {
		soak = time.Second
	}
	time.Sleep(soak)
	st.shutting.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	stopHostile()
	honest.Wait()
	hostile.Wait()
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve = %v, want ErrServerClosed", err)
	}
	st.verify(d, writers)
	serverCheckRSS(t, base, 256<<20)
}

// honestLoop writes random runs of blocks in w's region, each with data
// of its own, reads back now and then, and flushes now and then, until
// the server shuts down.
func (st *soakState) honestLoop(c *Client, w *soakWriter, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 99))
	got := make([]byte, 16*soakBlock)
	for op := 0; ; op++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := st.honestOp(ctx, c, w, r, op, got)
		cancel()
		if err != nil {
			if !st.shutting.Load() {
				st.t.Errorf("honest writer %d, op %d, before shutdown: %v", seed, op, err)
			}
			return
		}
	}
}

func (st *soakState) honestOp(ctx context.Context, c *Client, w *soakWriter, r *rand.Rand, op int, got []byte) error {
	first, n := r.IntN(soakRegionBlocks-16), 1+r.IntN(16)
	off := w.region + int64(first)*soakBlock
	switch {
	case op%8 == 7: // read back, against what was acknowledged
		if err := c.Pread(ctx, got[:n*soakBlock], off, 0); err != nil {
			return err
		}
		for i := range n {
			want := w.acked[first+i]
			if want == nil {
				want = make([]byte, soakBlock)
			}
			if !bytes.Equal(got[i*soakBlock:(i+1)*soakBlock], want) {
				return fmt.Errorf("read back block %d of its region differs from the acknowledged write", first+i)
			}
		}
		return nil
	case op%32 == 31:
		return c.Flush(ctx)
	}
	data := make([]byte, n*soakBlock)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	w.pending.first, w.pending.data = first, data
	var flags CmdFlags
	if op%16 == 5 {
		flags = FlagFUA
	}
	if err := c.Pwrite(ctx, data, off, flags); err != nil {
		return err
	}
	for i := range n {
		w.acked[first+i] = data[i*soakBlock : (i+1)*soakBlock]
	}
	w.pending.data = nil
	w.writes++
	return nil
}

// verify checks the durable copy: each block of an honest region holds
// its last acknowledged write, or the write in flight when the server
// shut down; the hostile area holds nothing of a torn write.
func (st *soakState) verify(d *serverVolatileDisk, writers []*soakWriter) {
	t := st.t
	got := make([]byte, soakBlock)
	zero := make([]byte, soakBlock)
	total := 0
	for wi, w := range writers {
		total += w.writes
		for b := range soakRegionBlocks {
			d.durable.ReadAt(got, w.region+int64(b)*soakBlock)
			want := w.acked[b]
			if want == nil {
				want = zero
			}
			if bytes.Equal(got, want) {
				continue
			}
			if p := w.pending; p.data != nil && b >= p.first && b < p.first+len(p.data)/soakBlock &&
				bytes.Equal(got, p.data[(b-p.first)*soakBlock:][:soakBlock]) {
				continue
			}
			t.Fatalf("writer %d, block %d: the durable copy lost an acknowledged write", wi, b)
		}
	}
	for _, m := range []*MemDisk{d.cache, d.durable} {
		area := make([]byte, soakHostileLen)
		m.ReadAt(area, soakHostileOff)
		if i := bytes.IndexByte(area, soakTorn); i >= 0 {
			t.Fatalf("a torn hostile write reached the disk at %d", soakHostileOff+i)
		}
	}
	for wi, w := range writers {
		if w.writes < 3 {
			t.Fatalf("writer %d had only %d writes acknowledged: the soak proves nothing", wi, w.writes)
		}
	}
	for k, name := range soakKinds {
		if st.hostile[k].Load() == 0 {
			t.Errorf("no %s connection was made", name)
		}
	}
	t.Logf("%d honest writes acknowledged and durable; hostile connections: %v %d, %v %d, %v %d, %v %d, %v %d", total,
		soakKinds[0], st.hostile[0].Load(), soakKinds[1], st.hostile[1].Load(), soakKinds[2], st.hostile[2].Load(),
		soakKinds[3], st.hostile[3].Load(), soakKinds[4], st.hostile[4].Load())
}

// hostileLoop opens connections of one hostile kind, one after another,
// until the soak stops.
func (st *soakState) hostileLoop(kind int, seed uint64) {
	r := rand.New(rand.NewPCG(seed, uint64(kind)))
	for {
		if st.ctx.Err() != nil {
			return
		}
		nc, err := net.Dial("tcp", st.addr)
		if err != nil {
			// Refused once the server shuts down.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		st.hostile[kind].Add(1)
		stop := context.AfterFunc(st.ctx, func() { nc.Close() })
		st.hostileConn(kind, nc, r)
		stop()
		nc.Close()
		soakSleep(st.ctx, 2*time.Millisecond) // churn, not a busy loop
	}
}

// hostileConn plays one hostile connection of the given kind; it returns
// when the server hangs up, the soak stops, or its act is over.
func (st *soakState) hostileConn(kind int, nc net.Conn, r *rand.Rand) {
	hs := serverFuzzHandshake("")
	write := func(b []byte) bool { _, err := nc.Write(b); return err == nil }
	drip := func(b []byte, gap time.Duration) bool {
		for i := range b {
			if !write(b[i:i+1]) || !soakSleep(st.ctx, gap) {
				return false
			}
		}
		return true
	}
	hungUp := make(chan struct{})
	go func() { io.Copy(io.Discard, nc); close(hungUp) }()
	switch soakKinds[kind] {
	case "silent":
		// Until the handshake timeout cuts it.
		select {
		case <-hungUp:
		case <-st.ctx.Done():
		}
	case "drip-handshake":
		drip(hs, 20*time.Millisecond)
	case "drip-payload":
		off := uint64(soakHostileOff + r.IntN(soakHostileLen/soakBlock-16)*soakBlock)
		if write(hs) && write(serverFuzzReqs(Request{Type: CmdWrite, Cookie: 1, Offset: off, Length: 16 * soakBlock})) {
			drip(bytes.Repeat([]byte{soakTorn}, 100), 10*time.Millisecond)
		}
	case "garbage":
		junk := make([]byte, 1+r.IntN(8192))
		for i := range junk {
			junk[i] = byte(r.Uint32())
		}
		junk[0] = 0 // never a request magic: garbage must not write
		if r.IntN(2) == 0 {
			junk = append(hs, junk...)
		}
		write(junk)
		soakSleep(st.ctx, 50*time.Millisecond)
	case "hang-up-mid-payload":
		off := uint64(soakHostileOff + r.IntN(soakHostileLen/soakBlock-16)*soakBlock)
		msg := append(hs, serverFuzzReqs(Request{Type: CmdWrite, Cookie: 7, Offset: off, Length: 16 * soakBlock})...)
		msg = append(msg, bytes.Repeat([]byte{soakTorn}, 1+r.IntN(16*soakBlock-1))...)
		write(msg)
	}
}

// soakSleep sleeps for d unless ctx ends first; it reports whether the
// soak goes on.
func soakSleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
