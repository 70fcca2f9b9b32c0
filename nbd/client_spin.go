package nbd

import (
	"syscall"
	"time"
)

// Spinning for the reply at depth one.
//
// With one request in flight, the caller leading on the connection parks
// on the network poller while the socket is empty, and its reply then
// costs a wake-up on the way back: the poller's thread, a processor, the
// goroutine. A server in another process on the same machine often
// answers in less time than that takes. So a leader alone on its
// connection first reads the empty socket again and again, for up to the
// spin window (WithReplySpin), and parks only if nothing came.
//
// Spinning can also delay the very reply it waits for: a server in this
// process is woken by the network poller, which this thread does not run
// while it spins; a machine with fewer free cores than busy threads runs
// the server later; and on some machines a spinning client delays a
// server in another process by more than the wake-up it saves (on a
// virtual machine against nbdkit: BenchmarkClientReplySpin). Which way
// is faster depends on the machine, on where its host placed the two
// threads, and on the server; so the leader measures both.
//
// Each wait for a reply at depth one is timed from the first read that
// finds the socket empty to the reply, and counted in the mean of its way
// (spun or parked). Waits take the way of the lower mean, and the last
// clientSpinBlock waits of every clientSpinPeriod take the other, so that
// both means follow the machine. Whether a way pays shows only when it is
// kept for a while (taken wait by wait, spun waits can be the shorter
// while the connection runs no faster than parked), so the ways alternate
// in blocks, and only waits after the first clientSpinWarm of a block
// count. The waits are heavy-tailed and often bimodal, so a mean needs
// many of them: each way keeps the sum and count of its waits, both halved
// whenever the two ways together reach clientSpinHorizon waits, and a wait
// above clientSpinCap times the higher mean counts as that.
//
// A spin that runs out also makes the next read at depth one park at
// once, and while spins keep running out the reads that park at once
// double, up to clientSpinMaxBackoff; a spin that finds its reply starts
// over. Where spinning does not pay, it costs about clientSpinBlock waits
// in clientSpinPeriod.
//
// The state is the leader's: the reader role (clientConn.rtok) passes it
// from one leader to the next.
type clientSpin struct {
	window  time.Duration // 0: never spin
	skip    int           // reads at depth one that park at once before the next that may spin
	backoff int           // what skip becomes when the next spin runs out

	ways     [2]clientSpinWay // the waits for replies at depth one, by wayParked and waySpun
	turn     int              // waits not held back by the backoff, in the current period
	same     int              // waits in a row that took the way of the last
	spinning bool             // the way of the wait in progress
}

// The indices of clientSpin.ways.
const (
	wayParked = 0
	waySpun   = 1
)

// clientSpinWay is the decaying mean of one way's waits.
type clientSpinWay struct {
	sum time.Duration
	n   int
}

func (w *clientSpinWay) mean() time.Duration {
	if w.n == 0 {
		return 0
	}
	return w.sum / time.Duration(w.n)
}

// add counts a wait, at most limit (0: no limit).
func (w *clientSpinWay) add(d, limit time.Duration) {
	if limit > 0 {
		d = min(d, limit)
	}
	w.sum += d
	w.n++
}

// halve keeps half the weight of the waits so far, and their mean.
func (w *clientSpinWay) halve() {
	if w.n > 1 {
		m := (w.n + 1) / 2
		w.sum = w.sum * time.Duration(m) / time.Duration(w.n)
		w.n = m
	}
}

// clientSpinMaxBackoff bounds the reads that do not spin between two spins
// that run out.
const clientSpinMaxBackoff = 1024

const (
	// clientSpinPeriod and clientSpinBlock: of every clientSpinPeriod
	// waits, the last clientSpinBlock take the way whose mean is the
	// higher, to keep that mean current. That costs the difference
	// between the ways on about clientSpinBlock/clientSpinPeriod of the
	// waits.
	clientSpinPeriod = 1024
	clientSpinBlock  = 64
	// clientSpinWarm is how many waits of a way in a row come before its
	// waits count, so that a way is judged as it runs when kept, not in
	// the change from the other.
	clientSpinWarm = 16
	// clientSpinSettled is how many counted waits a way needs before its
	// mean is compared (until then the way is taken, spinning first).
	clientSpinSettled = 8
	// clientSpinHorizon is how many counted waits of both ways the means
	// weigh before they are halved.
	clientSpinHorizon = 2048
	// clientSpinCap bounds a wait, as a multiple of the higher of the
	// two means once both are settled, so that one stall of the machine
	// does not decide the way (and a real change of the machine, which
	// moves one way's waits far from its mean, still moves the mean).
	clientSpinCap = 4
)

// DefaultClientReplySpin is the spin window of WithReplySpin's default.
const DefaultClientReplySpin = 50 * time.Microsecond

// MaxClientReplySpin bounds WithReplySpin's window: a reply that takes
// longer is better waited for parked, and a context that ends while the
// reader spins is seen only when the spin ends.
const MaxClientReplySpin = time.Millisecond

// next returns how long the next read at depth one may spin (0: it parks
// at once).
func (s *clientSpin) next() time.Duration {
	if s.window <= 0 {
		return 0
	}
	spin := false
	if s.skip > 0 {
		s.skip--
	} else {
		spin = s.preferSpin()
		if s.turn++; s.turn > clientSpinPeriod-clientSpinBlock {
			spin = !spin
			if s.turn == clientSpinPeriod {
				s.turn = 0
			}
		}
	}
	if spin == s.spinning {
		s.same++
	} else {
		s.same = 0
	}
	s.spinning = spin
	if !spin {
		return 0
	}
	return s.window
}

// preferSpin reports whether spinning is the way of the lower mean; a way
// with fewer than clientSpinSettled waits is preferred, spinning first.
func (s *clientSpin) preferSpin() bool {
	parked, spun := &s.ways[wayParked], &s.ways[waySpun]
	switch {
	case spun.n < clientSpinSettled:
		return true
	case parked.n < clientSpinSettled:
		return false
	}
	return spun.mean() <= parked.mean()
}

// done records how a read at depth one ended: how its spin ended (spun),
// and how long it waited from finding the socket empty to its reply
// (waited; 0 when the reply was there at once, or the read failed).
func (s *clientSpin) done(spun int, waited time.Duration) {
	switch spun {
	case spinFound:
		s.backoff = 0
	case spinRanOut:
		s.backoff = min(max(2*s.backoff, 1), clientSpinMaxBackoff)
		s.skip = s.backoff
	}
	if waited <= 0 || s.same < clientSpinWarm {
		return
	}
	park, spin := &s.ways[wayParked], &s.ways[waySpun]
	way := park
	if s.spinning {
		way = spin
	}
	var limit time.Duration
	if park.n >= clientSpinSettled && spin.n >= clientSpinSettled {
		limit = clientSpinCap * max(park.mean(), spin.mean())
	}
	way.add(waited, limit)
	if park.n+spin.n >= clientSpinHorizon {
		park.halve()
		spin.halve()
	}
}

// replyWait reports whether the leader's next read waits for a reply at
// depth one (at a message boundary, with no request in flight but its
// own), and if so how long it may spin on the empty socket.
func (c *clientConn) replyWait() (timed bool, window time.Duration) {
	if c.spin.window <= 0 || c.body.active || cap(c.free)-len(c.free) != 1 {
		return false, 0
	}
	return true, c.spin.next()
}

// How a raw read's spin ended (clientRawSock.spun).
const (
	spinNone   = iota // it did not spin
	spinFound         // bytes came (or an error) while it spun
	spinRanOut        // it ran out and parked
)

// spinRead reads the empty socket again until bytes come or r.spin has
// passed since r.empty, reading the clock every few reads.
func (r *clientRawSock) spinRead(fd uintptr) (int, error) {
	end := r.empty.Add(r.spin)
	r.spin = 0
	for i := 1; ; i++ {
		n, err := sockRawRead(fd, r.p)
		if err != syscall.EAGAIN && err != syscall.EINTR {
			r.spun = spinFound
			return n, err
		}
		if i%8 == 0 && time.Now().After(end) {
			r.spun = spinRanOut
			return 0, syscall.EAGAIN
		}
	}
}
