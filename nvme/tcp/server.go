package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nhdkit/nhd/nvme"
)

// Defaults of a Server's limits, used where its fields are zero.
const (
	// DefaultMaxConns bounds the connections (queues) served at once.
	DefaultMaxConns = 1024
	// DefaultHandshakeTimeout bounds ICReq and Connect of a connection.
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultReplyTimeout is how long the target waits for a host to
	// take each piece of what it writes (Server.ReplyTimeout) before it
	// closes the connection.
	DefaultReplyTimeout = 30 * time.Second
	// adminInCapsule is the in-capsule data the admin queue accepts
	// (Fabrics commands, Connect's 1024 bytes).
	adminInCapsule = 8192
	// keepAliveGrace is added to twice KATO before an admin queue that
	// has been silent is dropped.
	keepAliveGrace = 5 * time.Second
)

// Server is an NVMe/TCP target (NVMe/TCP 1.0): it serves the subsystems of
// a nvme.Fabric, and its discovery subsystem, to any number of hosts.
// Set its fields, then call Serve with a listener (or ServeConn with a
// connection); the fields must not change afterwards. A Server is safe
// for concurrent use.
//
// Each connection is one queue, served by one goroutine that reads PDUs
// and a worker: at most a goroutine pair per queue, unless QueueWorkers
// says more. The reader runs the commands while the backend is quick. On
// a backend that keeps requests in flight (nvme.AsyncReaderAt and
// AsyncWriterAt: an *nbd.Client, for an NVMe-to-NBD bridge) it starts
// every Read and Write, and the worker waits for them in turn and sends
// their completions, gathering those of a burst into one writev: the
// queue's whole depth is in flight on two goroutines. On any other
// backend, once an I/O queue's commands take longer, the reader hands
// them to the worker (or to QueueWorkers of them, running at once);
// completions go out in the order commands finish.
// Whoever completes a command while no one is writing writes every
// completion ready (C2HData, its data and the CapsuleResp) in one writev;
// the reader holds them back while the host's next PDU is already
// buffered, so a burst's completions leave together. A read from an
// nbd.Lender is sent from the backend's memory, the pages of a write of
// whole, aligned pages to an nbd.PageTaker are handed over, and large
// write data is read from the socket straight into the buffer (or the
// pages) the backend gets. Each queue has one slot per entry (the
// Connect's SQSIZE + 1, at most the Fabric's QueueDepth), whose data
// buffer grows to the largest transfer seen, at most the Fabric's
// MaxTransfer, and which keeps as many pages as its largest write of
// pages: memory per busy queue is bounded by 2 x QueueDepth x
// MaxTransfer, and in steady state a command allocates nothing (a page
// the backend gives none back for, on the first write of its range, is
// made anew). A queue that has taken no command for a second lets its
// free slots' buffers and pages go, so an idle queue holds its 64 KiB
// read buffer and about 400 bytes per entry, however large its last
// burst; its next commands make their buffers anew. Writes larger than
// the in-capsule size are fetched with one R2T each.
// Malformed PDUs end the connection with a C2HTermReq. An admin queue whose controller has a keep
// alive timeout is dropped after twice that time (plus a few seconds)
// without a PDU from the host; ICReq and Connect must arrive within
// HandshakeTimeout; a host that leaves what the target writes untaken
// for ReplyTimeout loses the connection, and with it what its queue held.
type Server struct {
	// Fabric holds the subsystems served. If its Discovery is nil, the
	// Server sets it to list every subsystem at every listener's address.
	Fabric *nvme.Fabric
	// MaxConns bounds the connections served at once; 0 means
	// DefaultMaxConns. A connection past it is closed at once (ServeConn
	// returns ErrServerFull, and the Logger warns).
	MaxConns int
	// HandshakeTimeout bounds ICReq and Connect; 0 means
	// DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// QueueWorkers bounds the goroutines that run an I/O queue's
	// commands, once they are slow, beside the goroutine that reads the
	// queue; the commands past it wait for one of them. 0 and 1 keep each
	// queue to a goroutine pair: a backend that keeps requests in flight
	// (nvme.AsyncReaderAt) still has the queue's whole depth in flight,
	// any other slow backend runs one command at a time per queue (the
	// host's queues, one per core on Linux, run at once). More lets a
	// slow synchronous backend (a file on a disk, with no page cache in
	// front) serve that many of a queue's commands at once.
	QueueWorkers int
	// ReplyTimeout bounds how long the target waits for a host to take
	// what it writes on a connection (completions, C2HData and its data,
	// R2Ts): each piece of up to 1 MiB being written (a whole batch of
	// smaller ones) must be taken within ReplyTimeout (or up to a quarter
	// more: the deadline is renewed lazily), or the connection is closed,
	// its commands in flight dropped unanswered and its slots' buffers
	// given back. A host that stops reading (or a peer that is gone
	// without a word) thus holds its queue's buffers and goroutines for
	// at most ReplyTimeout; a slow host is served as long as it takes 1
	// MiB per ReplyTimeout. The connection ends with an error matching
	// ErrReplyTimeout (ServeConn's result, and the Logger's warning). 0
	// means DefaultReplyTimeout (30 s); negative means never, and a host
	// that never reads then holds the queue until it disconnects or the
	// Server is closed.
	ReplyTimeout time.Duration
	// Logger receives connection events at Debug level and failures at
	// Warn; nil discards them.
	Logger *slog.Logger

	testSlotWait   time.Duration // tests shorten defaultSlotWait
	testBufferIdle time.Duration // tests shorten slotBufferIdle

	initOnce  sync.Once
	initErr   error
	ctx       context.Context
	cancel    context.CancelFunc
	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]*conn
	closed    bool
	wg        sync.WaitGroup
}

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("nvme/tcp: server closed")

// ErrServerFull is returned by ServeConn for a connection it refused
// because MaxConns connections were being served.
var ErrServerFull = errors.New("nvme/tcp: server full (Server.MaxConns connections)")

func (s *Server) init() error {
	s.initOnce.Do(func() {
		if s.Fabric == nil {
			s.initErr = errors.New("nvme/tcp: Server without a Fabric")
			return
		}
		if s.MaxConns < 0 {
			s.initErr = fmt.Errorf("nvme/tcp: Server.MaxConns %d is negative", s.MaxConns)
			return
		}
		if s.Fabric.Discovery == nil {
			s.Fabric.Discovery = s.discovery
		}
		if err := s.Fabric.Check(); err != nil {
			s.initErr = err
			return
		}
		s.ctx, s.cancel = context.WithCancel(context.Background())
		s.listeners = make(map[net.Listener]struct{})
		s.conns = make(map[net.Conn]*conn)
	})
	return s.initErr
}

func (s *Server) logger() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

// discovery lists every subsystem at the address of every TCP listener,
// the listeners in address order numbered as ports from 1. A listener on
// an unspecified address (0.0.0.0, ::) is named by the address the host
// reached it at, local, when the ports match: hosts cannot connect to
// 0.0.0.0.
func (s *Server) discovery(local net.Addr) []nvme.DiscoveryLogEntry {
	reached, _ := local.(*net.TCPAddr)
	s.mu.Lock()
	var addrs []*net.TCPAddr
	for l := range s.listeners {
		if a, ok := l.Addr().(*net.TCPAddr); ok {
			addrs = append(addrs, a)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(addrs, func(a, b *net.TCPAddr) int { return strings.Compare(a.String(), b.String()) })
	var es []nvme.DiscoveryLogEntry
	for i, addr := range addrs {
		if addr.IP.IsUnspecified() && reached != nil && reached.Port == addr.Port {
			addr = reached
		}
		e := nvme.DiscoveryLogEntry{TrType: nvme.TransportTCP, AdrFam: nvme.AddressIPv4, Subtype: nvme.SubtypeNVM,
			PortID: uint16(i + 1), ControllerID: nvme.DynamicControllerID, ASQSZ: 32, TrSvcID: strconv.Itoa(addr.Port),
			TrAddr: addr.IP.String(), TReq: nvme.TREQSQFlowDisable}
		if addr.IP.To4() == nil {
			e.AdrFam = nvme.AddressIPv6
		}
		for _, sub := range s.Fabric.Subsystems {
			e.SubNQN = sub.NQN
			es = append(es, e)
		}
	}
	return es
}

// Serve accepts connections on l and serves each on its own goroutines
// until Close; it returns ErrServerClosed then, or the accept error.
func (s *Server) Serve(l net.Listener) error {
	if err := s.init(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()
	for {
		nc, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		go s.ServeConn(nc)
	}
}

// ServeConn serves one connection (one queue) until it ends, and closes
// it. It returns why the connection ended (nil for an orderly close by
// the host), or, for a connection it did not serve, ErrServerClosed after
// Close and ErrServerFull while MaxConns connections are served.
func (s *Server) ServeConn(nc net.Conn) error {
	if err := s.init(); err != nil {
		nc.Close()
		return err
	}
	max := s.MaxConns
	if max == 0 {
		max = DefaultMaxConns
	}
	s.mu.Lock()
	if s.closed || len(s.conns) >= max {
		closed := s.closed
		s.mu.Unlock()
		nc.Close()
		if closed {
			return ErrServerClosed
		}
		s.logger().Warn("nvme/tcp: connection refused", "remote", nc.RemoteAddr(), "err", ErrServerFull)
		return ErrServerFull
	}
	c := &conn{s: s, nc: nc, q: s.Fabric.NewQueue(), maxTransfer: s.Fabric.MaxTransfer()}
	s.conns[nc] = c
	s.wg.Add(1)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, nc)
		s.mu.Unlock()
		s.wg.Done()
	}()
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	c.q.Local = nc.LocalAddr()
	c.ev.c = c
	c.q.Transport = &c.ev
	err := c.serve()
	log := s.logger()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		log.Warn("nvme/tcp: connection ended", "remote", nc.RemoteAddr(), "err", err)
	} else {
		log.Debug("nvme/tcp: connection closed", "remote", nc.RemoteAddr())
	}
	if err != nil && (errors.Is(err, net.ErrClosed) || errors.Is(err, errHostClosed)) {
		err = nil
	}
	return err
}

// Close closes every listener and connection and waits for the
// connections' goroutines to end.
func (s *Server) Close() error {
	if err := s.init(); err != nil {
		return err
	}
	s.mu.Lock()
	s.closed = true
	for l := range s.listeners {
		l.Close()
	}
	for nc := range s.conns {
		nc.Close()
	}
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	return nil
}

// defaultSlotWait bounds how long a command waits for a free slot: only
// a host that ignores SQ flow control waits at all.
const defaultSlotWait = 5 * time.Second

func (s *Server) slotWait() time.Duration {
	if s.testSlotWait > 0 {
		return s.testSlotWait
	}
	return defaultSlotWait
}

var errHostClosed = errors.New("nvme/tcp: host closed the connection")

// replyTimeout returns ReplyTimeout or its default; 0 means never.
func (s *Server) replyTimeout() time.Duration {
	switch {
	case s.ReplyTimeout > 0:
		return s.ReplyTimeout
	case s.ReplyTimeout < 0:
		return 0
	}
	return DefaultReplyTimeout
}

func (s *Server) handshakeTimeout() time.Duration {
	if s.HandshakeTimeout > 0 {
		return s.HandshakeTimeout
	}
	return DefaultHandshakeTimeout
}

// icResp answers the host's ICReq: digests as asked, CPDA 0, MAXH2CDATA
// the fabric's largest transfer.
func (c *conn) icResp() error {
	in := (*[ICSize]byte)(c.r.hdr[:ICSize])
	if _, err := io.ReadFull(c.r.br, in[:]); err != nil {
		return err
	}
	c.r.got = ICSize
	c.r.h.Parse((*[CommonSize]byte)(in[:CommonSize]))
	var req ICReq
	if err := req.Parse(in); err != nil {
		return err
	}
	switch {
	case req.PFV != 0:
		return fatal(FESUnsupportedParam, 8, "PFV "+strconv.Itoa(int(req.PFV)))
	case req.HPDA != 0:
		return fatal(FESUnsupportedParam, 10, "HPDA "+strconv.Itoa(int(req.HPDA)))
	case req.Digest&^3 != 0:
		return fatal(FESUnsupportedParam, 11, fmt.Sprintf("DGST %#x", req.Digest))
	}
	c.r.hdgst, c.r.ddgst = req.Digest&DigestHeader != 0, req.Digest&DigestData != 0
	c.f = c.r.framing
	var b [ICSize]byte
	resp := ICResp{Digest: req.Digest, MaxH2CData: uint32(c.maxTransfer)}
	resp.Put(&b)
	_, err := c.nc.Write(b[:])
	return err
}
