package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
)

// cutProxy forwards TCP connections to a target and cuts them all on
// demand, as a network failure would.
type cutProxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	cuts   int
	refuse bool // new connections are closed at once
	// every, if set, cuts all connections each time this many more
	// bytes went through, up to maxCuts times: in the middle of a
	// transfer, so with a command in flight.
	every, maxCuts int
	bytes          int
}

// countingWriter tells its proxy how many bytes went through.
type countingWriter struct {
	w io.Writer
	p *cutProxy
}

func (c countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.p.count(n)
	return n, err
}

func (p *cutProxy) count(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.every == 0 || p.cuts >= p.maxCuts {
		return
	}
	if p.bytes += n; p.bytes >= p.every {
		p.bytes = 0
		p.cutLocked()
	}
}

// cutEvery makes p cut every n bytes, max times.
func (p *cutProxy) cutEvery(n, max int) {
	p.mu.Lock()
	p.every, p.maxCuts, p.bytes = n, max, 0
	p.mu.Unlock()
}

func newCutProxy(t testing.TB, target string) *cutProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{l: l, target: target}
	go p.serve()
	t.Cleanup(func() { l.Close(); p.cut() })
	return p
}

func (p *cutProxy) addr() string { return p.l.Addr().String() }

func (p *cutProxy) serve() {
	for {
		a, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.refuse
		p.mu.Unlock()
		if refuse {
			a.Close()
			continue
		}
		b, err := net.Dial("tcp", p.target)
		if err != nil {
			a.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, a, b)
		p.mu.Unlock()
		go func() { io.Copy(countingWriter{a, p}, b); a.Close(); b.Close() }()
		go func() { io.Copy(countingWriter{b, p}, a); a.Close(); b.Close() }()
	}
}

// cut resets every connection through the proxy.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutLocked()
}

func (p *cutProxy) cutLocked() {
	for _, c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		c.Close()
	}
	p.conns = nil
	p.cuts++
}

func (p *cutProxy) cutCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

// resentCount returns how many commands h's I/O queues sent again.
func resentCount(h *Host) int {
	n := 0
	for _, q := range h.io {
		q.mu.Lock()
		n += q.resent
		q.mu.Unlock()
	}
	return n
}

func (p *cutProxy) setRefuse(v bool) {
	p.mu.Lock()
	p.refuse = v
	p.mu.Unlock()
}

// stamp fills b with blocks naming worker w's write number seq.
func stamp(b []byte, w, seq int) {
	for o := 0; o < len(b); o += 8 {
		binary.LittleEndian.PutUint64(b[o:], uint64(w)<<48|uint64(seq)<<16|uint64(o/8&0xFFFF))
	}
}

// Connections cut again and again under reads and writes in flight: the
// host reconnects and re-issues what was in flight, so every call
// succeeds, every read returns what its worker last had acknowledged,
// and the disk ends holding every acknowledged write.
func TestHostReconnectsUnderIO(t *testing.T) {
	for _, dg := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "digests"}[dg], func(t *testing.T) {
			const size, workers, region = 8 << 20, 6, 1 << 20
			disk := nbd.NewMemDisk(size)
			_, addr := startServer(t, disk, 512, inCapsule(8192))
			p := newCutProxy(t, addr)
			// The delay outlasts the target's work on a dropped connection:
			// a write it still ran after the host re-issued the same
			// write and then another would undo the latter.
			h := dialTest(t, p.addr(), &Config{IOQueues: 2, QueueDepth: 8, HeaderDigest: dg, DataDigest: dg,
				ReconnectDelay: 200 * time.Millisecond, LossTimeout: 20 * time.Second})
			models := make([][]byte, workers)
			var wg sync.WaitGroup
			stop := make(chan struct{})
			errs := make(chan error, workers)
			for w := range workers {
				models[w] = make([]byte, region)
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- worker(h, w, models[w], stop)
				}()
			}
			for range 5 {
				time.Sleep(300 * time.Millisecond)
				p.cut()
			}
			time.Sleep(150 * time.Millisecond)
			close(stop)
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			resent := resentCount(h)
			if p.cutCount() < 5 || resent == 0 {
				t.Fatalf("%d cuts, %d commands sent again: the test cut nothing in flight", p.cutCount(), resent)
			}
			t.Logf("%d cuts, %d commands sent again", p.cutCount(), resent)
			got := make([]byte, region)
			for w := range workers {
				disk.ReadAt(got, int64(w*region))
				if !bytes.Equal(got, models[w]) {
					t.Fatalf("worker %d's region differs from its acknowledged writes", w)
				}
			}
		})
	}
}

// worker writes and reads its own region of h until stop, checking each
// read against model, the region as acknowledged.
func worker(h *Host, w int, model []byte, stop chan struct{}) error {
	rng := rand.New(rand.NewPCG(uint64(w), 7))
	buf := make([]byte, 64<<10)
	base := int64(w * len(model))
	for seq := 1; ; seq++ {
		select {
		case <-stop:
			return nil
		default:
		}
		n := 512 << rng.IntN(8) // 512 B .. 64 KiB: in-capsule and R2T
		off := rng.Int64N(int64(len(model)-n)/512) * 512
		if rng.IntN(2) == 0 {
			stamp(buf[:n], w, seq)
			if _, err := h.WriteAt(buf[:n], base+off); err != nil {
				return fmt.Errorf("worker %d: write %d at %d: %w", w, n, base+off, err)
			}
			copy(model[off:], buf[:n])
			continue
		}
		if _, err := h.ReadAt(buf[:n], base+off); err != nil {
			return fmt.Errorf("worker %d: read %d at %d: %w", w, n, base+off, err)
		}
		if !bytes.Equal(buf[:n], model[off:off+int64(n)]) {
			return fmt.Errorf("worker %d: read %d at %d returned other than the acknowledged writes", w, n, base+off)
		}
	}
}

// When the target stays unreachable past LossTimeout, the commands
// waiting fail with ErrControllerLost, and so do later ones; until then
// they wait.
func TestHostLossTimeout(t *testing.T) {
	disk := nbd.NewMemDisk(1 << 20)
	_, addr := startServer(t, disk, 512)
	p := newCutProxy(t, addr)
	h := dialTest(t, p.addr(), &Config{IOQueues: 1, ReconnectDelay: 50 * time.Millisecond, LossTimeout: 600 * time.Millisecond})
	p.setRefuse(true)
	p.cut()
	start := time.Now()
	buf := make([]byte, 4096)
	_, err := h.ReadAt(buf, 0)
	if !errors.Is(err, ErrControllerLost) {
		t.Fatalf("read after the loss timeout: %v", err)
	}
	if !strings.Contains(err.Error(), "no reconnection within 600ms") {
		t.Fatalf("the loss's error does not name the timeout: %v", err)
	}
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Fatalf("failed after %v, before the loss timeout", d)
	}
	if _, err := h.WriteAt(buf, 0); !errors.Is(err, ErrControllerLost) {
		t.Fatalf("write after the loss: %v", err)
	}
}

// With LossTimeout negative a cut fails the commands at once.
func TestHostNoReconnect(t *testing.T) {
	_, addr := startServer(t, nbd.NewMemDisk(1<<20), 512)
	p := newCutProxy(t, addr)
	h := dialTest(t, p.addr(), &Config{IOQueues: 1, LossTimeout: -1})
	p.cut()
	time.Sleep(50 * time.Millisecond)
	if _, err := h.ReadAt(make([]byte, 512), 0); err == nil || errors.Is(err, ErrControllerLost) {
		t.Fatalf("read after a cut without reconnection: %v", err)
	}
}

// A host that stops sending Keep Alive loses its controller when KATO
// passes (the target aborts every queue) and then reconnects to a new
// one; I/O goes on.
func TestKeepAliveExpiryReconnects(t *testing.T) {
	disk := nbd.NewMemDisk(1 << 20)
	_, addr := startServer(t, disk, 512, func(s *Server) { s.Fabric.KeepAliveSlack = -1 })
	h := dialTest(t, addr, &Config{IOQueues: 2, KeepAlive: time.Second, ReconnectDelay: 20 * time.Millisecond, LossTimeout: 10 * time.Second})
	first := h.cntlid
	close(h.kaStop) // the host goes quiet
	<-h.kaDone
	h.kaStop = nil
	data := bytes.Repeat([]byte{0xA5}, 4096)
	if _, err := h.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.recMu.Lock()
		moved := h.cntlid != first && !h.recovering
		h.recMu.Unlock()
		if moved {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the host did not reconnect to a new controller after KATO passed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	got := make([]byte, 4096)
	if _, err := h.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read after reconnection: %v", err)
	}
}

// An Asynchronous Event Request sent through Host.Admin completes when a
// namespace is added to the target, naming the Changed Namespace List.
// The host keeps a request of its own (its namespace watch); if the
// controller holds it first, the first change goes to it, the host reads
// and clears the list, and the next change completes the one sent
// through Admin.
func TestAsyncEventOverTCP(t *testing.T) {
	s, addr := startServer(t, nbd.NewMemDisk(1<<20), 512)
	h := dialTest(t, addr, &Config{IOQueues: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	changed := func(rae bool) []uint32 {
		t.Helper()
		page := make([]byte, nvme.IdentifySize)
		var cmd nvme.Command
		nvme.GetLogPage{LID: nvme.LogChangedNamespaces, Length: nvme.IdentifySize, RAE: rae}.Encode(&cmd)
		if cpl, err := h.Admin(ctx, &cmd, page); err != nil || cpl.Err() != nil {
			t.Fatal(err, cpl.Err())
		}
		return nvme.ParseChangedNamespaces((*[nvme.IdentifySize]byte)(page), nil)
	}
	done := make(chan nvme.Completion, 1)
	go func() {
		cpl, err := h.Admin(ctx, &nvme.Command{Opcode: nvme.OpAsyncEventRequest}, nil)
		if err != nil {
			cpl.Status = nvme.StatusInternalError
		}
		done <- cpl
	}()
	time.Sleep(100 * time.Millisecond) // let the request be held
	add := func() uint32 {
		t.Helper()
		nsid, err := s.Fabric.AddNamespace(testNQN, nvme.Namespace{Backend: nbd.NewMemDisk(1 << 20)})
		if err != nil {
			t.Fatal(err)
		}
		return nsid
	}
	nsid := add()
	for waiting := true; waiting; {
		select {
		case cpl := <-done:
			ev := nvme.AsyncEventOf(cpl.Result)
			if cpl.Status != nvme.StatusSuccess || ev.Type != nvme.AsyncEventNotice || ev.LID != nvme.LogChangedNamespaces {
				t.Fatalf("AER completion %+v", cpl)
			}
			waiting = false
		case <-time.After(20 * time.Millisecond):
			if ctx.Err() != nil {
				t.Fatal("the AER did not complete")
			}
			if len(changed(true)) == 0 {
				// The host's request was held first: its watch took
				// the event and cleared the list. The next change is
				// the Admin request's.
				nsid = add()
			}
		}
	}
	if ids := changed(false); len(ids) != 1 || ids[0] != nsid {
		t.Fatalf("changed namespaces %v, want [%d]", ids, nsid)
	}
}

// Close during a reconnection stops it at once; the commands waiting
// fail with ErrClosed.
func TestHostCloseWhileReconnecting(t *testing.T) {
	_, addr := startServer(t, nbd.NewMemDisk(1<<20), 512)
	p := newCutProxy(t, addr)
	h := dialTest(t, p.addr(), &Config{IOQueues: 1, ReconnectDelay: time.Hour})
	p.setRefuse(true)
	p.cut()
	errc := make(chan error, 1)
	go func() {
		_, err := h.ReadAt(make([]byte, 512), 0)
		errc <- err
	}()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-errc:
		t.Fatalf("read ended while reconnecting: %v", err)
	default:
	}
	start := time.Now()
	h.Close()
	if d := time.Since(start); d > 6*time.Second {
		t.Fatalf("Close took %v", d)
	}
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("read waiting at Close: %v", err)
	}
}
