package nbd

import (
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"
)

// Admission: handshakes and sessions are counted apart, so neither silent
// sockets nor idle sessions lock other clients out. A connection in its
// handshake holds one of MaxHandshakes places, for at most
// HandshakeTimeout; when all are taken, a new connection pushes out the
// one that has been haggling longest (a client that completes its
// handshake promptly is never the oldest for long). A session holds one
// of MaxConns places until it ends (IdleTimeout ends idle ones). When
// all are taken, a connection that finishes its handshake takes the place
// of the session idle longest (no request in flight for EvictIdleAfter or
// more), which is closed; a connection accepted while all are taken and
// none is idle that long is refused with a reason (NBD_REP_ERR_SHUTDOWN
// and a message, in answer to its first option). Refusals, evictions and
// failures are logged at most once a second, with a count.

// DefaultMaxHandshakes is the default of Server.MaxHandshakes.
const DefaultMaxHandshakes = 128

// DefaultEvictIdleAfter is the default of Server.EvictIdleAfter.
const DefaultEvictIdleAfter = time.Second

// serverConnKind is what a connection counts as in Server.conns.
type serverConnKind uint8

const (
	serverKindHandshake serverConnKind = iota // holds a MaxHandshakes place
	serverKindSession                         // holds a MaxConns place
	serverKindEvicted                         // a session closing, its place given up
	serverKindPushedOut                       // a handshake told to end, its place given up
)

// ErrServerFull is returned by ServeConn for a connection refused because
// MaxConns sessions are being served.
var ErrServerFull = errors.New("nbd: server full")

// serverRefuseTimeout bounds the exchange that tells a refused client why.
const serverRefuseTimeout = 2 * time.Second

// serverMaxRefusing bounds the refused connections told why at once;
// past it, they are closed without a word.
const serverMaxRefusing = 16

// serverLogEvery is the most often a rate-limited log line is written.
const serverLogEvery = time.Second

func (s *Server) maxHandshakes() int {
	if s.MaxHandshakes > 0 {
		return s.MaxHandshakes
	}
	return DefaultMaxHandshakes
}

// admit counts c as a handshake, pushing out the oldest one if all places
// are taken, or returns why c is refused.
func (s *Server) admit(c *serverConn) (refused string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inShutdown.Load() {
		return "server shutting down"
	}
	if s.sessions >= s.maxConns() && s.idlest(time.Now()) == nil {
		return "server full: " + strconv.Itoa(s.sessions) + " sessions"
	}
	for len(s.handshaking) >= s.maxHandshakes() {
		old := s.handshaking[0]
		s.handshaking = s.handshaking[1:]
		s.conns[old] = serverKindPushedOut
		if old.pushOut() {
			s.evictions.note(s.logger(), "nbd: handshakes pushed out by newer connections", "max_handshakes", s.maxHandshakes())
		}
	}
	s.conns[c] = serverKindHandshake
	s.handshaking = append(s.handshaking, c)
	return ""
}

// serverPushedOutReason is what a handshake pushed out is told.
const serverPushedOutReason = "pushed out by newer connections: too many handshakes at once"

// pushOut ends c's handshake if it is still haggling (one that has just
// finished is left to start its session): c no longer holds a
// MaxHandshakes place, and is given serverShutdownOptionGrace to read
// NBD_REP_ERR_SHUTDOWN in answer to the option it is sending or its next
// one, then dropped; when serverMaxRefusing connections are being told
// already, it is closed at once. Call with c.srv.mu held.
func (c *serverConn) pushOut() bool {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	if c.state != serverStateHandshake {
		return false
	}
	select {
	case c.srv.refusing <- struct{}{}:
		c.goodbye = true
	default:
		c.netc.Close()
		return true
	}
	c.pushedOut.Store(true)
	if at := time.Now().Add(serverShutdownOptionGrace); c.stopAt.IsZero() || at.Before(c.stopAt) {
		c.stopAt = at
	}
	if !c.hsDeadline.IsZero() {
		c.netc.SetDeadline(c.handshakeDeadline())
	}
	return true
}

// startSession moves c from the handshakes to the sessions, closing the
// session idle longest if all places are taken and one has been idle for
// EvictIdleAfter.
func (s *Server) startSession(c *serverConn) {
	c.lastActive.Store(time.Now().UnixNano())
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.conns[c]; !ok {
		return
	}
	if s.sessions >= s.maxConns() {
		if old := s.idlest(time.Now()); old != nil {
			s.conns[old] = serverKindEvicted
			s.sessions--
			old.evict()
			s.sessionEvictions.note(s.logger(), "nbd: idle sessions closed for newer connections", "max_conns", s.maxConns())
		}
	}
	s.dropHandshake(c)
	s.conns[c] = serverKindSession
	s.sessions++
}

func (s *Server) evictIdleAfter() time.Duration {
	if s.EvictIdleAfter != 0 {
		return s.EvictIdleAfter
	}
	return DefaultEvictIdleAfter
}

// idlest returns the session that has had no request in flight for
// longest, if for EvictIdleAfter or more, or nil. Call with s.mu held.
func (s *Server) idlest(now time.Time) *serverConn {
	after := s.evictIdleAfter()
	if after < 0 {
		return nil
	}
	var best *serverConn
	oldest := now.Add(-after).UnixNano()
	for c, kind := range s.conns {
		if kind != serverKindSession || c.active.Load() != 0 {
			continue
		}
		if t := c.lastActive.Load(); t <= oldest {
			best, oldest = c, t
		}
	}
	return best
}

// evict stops c's session: its reader stops reading requests (a read
// deadline in the past), then c closes as when Shutdown stops it.
func (c *serverConn) evict() {
	c.evicted.Store(true)
	c.cmu.Lock()
	defer c.cmu.Unlock()
	if c.state == serverStateTransmission {
		c.netc.SetReadDeadline(time.Now())
	}
}

// dropHandshake forgets c as a handshake. Call with s.mu held.
func (s *Server) dropHandshake(c *serverConn) {
	for i, h := range s.handshaking {
		if h == c {
			s.handshaking = append(s.handshaking[:i], s.handshaking[i+1:]...)
			return
		}
	}
}

func (s *Server) untrackConn(c *serverConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	kind, ok := s.conns[c]
	if !ok {
		return
	}
	switch kind {
	case serverKindSession:
		s.sessions--
	case serverKindHandshake:
		s.dropHandshake(c)
	}
	delete(s.conns, c)
	if len(s.conns) == 0 {
		s.budget.connsEnded()
	}
}

// refuse tells nc why it is refused, on a goroutine of its own, or, when
// serverMaxRefusing are being told already, closes it.
func (s *Server) refuse(nc net.Conn, reason string) {
	s.refusals.note(s.logger(), "nbd: connections refused", "reason", reason)
	select {
	case s.refusing <- struct{}{}:
		go func() {
			defer func() { <-s.refusing }()
			serverRefuse(nc, reason)
		}()
	default:
		nc.Close()
	}
}

// serverRefuse runs the start of a fixed newstyle handshake on nc and
// answers each option with NBD_REP_ERR_SHUTDOWN and reason (proto.md: the
// server is unwilling to continue; the client should disconnect), an
// NBD_OPT_ABORT with an ACK, then closes nc. NBD_OPT_EXPORT_NAME cannot
// be answered with an error: nc is closed at once.
func serverRefuse(nc net.Conn, reason string) {
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(serverRefuseTimeout))
	var hello [18]byte
	binary.BigEndian.PutUint64(hello[0:], MagicNBD)
	binary.BigEndian.PutUint64(hello[8:], MagicIHaveOpt)
	binary.BigEndian.PutUint16(hello[16:], uint16(HandshakeFixedNewstyle|HandshakeNoZeroes))
	if _, err := nc.Write(hello[:]); err != nil {
		return
	}
	var cf [4]byte
	if _, err := io.ReadFull(nc, cf[:]); err != nil || !ClientFlags(binary.BigEndian.Uint32(cf[:])).Has(ClientFixedNewstyle) {
		return
	}
	for range 4 {
		var hb [OptionHeaderSize]byte
		var h OptionHeader
		if _, err := io.ReadFull(nc, hb[:]); err != nil || h.Parse(&hb) != nil {
			return
		}
		if h.Length > serverMaxOptionData || h.Option == OptExportName {
			return
		}
		if _, err := io.CopyN(io.Discard, nc, int64(h.Length)); err != nil {
			return
		}
		t, msg := RepErrShutdown, reason
		if h.Option == OptAbort {
			t, msg = RepAck, ""
		}
		r := OptionReply{Option: h.Option, Type: t, Length: uint32(len(msg))}
		var rb [OptionReplySize]byte
		r.Put(&rb)
		if _, err := nc.Write(append(rb[:], msg...)); err != nil || h.Option == OptAbort {
			return
		}
	}
}

// serverLogLimit writes a log line at most once per serverLogEvery, with
// the count of events since the last line.
type serverLogLimit struct {
	mu   sync.Mutex
	last time.Time
	n    int
}

func (l *serverLogLimit) note(log *slog.Logger, msg string, args ...any) {
	l.mu.Lock()
	l.n++
	now := time.Now()
	if now.Sub(l.last) < serverLogEvery {
		l.mu.Unlock()
		return
	}
	n := l.n
	l.n, l.last = 0, now
	l.mu.Unlock()
	log.Warn(msg, append(args, "count", n)...)
}

// logConnFailed logs a connection that failed, at most once a second
// with a count: a flood of hostile connections does not flood the log.
func (s *Server) logConnFailed(log *slog.Logger, err error) {
	s.failures.note(log, "nbd: connection failed", "err", err)
}
