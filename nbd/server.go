package nbd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Defaults of the Server's limits. Each applies when the matching field of
// Server is zero.
const (
	// DefaultMaxInFlight is how many requests of one connection the server
	// works on at once (their payload buffers come from the BufferMemory
	// budget).
	DefaultMaxInFlight = 16
	// DefaultMaxConns is how many sessions (connections past their
	// handshake) the server serves at once.
	DefaultMaxConns = 256
	// DefaultHandshakeTimeout bounds the whole option haggling of a
	// connection, TLS included.
	DefaultHandshakeTimeout = 30 * time.Second
	// DefaultPreferredBlockSize is the preferred block size advertised
	// when an Export sets none.
	DefaultPreferredBlockSize = 4096
	// DefaultServerMaxPayload is the largest READ or WRITE payload the
	// server accepts, and advertises, when Server.MaxPayload is zero: 64
	// MiB, as nbdkit, above the 32 MiB every client may assume
	// (DefaultMaxPayload), so clients that send larger requests than the
	// spec's floor (nbd-tester-client, up to 47.5 MiB) are served.
	DefaultServerMaxPayload = 64 << 20
	// DefaultReplyTimeout is how long the server waits for a client to
	// take each piece of its replies (Server.ReplyTimeout) before it
	// closes the connection.
	DefaultReplyTimeout = 30 * time.Second
)

// Limits the server applies to option haggling, fixed by the protocol's
// own bounds rather than by configuration.
const (
	// serverMaxOptionData bounds the data of one option: a name of 4096
	// bytes plus info requests or meta context queries fits many times.
	serverMaxOptionData = 64 << 10
	// serverDiscardLimit is the most the server reads and throws away to
	// answer an oversized option or write with an error instead of hanging
	// up (proto.md: lengths below 2^25 are not a denial of service).
	serverDiscardLimit = 1 << 25
	// serverMaxOptions bounds the options of one handshake.
	serverMaxOptions = 4096
	// serverMaxExtents bounds the descriptors of one block status reply.
	serverMaxExtents = 4096
	// serverBlockStatusWindow bounds the range the server asks a backend
	// to describe for one block status request (proto.md lets a server
	// describe fewer bytes than asked).
	serverBlockStatusWindow = 1 << 30
	// serverMaxReadRuns bounds the chunks of one structured read reply;
	// the rest of the range goes as one data chunk.
	serverMaxReadRuns = 64
	// serverMetaContextID is the id of base:allocation on every connection.
	serverMetaContextID = 1
)

// ErrServerClosed is returned by Serve after Shutdown or Close, as soon as
// either starts: Shutdown may still be finishing requests and flushing.
var ErrServerClosed = errors.New("nbd: server closed")

// ErrReplyTimeout ends a session whose client did not take its replies
// within Server.ReplyTimeout: ServeConn returns an error matching it.
var ErrReplyTimeout = errors.New("nbd: client not reading its replies (Server.ReplyTimeout)")

// MultiConnBackend is a Backend that can be served over several
// connections at once: a Flush (and a FUA write) through any connection
// makes the writes of every connection durable, and a write through one
// connection is visible to reads through all others once it is answered.
// The server advertises NBD_FLAG_CAN_MULTI_CONN only for such a backend
// whose CanMultiConn returns true. MemDisk and FileDisk are.
type MultiConnBackend interface {
	CanMultiConn() bool
}

// serverFeatureLimiter is a Backend whose optional methods work only when
// something beyond its type says so (a *Client: when its upstream
// advertised the command); limitFeatures drops from x those that do not,
// before the server computes what it advertises.
type serverFeatureLimiter interface {
	limitFeatures(x *serverExport)
}

// Export is one export of a Server: a Backend under a name. The optional
// interfaces of Backend (Flusher, FUAWriter, Trimmer, Zeroer,
// BlockStatuser, Cacher, MultiConnBackend) decide what the export
// advertises. The Backend's Size is read once, when the server starts.
type Export struct {
	// Name is what clients ask for; "" is the default export.
	Name string
	// Description is sent in NBD_REP_SERVER and NBD_INFO_DESCRIPTION.
	Description string
	// Backend stores the export's bytes. It is called from many
	// goroutines at once.
	Backend Backend
	// ReadOnly refuses writes, trims and zeroes with EPERM.
	ReadOnly bool
	// Rotational sets NBD_FLAG_ROTATIONAL, a scheduling hint.
	Rotational bool
	// MinBlockSize is the alignment the server enforces on offsets and
	// lengths (a power of two up to 64 KiB); 0 means 1 (no constraint).
	MinBlockSize uint32
	// PreferredBlockSize is advertised in NBD_INFO_BLOCK_SIZE (a power of
	// two of at least 512); 0 means DefaultPreferredBlockSize.
	PreferredBlockSize uint32
	// NoReadHoles sends every READ reply's bytes as data: with structured
	// replies the server otherwise asks the Backend's BlockStatus for the
	// range of each READ and sends the ranges that read as zeroes as
	// OFFSET_HOLE chunks. Set it when BlockStatus costs more than the
	// holes save: on a *Client backend it is a BLOCK_STATUS round trip to
	// the upstream server per READ (ExportOf sets it). NBD_CMD_BLOCK_STATUS
	// itself is still served. A Lender's holes cost nothing and are kept.
	NoReadHoles bool
}

// Server serves exports over the NBD protocol (proto.md, fixed newstyle
// negotiation, structured replies, base:allocation, STARTTLS) to any
// number of clients. Set its fields, then call Serve with a listener (or
// ServeConn with a connection); the fields must not change afterwards.
// A Server is safe for concurrent use: Serve may run on many listeners,
// and Shutdown and Close may be called from any goroutine.
//
// Requests of one connection are worked on concurrently, up to
// MaxInFlight at a time, by a fixed pool of goroutines, each with its own
// buffer (a lone request, a write into a backend whose writes have been
// quick, or a read while reads have been served quickly, is served by the
// reading goroutine itself, saving a hand-off: a backend call that then
// blocks holds up the requests behind it until it returns);
// replies go out in completion order, each in one piece: one Write, or one
// writev with the other replies finished at the same time (on a socket,
// the replies of a burst are held until the client has nothing more to
// send, at most a few at a time). In steady state a request allocates
// nothing.
// Memory for request payloads and read replies is bounded by
// BufferMemory, for all connections together, plus the buffers of one
// request of MaxPayload: when writers that each hold part of their
// payload's buffers all wait for more, the one that has waited longest
// may pass the budget by that much, so that it completes and the others
// go on (free buffers are let go when the server has been idle for a
// second). A session adds a 64 KiB read buffer and, per request in
// flight, up to about 64 KiB of scratch space (extents, lent pieces,
// chunk headers); a handshake a few KiB between options, and while it
// reads an option of more than 4 KiB a buffer for it that grows with
// what the client has sent, up to 64 KiB, let go once the option is
// answered (a session keeps no handshake buffer). So the server's memory,
// beyond its backends', is at most about
//
//	BufferMemory + MaxPayload + MaxConns x (64 KiB + MaxInFlight x 64 KiB)
//	             + MaxHandshakes x 72 KiB
//
// (at the defaults, 192 MiB + 281 MiB at worst, a few MiB typically: the
// scratch space grows only with what requests need, and a handshake
// holds 8 KiB unless its client is sending a large option). A WRITE takes its
// buffers one at a time (64 KiB, or 1 MiB for a payload past 64 KiB),
// each once the first of its bytes has arrived: a client that sends a
// WRITE header and stalls holds none, one that stalls mid-payload holds
// what it has sent, rounded up to a buffer, until the connection ends
// (with IdleTimeout set, that is bounded in time too). If the writer let
// past the budget is the one that stalls, writers waiting for buffers
// wait for it to go on or leave. A client that stops reading its replies
// holds their buffers until ReplyTimeout closes its session, at most its
// share of the budget (ConnBufferMemory) or one request's buffers: the
// budget is held up for every session only when enough such clients
// together fill it.
type Server struct {
	// Exports are the exports served; names must be distinct.
	Exports []Export

	// TLSConfig enables NBD_OPT_STARTTLS when not nil.
	//
	// Client certificates are crypto/tls's: to admit only clients whose
	// certificate a CA signed, set ClientAuth to
	// tls.RequireAndVerifyClientCert and ClientCAs to a pool holding the
	// CA (examples/nbd-server's -tls-ca), and set RequireTLS, since a
	// client that never starts TLS never shows a certificate. Serve
	// refuses a TLSConfig that requires client certificates without
	// RequireTLS, and one that verifies them without ClientCAs (they
	// would be checked against the system's roots); a GetConfigForClient
	// is trusted as it is. A client that fails the check fails the TLS
	// handshake and is disconnected before any option is answered.
	TLSConfig *tls.Config
	// RequireTLS refuses every option but STARTTLS and ABORT with
	// NBD_REP_ERR_TLS_REQD until TLS is up (proto.md's FORCEDTLS mode).
	// It needs TLSConfig.
	RequireTLS bool

	// MaxPayload is the largest READ or WRITE payload, advertised as the
	// maximum block size; 0 means DefaultServerMaxPayload (64 MiB). A larger
	// READ gets EINVAL (EOVERFLOW under FlagDF); a larger WRITE is read
	// and discarded and gets EINVAL, or the connection is dropped if its
	// length is beyond what the server is willing to read for nothing.
	MaxPayload uint32
	// MaxInFlight bounds the requests of one connection served at once;
	// 0 means DefaultMaxInFlight.
	MaxInFlight int
	// MaxConns bounds the sessions (connections past their handshake)
	// served at once. When all are taken, a connection that finishes its
	// handshake takes the place of a session idle for EvictIdleAfter; a
	// connection accepted while all are taken and none is idle that long
	// is refused, told NBD_REP_ERR_SHUTDOWN with a message in answer to
	// its first option. Connections that finish their handshakes together
	// may pass it by at most MaxHandshakes. 0 means DefaultMaxConns.
	MaxConns int
	// MaxHandshakes bounds the connections in their handshake at once;
	// when all are taken, a new connection pushes out the one that has
	// been haggling longest: that one gives up its place at once, gets
	// NBD_REP_ERR_SHUTDOWN with the reason in answer to the option it is
	// sending or its next one, and is dropped within a second (at once
	// when many are being told why already). 0 means
	// DefaultMaxHandshakes.
	MaxHandshakes int
	// HandshakeTimeout bounds the option haggling of a connection; 0
	// means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// EvictIdleAfter lets a connection that finishes its handshake while
	// MaxConns sessions are served take the place of the session that has
	// had no request in flight for longest, if for at least this long:
	// that session is closed (its reader stops; nothing is in flight, but
	// a request arriving at that moment is dropped unanswered). So
	// idle sessions cannot lock new clients out, at the price that a
	// client idle that long on a full server loses its connection (a
	// kernel client without reconnection then fails its next I/O; set
	// MaxConns high enough for such clients, or disable eviction). 0
	// means DefaultEvictIdleAfter; negative disables eviction, and a full
	// server refuses new connections.
	EvictIdleAfter time.Duration
	// ReplyTimeout bounds how long the server waits for a session to take
	// its replies: each piece of up to 1 MiB of the replies being written
	// (a whole batch of smaller ones) must be taken by the connection
	// within ReplyTimeout (or up to a quarter more: the deadline is
	// renewed lazily), or the session is closed, its requests in
	// flight dropped unanswered and the BufferMemory they reserved given
	// back. A client that stops reading its replies (or a peer that is
	// gone without a word) thus holds its share of the budget
	// (ConnBufferMemory) for at most ReplyTimeout; a slow
	// client is served as long as it takes 1 MiB per ReplyTimeout. The
	// connection ends with an error matching ErrReplyTimeout (ServeConn's
	// result, and the Logger's warning). 0 means DefaultReplyTimeout (30
	// s); negative means never, and a client that never reads can then
	// hold its replies' buffers until it disconnects or the server is
	// closed.
	ReplyTimeout time.Duration
	// IdleTimeout closes a session that has had no request in flight and
	// sent nothing for that long, or stalls that long in the payload of a
	// request it sent while idle; 0 means never (a kernel client may
	// rightly stay idle for hours).
	IdleTimeout time.Duration
	// BufferMemory bounds the memory of the buffers that hold request
	// payloads and read replies, for all connections together; 0 means
	// DefaultBufferMemory. A request reserves its buffers (whole 64 KiB
	// or 1 MiB buffers) before it takes them, a read all at once, a write
	// one at a time as its payload arrives, and waits while the budget
	// has no room; its reservation ends once its reply is written. One
	// request at a time, the one waiting longest, may pass the budget by
	// the buffers of one request of MaxPayload. It must hold a request of
	// MaxPayload.
	BufferMemory int64
	// ConnBufferMemory is one connection's share of BufferMemory: a
	// session reads no further request that needs buffers while its
	// requests in flight hold that much, until some of their replies are
	// written. So a client that stops reading its replies holds at most
	// its share, and the other sessions go on with the rest of the
	// budget rather than wait for ReplyTimeout to end that session. A
	// request that needs more than the share starts once its session
	// holds nothing. 0 means a quarter of BufferMemory; negative, no
	// share (a session may take the whole budget).
	ConnBufferMemory int64

	// FreeOSMemory makes the server return the process's free memory to
	// the system (runtime/debug.FreeOSMemory: a forced garbage collection
	// and scavenge) once its payload buffers have gone unused for a
	// second and been let go, or its last connection has ended (then
	// again three times a second apart, for what connections still
	// ending held the first time). Without
	// it the buffers let go become garbage that the Go runtime collects
	// and returns at its own pace: the next collection may be minutes
	// away in a process that allocates little, so the resident memory
	// stays near its peak. Set it in a program whose memory is mostly the
	// server's (examples/nbd-server does); leave it unset where a forced
	// collection, a whole-process cost, should be the program's own
	// choice. What the Go runtime grew for its busiest moment it keeps
	// and reuses (goroutine records, a per-processor cache of dead
	// goroutines' stacks, span and collector metadata, poll descriptors):
	// an amount set by GOMAXPROCS and the connection limits, not by what
	// clients send, so the resident memory returns to the level of a
	// server that has served as many connections before, a little above
	// a fresh process's (examples/nbd-server's TestRSSUnderHostileClients).
	FreeOSMemory bool

	// Logger receives connection events at Debug level and failures at
	// Warn; nil discards them.
	Logger *slog.Logger

	initOnce sync.Once
	initErr  error
	exports  map[string]*serverExport
	bufs     *serverBuffers
	budget   *serverBudget
	names    []string // sorted, for NBD_OPT_LIST

	mu               sync.Mutex
	listeners        map[*net.Listener]struct{}
	conns            map[*serverConn]serverConnKind
	handshaking      []*serverConn // oldest first
	sessions         int
	refusing         chan struct{} // one token per refused connection being told why
	refusals         serverLogLimit
	evictions        serverLogLimit
	sessionEvictions serverLogLimit
	failures         serverLogLimit
	inShutdown       atomic.Bool
	baseCtx          context.Context
	cancel           context.CancelFunc
}

// serverExport is an Export with its capabilities resolved once.
type serverExport struct {
	Export
	size       uint64
	flags      ExportFlags // without ExportSendDF, which depends on the connection
	minBlock   uint32
	prefBlock  uint32
	maxPayload uint32
	flusher    Flusher
	fua        FUAWriter
	fuaAt      *serverFUAAt // fua as an io.WriterAt
	trimmer    Trimmer
	zeroer     Zeroer
	status     BlockStatuser
	cacher     Cacher
	lender     Lender    // reads sent from the backend's memory
	pages      PageTaker // writes of whole pages handed over
}

func (s *Server) init() error {
	s.initOnce.Do(func() {
		s.baseCtx, s.cancel = context.WithCancel(context.Background())
		s.listeners = make(map[*net.Listener]struct{})
		s.conns = make(map[*serverConn]serverConnKind)
		s.refusing = make(chan struct{}, serverMaxRefusing)
		s.bufs = newServerBuffers()
		s.budget = &serverBudget{bufs: s.bufs, limit: s.BufferMemory, extra: serverNeed(int64(s.maxPayload())), release: s.FreeOSMemory}
		if s.budget.limit == 0 {
			s.budget.limit = DefaultBufferMemory
		}
		switch s.budget.share = s.ConnBufferMemory; {
		case s.budget.share == 0:
			s.budget.share = s.budget.limit / 4
		case s.budget.share < 0:
			s.budget.share = 0
		}
		s.initErr = s.resolveExports()
	})
	return s.initErr
}

func (s *Server) resolveExports() error {
	if s.RequireTLS && s.TLSConfig == nil {
		return errors.New("nbd: Server.RequireTLS set without a TLSConfig")
	}
	if err := s.checkClientAuth(); err != nil {
		return err
	}
	maxPayload := s.maxPayload()
	if maxPayload > 1<<31 {
		// A READ reply chunk carries 8 bytes of offset in a u32 length.
		return fmt.Errorf("nbd: Server.MaxPayload %d above 2 GiB", maxPayload)
	}
	if s.MaxInFlight < 0 || s.MaxConns < 0 || s.MaxHandshakes < 0 || s.BufferMemory < 0 || s.IdleTimeout < 0 {
		return errors.New("nbd: negative Server limit")
	}
	if need := serverNeed(int64(maxPayload)); s.budget.limit < need {
		return fmt.Errorf("nbd: Server.BufferMemory %d below the %d bytes of buffers a request of MaxPayload takes", s.budget.limit, need)
	}
	s.exports = make(map[string]*serverExport, len(s.Exports))
	for i := range s.Exports {
		e := &s.Exports[i]
		if _, dup := s.exports[e.Name]; dup {
			return fmt.Errorf("nbd: export %q listed twice", e.Name)
		}
		x, err := resolveExport(e, maxPayload)
		if err != nil {
			return err
		}
		s.exports[e.Name] = x
		s.names = append(s.names, e.Name)
	}
	sort.Strings(s.names)
	return nil
}

// resolveExport checks e and finds what its Backend can do.
func resolveExport(e *Export, maxPayload uint32) (*serverExport, error) {
	if e.Backend == nil {
		return nil, fmt.Errorf("nbd: export %q has no Backend", e.Name)
	}
	if len(e.Name) > MaxStringLength || len(e.Description) > MaxStringLength {
		return nil, fmt.Errorf("nbd: export %q: name or description longer than %d bytes", e.Name, MaxStringLength)
	}
	size := e.Backend.Size()
	if size < 0 {
		return nil, fmt.Errorf("nbd: export %q has negative size %d", e.Name, size)
	}
	x := &serverExport{Export: *e, size: uint64(size), minBlock: e.MinBlockSize, prefBlock: e.PreferredBlockSize, maxPayload: maxPayload}
	if x.minBlock == 0 {
		x.minBlock = 1
	}
	if x.prefBlock == 0 {
		x.prefBlock = max(DefaultPreferredBlockSize, x.minBlock)
	}
	if !serverPow2(x.minBlock) || x.minBlock > 64<<10 {
		return nil, fmt.Errorf("nbd: export %q: MinBlockSize %d is not a power of two up to 65536", e.Name, x.minBlock)
	}
	if !serverPow2(x.prefBlock) || x.prefBlock < max(512, x.minBlock) {
		return nil, fmt.Errorf("nbd: export %q: PreferredBlockSize %d is not a power of two of at least 512 and MinBlockSize", e.Name, x.prefBlock)
	}
	if x.maxPayload%x.minBlock != 0 || x.maxPayload < x.prefBlock {
		return nil, fmt.Errorf("nbd: export %q: MaxPayload %d is not a multiple of MinBlockSize of at least PreferredBlockSize", e.Name, x.maxPayload)
	}
	x.resolveFeatures()
	return x, nil
}

// resolveFeatures finds the Backend's optional interfaces and the
// transmission flags they advertise.
func (x *serverExport) resolveFeatures() {
	b := x.Backend
	x.flags = ExportHasFlags | ExportSendCache
	x.flusher, _ = b.(Flusher)
	x.fua, _ = b.(FUAWriter)
	if x.fua != nil {
		x.fuaAt = &serverFUAAt{x.fua}
	}
	x.trimmer, _ = b.(Trimmer)
	x.zeroer, _ = b.(Zeroer)
	x.status, _ = b.(BlockStatuser)
	x.cacher, _ = b.(Cacher)
	x.lender, _ = b.(Lender)
	x.pages, _ = b.(PageTaker)
	if l, ok := b.(serverFeatureLimiter); ok {
		l.limitFeatures(x)
	}
	if x.flusher != nil {
		x.flags |= ExportSendFlush | ExportSendFUA
	}
	if x.ReadOnly {
		x.flags |= ExportReadOnly
	} else {
		x.flags |= ExportSendWriteZeroes | ExportSendFastZero
		if x.trimmer != nil {
			x.flags |= ExportSendTrim
		}
	}
	if x.Rotational {
		x.flags |= ExportRotational
	}
	if m, ok := b.(MultiConnBackend); ok && m.CanMultiConn() {
		x.flags |= ExportCanMultiConn
	}
}

// serverTransientAccept reports an accept error worth retrying.
func serverTransientAccept(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func serverPow2(v uint32) bool { return v != 0 && v&(v-1) == 0 }

func (s *Server) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return serverDiscardLogger
}

var serverDiscardLogger = slog.New(slog.DiscardHandler)

func (s *Server) maxInFlight() int {
	if s.MaxInFlight > 0 {
		return s.MaxInFlight
	}
	return DefaultMaxInFlight
}

func (s *Server) maxPayload() uint32 {
	if s.MaxPayload > 0 {
		return s.MaxPayload
	}
	return DefaultServerMaxPayload
}

func (s *Server) maxConns() int {
	if s.MaxConns > 0 {
		return s.MaxConns
	}
	return DefaultMaxConns
}

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

// ListenAndServe listens on network and address ("unix", "/run/x.sock"
// or "tcp", "127.0.0.1:10809") and calls Serve.
func (s *Server) ListenAndServe(network, address string) error {
	if err := s.init(); err != nil {
		return err
	}
	l, err := net.Listen(network, address)
	if err != nil {
		return err
	}
	return s.Serve(l)
}

// Serve accepts connections on l and serves each on its own goroutines
// until l fails or the server is shut down; it closes l before it
// returns. After Shutdown or Close it returns ErrServerClosed; an invalid
// export configuration is reported before anything is accepted.
//
// Serve returns ErrServerClosed as soon as Shutdown starts, while the
// connections are still finishing their requests and before the final
// flush: it says no more than that this listener is done. A caller that
// closes the backends (or exits) after Serve returns must first wait for
// Shutdown itself to return, as with net/http:
//
//	done := make(chan error, 1)
//	go func() { done <- srv.Shutdown(ctx) }() // on a signal, say
//	...
//	err := <-done // every request answered and every backend flushed
//	disk.Close()
func (s *Server) Serve(l net.Listener) error {
	if err := s.init(); err != nil {
		l.Close()
		return err
	}
	if !s.trackListener(&l, true) {
		l.Close()
		return ErrServerClosed
	}
	defer s.trackListener(&l, false)
	defer l.Close()
	var delay time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if s.inShutdown.Load() {
				return ErrServerClosed
			}
			if serverTransientAccept(err) {
				// Out of descriptors or memory for a moment: back off and
				// retry, as net/http does, rather than stop serving.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.logger().Warn("nbd: accept failed; retrying", "err", err, "delay", delay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		c := s.newConn(nc)
		if reason := s.admit(c); reason != "" {
			s.refuse(nc, reason)
			continue
		}
		go c.serve()
	}
}

// ServeConn serves one connection that is already open (one end of a
// socketpair, an inherited descriptor) and returns when the client
// disconnects, the session fails or the server closes; it closes nc. It
// returns nil after a clean disconnect (NBD_CMD_DISC or NBD_OPT_ABORT),
// and ErrServerFull when MaxConns sessions are served (nc is then told
// why, NBD_REP_ERR_SHUTDOWN, before it is closed).
//
// A connection that implements syscall.Conn (as *net.TCPConn and
// *net.UnixConn do, here or from Serve's listener) is read and written
// through its descriptor during transmission, not through its Read and
// Write methods: a wrapper that changes the bytes must not expose
// SyscallConn.
func (s *Server) ServeConn(nc net.Conn) error {
	if err := s.init(); err != nil {
		nc.Close()
		return err
	}
	c := s.newConn(nc)
	if reason := s.admit(c); reason != "" {
		if s.inShutdown.Load() {
			nc.Close()
			return ErrServerClosed
		}
		s.refuse(nc, reason)
		return ErrServerFull
	}
	return c.serve()
}

func (s *Server) trackListener(l *net.Listener, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.inShutdown.Load() {
			return false
		}
		s.listeners[l] = struct{}{}
	} else {
		delete(s.listeners, l)
	}
	return true
}

// serverFinalFlushTimeout bounds the flush that ends Shutdown once its
// own context is done.
const serverFinalFlushTimeout = 30 * time.Second

// Shutdown stops the server gracefully: it closes the listeners, answers
// the next options of connections still haggling with
// NBD_REP_ERR_SHUTDOWN and drops them within a second, stops reading new
// requests, lets every request already started finish and be answered
// (requests the client sent that the server had buffered but not started
// are answered NBD_ESHUTDOWN), closes the connections, and then flushes
// every export whose Backend is a Flusher, so that no write the server
// acknowledged is lost. If ctx ends first, Shutdown closes everything at
// once (as Close) and still flushes (under a context that keeps ctx's
// values, without its deadline, bounded by 30 seconds), then returns
// ctx's error with any flush error. A client that does not read its
// replies holds Shutdown up for about ReplyTimeout at most (unless that is
// negative), after which its session is closed.
func (s *Server) Shutdown(ctx context.Context) error {
	if err := s.init(); err != nil {
		return err
	}
	s.mu.Lock()
	s.inShutdown.Store(true)
	for l := range s.listeners {
		(*l).Close()
	}
	for c := range s.conns {
		c.stopReading()
	}
	s.mu.Unlock()
	if err := s.waitConns(ctx); err != nil {
		s.Close()
		// Acknowledged writes are complete: flush them even so.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), serverFinalFlushTimeout)
		defer cancel()
		return errors.Join(err, s.flushExports(fctx))
	}
	return s.flushExports(ctx)
}

// waitConns waits until every connection has ended, or ctx.
func (s *Server) waitConns(ctx context.Context) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		s.mu.Lock()
		n := len(s.conns)
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// flushExports flushes every export whose Backend is a Flusher.
func (s *Server) flushExports(ctx context.Context) error {
	var errs []error
	for _, name := range s.names {
		if f := s.exports[name].flusher; f != nil {
			if err := f.Flush(ctx); err != nil {
				errs = append(errs, fmt.Errorf("nbd: flush export %q at shutdown: %w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Close stops the server at once: it closes the listeners and every
// connection and cancels the context of backend calls in progress. Requests
// in flight are abandoned; use Shutdown to finish them.
func (s *Server) Close() error {
	if err := s.init(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inShutdown.Store(true)
	for l := range s.listeners {
		(*l).Close()
	}
	for c := range s.conns {
		c.nc().Close()
	}
	s.cancel()
	return nil
}
