package spin

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nhdkit/nhd/internal/testenv"
)

func TestPublishStores(t *testing.T) {
	var a atomic.Uint64
	for _, v := range []uint64{1, 0, 1 << 40, ^uint64(0), 7} {
		Publish(&a, v)
		if got := a.Load(); got != v {
			t.Fatalf("Publish(%d): Load = %d", v, got)
		}
	}
}

// pinger is one side of TestPublishPingPong: it advances its counter with
// Publish, and the other side waits on its gate.
type pinger struct {
	n    atomic.Uint64
	gate Gate // parks the other side until n reaches what it needs
}

func (p *pinger) post(v uint64) {
	Publish(&p.n, v)
	p.gate.Wake(v)
}

// await waits for n to reach v: spins re-checks, then parks until it does.
func (p *pinger) await(v uint64, spins int) {
	ready := func() bool { return p.n.Load() >= v }
	for i := 0; i < spins; i++ {
		if ready() {
			return
		}
	}
	for !ready() {
		p.gate.Park(v, ready, nil)
	}
}

// Two goroutines hand a count back and forth through published counters
// and publish gates, each re-checking a random number of times before it
// parks: the hand-off must live through many parks and wake-ups, or the
// watchdog reports where it stopped. (A wake-up lost to a missing fence
// shows in TestPublishGateLitmus; here each side is parked long before the
// other publishes.)
func TestPublishPingPong(t *testing.T) {
	rounds := uint64(20000)
	if testing.Short() {
		rounds = 2000
	}
	ping := &pinger{gate: NewPublishGate()}
	pong := &pinger{gate: NewPublishGate()}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(1, 2))
		for i := uint64(1); i <= rounds; i++ {
			ping.await(i, r.IntN(200))
			pong.post(i)
		}
	}()
	done := make(chan struct{})
	go func() {
		r := rand.New(rand.NewPCG(3, 4))
		for i := uint64(1); i <= rounds; i++ {
			ping.post(i)
			pong.await(i, r.IntN(200))
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("stuck: ping at %d, pong at %d of %d rounds (asymmetric %v)", ping.n.Load(), pong.n.Load(), rounds, Asymmetric())
	}
	wg.Wait()
}

// The store-buffering litmus test on a publish gate, many times: one
// goroutine publishes a counter and wakes the gate while another parks on
// it, both starting at once. The parked side must always come back: by
// the re-check after its announcement, by the Wake's token, or (the rounds
// where both missed the other, which x86 allows and which happen here) by
// the fence after FenceAfter. A round that never returns is a lost
// wake-up, which the watchdog reports. Both sides spin without yielding,
// so the test needs two processors running at once.
func TestPublishGateLitmus(t *testing.T) {
	if p := runtime.GOMAXPROCS(0); p < 2 {
		testenv.Unavailable(t, "the litmus test needs two processors running at once; GOMAXPROCS is %d", p)
	}
	rounds := 300000
	if testing.Short() || !Asymmetric() {
		// Without the release store (another platform, -race) the
		// case cannot happen: fewer rounds check the gate alone.
		rounds = 30000
	}
	var n, start, finished atomic.Uint64
	var over atomic.Bool // the test has ended: the publisher stops
	defer over.Store(true)
	g := NewPublishGate()
	ready := func() bool { return n.Load() >= 1 }
	go func() {
		for i := uint64(1); i <= uint64(rounds); i++ {
			for start.Load() != i {
				if over.Load() {
					return
				}
				g.want.Load() // a copy of the gate's line here, as after a Wake
			}
			Publish(&n, 1)
			g.Wake(1)
			finished.Add(1)
		}
	}()
	watchdog := make(chan struct{})
	timer := time.AfterFunc(60*time.Second, func() { close(watchdog) })
	defer timer.Stop()
	r := rand.New(rand.NewPCG(5, 6))
	var sink atomic.Uint64
	for i := uint64(1); i <= uint64(rounds); i++ {
		start.Store(i)
		// The other side sees start a cross-core trip later: wait about
		// as long, a different time each round, so that the two steps
		// often overlap.
		for range r.IntN(400) {
			sink.Load()
		}
		if !g.Park(1, ready, watchdog) {
			t.Fatalf("round %d of %d: the wake-up was lost (asymmetric %v)", i, rounds, Asymmetric())
		}
		for finished.Load() != i {
		}
		g.Reset()
		n.Store(0)
	}
}
