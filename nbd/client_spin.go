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
// while it spins, and a machine with fewer free cores than busy threads
// runs the server later. So the spin adapts: after a spin that runs out
// the next read at depth one does not spin, and while spins keep running
// out the reads that do not spin double, up to clientSpinMaxBackoff; a
// spin that finds its reply starts over. Where spinning does not pay, it
// costs one window in clientSpinMaxBackoff reads.
//
// The state is the leader's: the reader role (clientConn.rtok) passes it
// from one leader to the next.
type clientSpin struct {
	window  time.Duration // 0: never spin
	skip    int           // reads at depth one that do not spin before the next that may
	backoff int           // what skip becomes when the next spin runs out
}

// clientSpinMaxBackoff bounds the reads that do not spin between two spins
// that run out.
const clientSpinMaxBackoff = 1024

// DefaultClientReplySpin is the spin window of WithReplySpin's default.
const DefaultClientReplySpin = 50 * time.Microsecond

// MaxClientReplySpin bounds WithReplySpin's window: a reply that takes
// longer is better waited for parked, and a context that ends while the
// reader spins is seen only when the spin ends.
const MaxClientReplySpin = time.Millisecond

// next returns how long the next read at depth one may spin (0: not at
// all).
func (s *clientSpin) next() time.Duration {
	if s.window <= 0 {
		return 0
	}
	if s.skip > 0 {
		s.skip--
		return 0
	}
	return s.window
}

// done records how a spin ended: with bytes to read, or run out.
func (s *clientSpin) done(found bool) {
	if found {
		s.backoff = 0
		return
	}
	s.backoff = min(max(2*s.backoff, 1), clientSpinMaxBackoff)
	s.skip = s.backoff
}

// spinWindow is how long the leader's next read of an empty socket may
// spin: only at a message boundary, with no request in flight but its own.
func (c *clientConn) spinWindow() time.Duration {
	if c.spin.window <= 0 || c.body.active || cap(c.free)-len(c.free) != 1 {
		return 0
	}
	return c.spin.next()
}

// How a raw read's spin ended (clientRawSock.spun).
const (
	spinNone   = iota // it did not spin
	spinFound         // bytes came (or an error) while it spun
	spinRanOut        // it ran out and parked
)

// spinRead reads the empty socket again until bytes come or r.spin has
// passed, reading the clock every few reads.
func (r *clientRawSock) spinRead(fd uintptr) (int, error) {
	end := time.Now().Add(r.spin)
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
