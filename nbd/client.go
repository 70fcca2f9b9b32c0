package nbd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nhdkit/nhd/zerocopy"
)

// Client is a connection (or, with multi-conn, several) to one export of an
// NBD server, in transmission.
//
// A Client is safe for concurrent use: many goroutines may issue requests
// at once; each request carries its own cookie and is matched to its reply
// whatever order the server answers in. Up to WithMaxInFlight requests per
// connection are in flight; further calls wait for a slot (or for their
// context). As on any block device, overlapping requests in flight at the
// same time complete in no defined order.
//
// Buffers: ReadAt and Pread fill p straight from the socket and do not
// retain it once they return; on any error p is zeroed, so it never holds
// stale or partial data. WriteAt and Pwrite do not modify or retain p.
//
// Local refusals: a command or flag the server did not advertise fails with
// ErrNotAdvertised, a write to a read-only export with ErrReadOnly, a
// request past the end with ErrOutOfRange, a request that breaks the
// advertised minimum block size with ErrUnaligned; none of them is sent.
// Reads and writes longer than the server's maximum payload are split.
//
// Errors from the server match their errno: errors.Is(err, syscall.EIO).
// A broken connection (hang-up, bad magic, any protocol violation) fails
// every request in flight at once and every later call at once. A reply
// with ESHUTDOWN (the server is going away) starts a soft disconnect of
// its connection, as proto.md requires: later calls on it fail at once
// with ErrServerShutdown, the requests in flight go on to their replies,
// and then the connection sends NBD_CMD_DISC and closes. It waits for
// those replies at most WithSoftDisconnectTimeout (default
// DefaultClientSoftDisconnectTimeout); the requests still unanswered then
// fail with an error that matches ErrServerShutdown and ErrConnectionLost.
//
// Deadlines and cancellation hold in every phase: a call returns as soon
// as its context ends, whether it waits for a slot, writes its request or
// waits for its reply, and whatever the server is sending then (nothing,
// half a header, half a payload). A request whose reply has not been
// taken when its context ends is abandoned: nothing more is written into
// its buffer, and its reply (or the rest of it) is read and discarded in
// the background, so the connection stays usable for the other calls. A
// request cut while only part of it was written cannot be taken back: the
// connection is then closed, and every call on it fails with
// ErrConnectionLost. Calls without a context (ReadAt, WriteAt) are bounded
// by WithRequestTimeout, the handshake by WithHandshakeTimeout.
type Client struct {
	conns []*clientConn
	next  atomic.Uint32

	info       ExportInfo
	size       int64
	style      HandshakeStyle
	tls        bool
	structured bool
	contexts   []MetaContext
	baseID     uint32
	hasBase    bool

	minBlock, prefBlock, maxPayload uint32 // effective constraints

	reqTimeout time.Duration  // WithRequestTimeout: bound of the calls without a context
	timeouts   clientTimeouts // their contexts, kept from call to call

	closed    atomic.Bool
	closeOnce sync.Once
}

// Compile-time checks: a Client is a Backend with every optional interface.
var (
	_ Backend       = (*Client)(nil)
	_ Flusher       = (*Client)(nil)
	_ FUAWriter     = (*Client)(nil)
	_ Trimmer       = (*Client)(nil)
	_ Zeroer        = (*Client)(nil)
	_ BlockStatuser = (*Client)(nil)
	_ Cacher        = (*Client)(nil)
	_ io.ReaderAt   = (*Client)(nil)
	_ io.WriterAt   = (*Client)(nil)
	_ io.Closer     = (*Client)(nil)
)

// Dial connects to the export an NBD URI names (see ParseURI) and performs
// the handshake: STARTTLS first for nbds URIs (failing, never downgrading,
// if the server cannot), structured replies, the base:allocation meta
// context, then NBD_OPT_GO with a fallback to NBD_OPT_EXPORT_NAME. Old
// servers speaking oldstyle or plain newstyle are accepted. ctx bounds the
// connection and the handshake only, as does WithHandshakeTimeout
// (default DefaultClientHandshakeTimeout).
func Dial(ctx context.Context, uri string, opts ...Option) (*Client, error) {
	u, cfg, err := clientPrepare(uri, opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := cfg.handshakeContext(ctx)
	defer cancel()
	connect := func() (*Client, error) {
		nc, err := cfg.dialURI(ctx, u)
		if err != nil {
			return nil, err
		}
		return clientConnect(ctx, nc, cfg)
	}
	c, err := connect()
	if err != nil {
		return nil, err
	}
	if cfg.connections > 1 && c.info.Flags.Has(ExportCanMultiConn) {
		for len(c.conns) < cfg.connections {
			c2, err := connect()
			if err == nil && (c2.size != c.size || c2.info.Flags != c.info.Flags || c2.structured != c.structured) {
				c2.Close()
				err = fmt.Errorf("nbd: multi-conn: connection %d sees size %d flags %v, the first saw %d %v",
					len(c.conns)+1, c2.size, c2.info.Flags, c.size, c.info.Flags)
			}
			if err != nil {
				c.Close()
				return nil, err
			}
			c.conns = append(c.conns, c2.conns[0])
		}
	}
	return c, nil
}

// DialNegotiator connects to the server a URI names and returns the
// connection in the option phase (after STARTTLS for an nbds URI), to be
// driven by hand; Negotiator.ExportName is the URI's export. ctx and
// WithHandshakeTimeout bound the connection, the greeting and STARTTLS.
func DialNegotiator(ctx context.Context, uri string, opts ...Option) (*Negotiator, error) {
	u, cfg, err := clientPrepare(uri, opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := cfg.handshakeContext(ctx)
	defer cancel()
	nc, err := cfg.dialURI(ctx, u)
	if err != nil {
		return nil, err
	}
	return newNegotiator(ctx, nc, cfg)
}

// ListExports lists the exports of the server a URI names (NBD_OPT_LIST),
// then ends the session with NBD_OPT_ABORT, all within ctx and
// WithHandshakeTimeout.
func ListExports(ctx context.Context, uri string, opts ...Option) ([]ExportEntry, error) {
	ctx, cancel := newClientConfig(opts).handshakeContext(ctx)
	defer cancel()
	n, err := DialNegotiator(ctx, uri, opts...)
	if err != nil {
		return nil, err
	}
	l, err := n.List(ctx)
	if err != nil {
		n.giveUp(err) // NBD_OPT_ABORT after an option error (ERR_SHUTDOWN)
		return nil, clientTLSHint(err, n)
	}
	_ = n.Abort(ctx)
	return l, nil
}

func clientPrepare(uri string, opts []Option) (*URI, *clientConfig, error) {
	u, err := ParseURI(uri)
	if err != nil {
		return nil, nil, err
	}
	cfg := newClientConfig(opts)
	if !cfg.exportSet {
		cfg.export = u.Export
	}
	if cfg.tls == nil && u.TLS {
		if cfg.tls, err = u.tlsConfig(); err != nil {
			return nil, nil, err
		}
	}
	return u, cfg, nil
}

func (cfg *clientConfig) dialURI(ctx context.Context, u *URI) (net.Conn, error) {
	dial := cfg.dial
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	nc, err := dial(ctx, u.Network, u.Address)
	if err != nil {
		// A *net.OpError already names the operation and the address.
		if _, ok := errors.AsType[*net.OpError](err); ok {
			return nil, fmt.Errorf("nbd: %w", err)
		}
		return nil, fmt.Errorf("nbd: dial %s %s: %w", u.Network, u.Address, err)
	}
	return nc, nil
}

// NewClient performs the handshake on conn, which the Client then owns, as
// Dial does (the export name comes from WithExportName, default ""; TLS from
// WithTLS; the bound WithHandshakeTimeout).
func NewClient(ctx context.Context, conn net.Conn, opts ...Option) (*Client, error) {
	cfg := newClientConfig(opts)
	ctx, cancel := cfg.handshakeContext(ctx)
	defer cancel()
	return clientConnect(ctx, conn, cfg)
}

func clientConnect(ctx context.Context, nc net.Conn, cfg *clientConfig) (*Client, error) {
	n, err := newNegotiator(ctx, nc, cfg)
	if err != nil {
		return nil, err
	}
	if n.style == StyleFixedNewstyle {
		if !cfg.noStructured {
			if err := n.StructuredReplies(ctx); err != nil && !clientIgnorable(err) {
				n.giveUp(err) // NBD_OPT_ABORT after an option error
				return nil, clientTLSHint(err, n)
			}
		}
		if n.sr && len(cfg.metaContexts) > 0 {
			if _, err := n.SetMetaContexts(ctx, cfg.export, cfg.metaContexts...); err != nil && !clientIgnorable(err) {
				n.giveUp(err)
				return nil, clientTLSHint(err, n)
			}
		}
	}
	c, err := n.Go(ctx, cfg.export)
	return c, clientTLSHint(err, n)
}

// clientIgnorable reports an option error that leaves the handshake able
// to go on (the feature is just missing).
func clientIgnorable(err error) bool {
	return isOptionError(err) && !errors.Is(err, ErrOptTLSRequired) && !errors.Is(err, ErrOptShutdown)
}

func clientTLSHint(err error, n *Negotiator) error {
	if errors.Is(err, ErrOptTLSRequired) && !n.tls {
		return fmt.Errorf("%w (connect with an nbds URI or WithTLS)", err)
	}
	return err
}

// tlsConfig builds the crypto/tls configuration an nbds URI asks for.
func (u *URI) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	switch {
	case u.TLSHostname != "":
		cfg.ServerName = u.TLSHostname
	case u.Network == "tcp":
		host, _, _ := net.SplitHostPort(u.Address)
		cfg.ServerName = host
	default:
		cfg.ServerName = "localhost"
	}
	cfg.InsecureSkipVerify = !u.TLSVerifyPeer
	if d := u.TLSCertificates; d != "" {
		pem, err := os.ReadFile(filepath.Join(d, "ca-cert.pem"))
		if err != nil {
			return nil, fmt.Errorf("nbd: tls-certificates: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("nbd: tls-certificates: no certificate in %s", filepath.Join(d, "ca-cert.pem"))
		}
		cfg.RootCAs = pool
		certFile, keyFile := filepath.Join(d, "client-cert.pem"), filepath.Join(d, "client-key.pem")
		if _, err := os.Stat(certFile); err == nil {
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, fmt.Errorf("nbd: tls-certificates: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
	}
	return cfg, nil
}

// newClient starts transmission on a negotiated connection.
func newClient(n *Negotiator, e ExportInfo) (*Client, error) {
	if e.Size > math.MaxInt64 {
		n.fail()
		return nil, protoErr(fmt.Sprintf("export size %d does not fit an int64", e.Size))
	}
	c := &Client{
		info:       e,
		size:       int64(e.Size),
		style:      n.style,
		tls:        n.tls,
		structured: n.sr,
		contexts:   n.ctxs,
	}
	for _, m := range c.contexts {
		if m.Name == MetaContextBaseAllocation {
			c.baseID, c.hasBase = m.ID, true
		}
	}
	c.minBlock, c.prefBlock, c.maxPayload = clientBlockLimits(e)
	c.reqTimeout = n.cfg.requestTimeout
	// As many bounded calls as can have requests in flight keep theirs.
	c.timeouts.max = n.cfg.maxInFlight * max(1, n.cfg.connections)
	cc := newClientConn(n.conn, n.sr, n.ctxs, n.cfg.maxInFlight)
	cc.spin.window = n.cfg.replySpin
	cc.shutWait = n.cfg.softDiscTimeout
	if n.cfg.splice {
		cc.wb.SetSplice(zerocopy.SpliceMin)
	}
	c.conns = []*clientConn{cc}
	return c, nil
}

// clientBlockLimits chooses the constraints to obey: the advertised ones
// if they make sense (proto.md: minimum a power of two up to 64 KiB,
// preferred a power of two of at least 512 and the minimum, maximum a
// multiple of the minimum and at least the preferred, or 0xffffffff), else
// the spec's defaults (no alignment, 32 MiB payload), as libnbd does. The
// payload is never above 64 MiB.
func clientBlockLimits(e ExportInfo) (minimum, preferred, maxPayload uint32) {
	pow2 := func(v uint32) bool { return v != 0 && v&(v-1) == 0 }
	mn, pr, mx := e.MinBlock, e.PreferredBlock, e.MaxPayload
	if mn == 0 && pr == 0 && mx == 0 ||
		!pow2(mn) || mn > 64<<10 || !pow2(pr) || pr < 512 || pr < mn ||
		(mx != math.MaxUint32 && (mx%mn != 0 || mx < pr)) {
		return 1, 4096, DefaultMaxPayload
	}
	if mx > maxRequestSize {
		mx = maxRequestSize
	}
	return mn, pr, mx
}

// Size returns the size of the export in bytes.
func (c *Client) Size() int64 { return c.size }

// Export returns what the server said of the export in the handshake: size,
// transmission flags, and (from NBD_OPT_GO) canonical name, description
// and advertised block sizes.
func (c *Client) Export() ExportInfo { return c.info }

// Flags returns the export's transmission flags: the features the server
// advertised.
func (c *Client) Flags() ExportFlags { return c.info.Flags }

// BlockSize returns the constraints the client obeys: the minimum block
// (every offset and length a multiple of it), the preferred block, and the
// largest payload of one READ or WRITE request (longer ReadAt and WriteAt
// calls are split). Without a (sensible) advertisement they are 1, 4096 and
// 32 MiB.
func (c *Client) BlockSize() (minimum, preferred, maxPayload uint32) {
	return c.minBlock, c.prefBlock, c.maxPayload
}

// MetaContexts returns the metadata contexts negotiated for block status.
func (c *Client) MetaContexts() []MetaContext { return append([]MetaContext(nil), c.contexts...) }

// StructuredReplies reports whether structured replies were negotiated.
func (c *Client) StructuredReplies() bool { return c.structured }

// Handshake returns the handshake style the server spoke.
func (c *Client) Handshake() HandshakeStyle { return c.style }

// TLS reports whether the connections use TLS.
func (c *Client) TLS() bool { return c.tls }

// Connections returns the number of connections in use (more than one only
// with WithConnections and a server that advertises CAN_MULTI_CONN).
func (c *Client) Connections() int { return len(c.conns) }

// Close ends every connection with NBD_CMD_DISC and closes it. Requests
// still in flight fail at once with ErrClosed; use Shutdown to let them
// finish first. Calls after Close fail with ErrClosed.
func (c *Client) Close() error {
	c.closed.Store(true)
	c.closeOnce.Do(func() {
		for _, cc := range c.conns {
			cc.close(ErrClosed)
		}
	})
	return nil
}

// Shutdown stops new requests (they fail with ErrClosed), waits until the
// requests in flight are done or ctx ends, then closes as Close does.
func (c *Client) Shutdown(ctx context.Context) error {
	c.closed.Store(true)
	var err error
	for _, cc := range c.conns {
		if e := cc.quiesce(ctx); e != nil && err == nil {
			err = e
		}
	}
	c.Close()
	return err
}

func (c *Client) pick() *clientConn {
	if len(c.conns) == 1 {
		return c.conns[0]
	}
	return c.conns[c.next.Add(1)%uint32(len(c.conns))]
}

// check validates a request's range locally.
func (c *Client) check(off, length int64) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if off < 0 || length < 0 || off > c.size || length > c.size-off {
		return fmt.Errorf("%w: [%d, +%d) of an export of %d bytes (%w)", ErrOutOfRange, off, length, c.size, clientErrno{EINVAL})
	}
	if m := int64(c.minBlock); m > 1 && (off%m != 0 || length%m != 0) {
		return fmt.Errorf("%w: [%d, +%d) with a minimum block of %d (%w)", ErrUnaligned, off, length, m, clientErrno{EINVAL})
	}
	return nil
}

func (c *Client) need(f ExportFlags, what string) error {
	if !c.info.Flags.Has(f) {
		return fmt.Errorf("%w: %s needs %v (%w)", ErrNotAdvertised, what, f, clientErrno{ENOTSUP})
	}
	return nil
}

func (c *Client) writable() error {
	if c.info.Flags.Has(ExportReadOnly) {
		return fmt.Errorf("%w (%w)", ErrReadOnly, clientErrno{EPERM})
	}
	return nil
}

// checkFlags refuses flags outside allowed and flags the server did not
// advertise.
func (c *Client) checkFlags(cmd Command, flags, allowed CmdFlags) error {
	if bad := flags &^ allowed; bad != 0 {
		return fmt.Errorf("%w: %v for %v (%w)", ErrInvalidFlag, bad, cmd, clientErrno{EINVAL})
	}
	if flags.Has(FlagFUA) {
		if err := c.need(ExportSendFUA, "FUA"); err != nil {
			return err
		}
	}
	if flags.Has(FlagDF) {
		if err := c.need(ExportSendDF, "DF"); err != nil {
			return err
		}
		if !c.structured {
			return fmt.Errorf("%w: DF needs structured replies (%w)", ErrNotAdvertised, clientErrno{ENOTSUP})
		}
	}
	if flags.Has(FlagFastZero) {
		if err := c.need(ExportSendFastZero, "FAST_ZERO"); err != nil {
			return err
		}
	}
	if flags.Has(FlagReqOne) && !c.structured {
		return fmt.Errorf("%w: REQ_ONE needs structured replies (%w)", ErrNotAdvertised, clientErrno{ENOTSUP})
	}
	return nil
}

// ctxless returns the context of a call made without one: unbounded
// (t nil), or bounded by WithRequestTimeout (t, which the call gives back
// with endCall when it ends).
func (c *Client) ctxless() (ctx context.Context, t *clientTimeout) {
	if c.reqTimeout <= 0 {
		return context.Background(), nil
	}
	t = c.timeouts.get(c.reqTimeout)
	return t, t
}

// endCall gives back the context of a call made without one.
func (c *Client) endCall(t *clientTimeout) {
	if t != nil {
		c.timeouts.put(t)
	}
}

// ReadAt reads len(p) bytes at off (io.ReaderAt). Reading past the end of
// the export returns the bytes before it and io.EOF. On any other error p
// is zeroed and n is 0. WithRequestTimeout bounds it (default: no bound).
func (c *Client) ReadAt(p []byte, off int64) (n int, err error) {
	if off >= c.size && len(p) > 0 && off >= 0 {
		if c.closed.Load() {
			return 0, ErrClosed
		}
		return 0, io.EOF
	}
	want := p
	if off >= 0 && int64(len(p)) > c.size-off {
		want = p[:c.size-off]
	}
	ctx, t := c.ctxless()
	defer c.endCall(t)
	if err := c.Pread(ctx, want, off, 0); err != nil {
		return 0, err
	}
	if len(want) < len(p) {
		return len(want), io.EOF
	}
	return len(p), nil
}

// Pread reads exactly len(p) bytes at off with command flags (FlagDF only),
// splitting reads longer than the maximum payload. On error p is zeroed.
func (c *Client) Pread(ctx context.Context, p []byte, off int64, flags CmdFlags) error {
	err := c.pread(ctx, p, off, flags)
	if err != nil {
		clear(p)
	}
	return err
}

func (c *Client) pread(ctx context.Context, p []byte, off int64, flags CmdFlags) error {
	if err := c.check(off, int64(len(p))); err != nil {
		return err
	}
	if err := c.checkFlags(CmdRead, flags, FlagDF); err != nil {
		return err
	}
	if len(p) == 0 {
		return nil
	}
	if len(p) <= int(c.maxPayload) {
		return c.pick().do(ctx, CmdRead, flags, uint64(off), uint32(len(p)), nil, p)
	}
	return c.split(ctx, CmdRead, flags, p, off)
}

// WriteAt writes p at off (io.WriterAt). A write past the end of the export
// is refused whole with ErrOutOfRange. On error n is 0: which parts of a
// split write reached the disk is unknown. WithRequestTimeout bounds it
// (default: no bound).
func (c *Client) WriteAt(p []byte, off int64) (n int, err error) {
	ctx, t := c.ctxless()
	defer c.endCall(t)
	if err := c.Pwrite(ctx, p, off, 0); err != nil {
		return 0, err
	}
	return len(p), nil
}

// WriteAtFUA writes p at off durably (FUA). Without SEND_FUA it writes and
// then flushes.
func (c *Client) WriteAtFUA(p []byte, off int64) (n int, err error) {
	ctx, t := c.ctxless()
	defer c.endCall(t)
	if c.info.Flags.Has(ExportSendFUA) {
		err = c.Pwrite(ctx, p, off, FlagFUA)
	} else if err = c.Pwrite(ctx, p, off, 0); err == nil {
		err = c.Flush(ctx)
	}
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// Pwrite writes all of p at off with command flags (FlagFUA only),
// splitting writes longer than the maximum payload.
func (c *Client) Pwrite(ctx context.Context, p []byte, off int64, flags CmdFlags) error {
	if err := c.check(off, int64(len(p))); err != nil {
		return err
	}
	if err := c.writable(); err != nil {
		return err
	}
	if err := c.checkFlags(CmdWrite, flags, FlagFUA); err != nil {
		return err
	}
	if len(p) == 0 {
		return nil
	}
	if len(p) <= int(c.maxPayload) {
		return c.pick().do(ctx, CmdWrite, flags, uint64(off), uint32(len(p)), p, nil)
	}
	return c.split(ctx, CmdWrite, flags, p, off)
}

// clientSplitWindow is how many parts of one split read or write are in
// flight at once.
const clientSplitWindow = 8

// split runs a READ or WRITE longer than the maximum payload as parts,
// keeping up to clientSplitWindow in flight. It blocks for a slot only when
// it holds none, so callers cannot deadlock holding slots. On a connection
// that is not a kernel socket (a net.Pipe has no buffer at all) it keeps
// one part in flight: while this goroutine writes, no one may be reading
// the replies it is waiting for.
func (c *Client) split(ctx context.Context, cmd Command, flags CmdFlags, p []byte, off int64) error {
	cc := c.pick()
	part := int(c.maxPayload) &^ (int(c.minBlock) - 1)
	window := clientSplitWindow
	if !cc.canWritev {
		window = 1
	}
	var ring [clientSplitWindow]*clientSlot
	head, n := 0, 0
	var first error
	sent := 0
	for sent < len(p) || n > 0 {
		if sent < len(p) && first == nil && n < window {
			var s *clientSlot
			if n == 0 {
				var err error
				if s, err = cc.acquire(ctx); err != nil {
					first = err
					continue
				}
			} else {
				s = cc.tryAcquire()
			}
			if s != nil {
				l := min(part, len(p)-sent)
				var wbuf, rbuf []byte
				if cmd == CmdWrite {
					wbuf = p[sent : sent+l]
				} else {
					rbuf = p[sent : sent+l]
				}
				if err := cc.start(ctx, s, cmd, flags, uint64(off)+uint64(sent), uint32(l), wbuf, rbuf); err != nil {
					first = err
					continue
				}
				ring[(head+n)%clientSplitWindow] = s
				n++
				sent += l
				continue
			}
		}
		if n == 0 {
			break
		}
		s := ring[head]
		head = (head + 1) % clientSplitWindow
		n--
		err, abandoned := cc.wait(ctx, s)
		if !abandoned {
			cc.release(s)
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Flush makes every completed write durable (NBD_CMD_FLUSH), on every
// connection. If the server did not advertise SEND_FLUSH it has no write
// cache to flush (that is how Linux's nbd driver reads the flag), and Flush
// returns nil without sending anything.
func (c *Client) Flush(ctx context.Context) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if !c.info.Flags.Has(ExportSendFlush) {
		return nil
	}
	if len(c.conns) == 1 {
		return c.conns[0].do(ctx, CmdFlush, 0, 0, 0, nil, nil)
	}
	// Start a flush on every connection, taking slots in connection
	// order (so two flushes cannot deadlock), then collect them.
	slots := make([]*clientSlot, len(c.conns))
	var first error
	for i, cc := range c.conns {
		s, err := cc.acquire(ctx)
		if err == nil {
			err = cc.start(ctx, s, CmdFlush, 0, 0, 0, nil, nil)
			if err == nil {
				slots[i] = s
			}
		}
		if err != nil && first == nil {
			first = err
		}
	}
	for i, s := range slots {
		if s == nil {
			continue
		}
		err, abandoned := c.conns[i].wait(ctx, s)
		if !abandoned {
			c.conns[i].release(s)
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// clientMaxCommandLength bounds one TRIM, WRITE_ZEROES or BLOCK_STATUS
// request (a power of two, so aligned to any minimum block); longer ranges
// are split.
const clientMaxCommandLength = 1 << 30

// rangeCmd runs a payload-less command over [off, off+length) in parts of
// at most step bytes.
func (c *Client) rangeCmd(ctx context.Context, cmd Command, flags CmdFlags, off, length int64, step int64) error {
	for length > 0 {
		l := min(length, step)
		if err := c.pick().do(ctx, cmd, flags, uint64(off), uint32(l), nil, nil); err != nil {
			return err
		}
		off += l
		length -= l
	}
	return nil
}

// Trim discards [off, off+length) (NBD_CMD_TRIM; the Trimmer interface).
func (c *Client) Trim(ctx context.Context, off, length int64) error {
	return c.TrimFlags(ctx, off, length, 0)
}

// TrimFlags is Trim with command flags (FlagFUA only).
func (c *Client) TrimFlags(ctx context.Context, off, length int64, flags CmdFlags) error {
	if err := c.check(off, length); err != nil {
		return err
	}
	if err := c.writable(); err != nil {
		return err
	}
	if err := c.need(ExportSendTrim, "TRIM"); err != nil {
		return err
	}
	if err := c.checkFlags(CmdTrim, flags, FlagFUA); err != nil {
		return err
	}
	return c.rangeCmd(ctx, CmdTrim, flags, off, length, clientMaxCommandLength)
}

// WriteZeroes writes zeroes over [off, off+length) without a payload
// (NBD_CMD_WRITE_ZEROES; the Zeroer interface). flags may hold FlagFUA,
// FlagNoHole (keep the range allocated) and FlagFastZero (fail with ENOTSUP
// unless zeroing is fast), each only if the server advertised it.
func (c *Client) WriteZeroes(ctx context.Context, off, length int64, flags CmdFlags) error {
	if err := c.check(off, length); err != nil {
		return err
	}
	if err := c.writable(); err != nil {
		return err
	}
	if err := c.need(ExportSendWriteZeroes, "WRITE_ZEROES"); err != nil {
		return err
	}
	if err := c.checkFlags(CmdWriteZeroes, flags, FlagFUA|FlagNoHole|FlagFastZero); err != nil {
		return err
	}
	return c.rangeCmd(ctx, CmdWriteZeroes, flags, off, length, clientMaxCommandLength)
}

// Cache asks the server to prefetch [off, off+length) (NBD_CMD_CACHE; the
// Cacher interface).
func (c *Client) Cache(ctx context.Context, off, length int64) error {
	if err := c.check(off, length); err != nil {
		return err
	}
	if err := c.need(ExportSendCache, "CACHE"); err != nil {
		return err
	}
	return c.rangeCmd(ctx, CmdCache, 0, off, length, int64(c.maxPayload)&^(int64(c.minBlock)-1))
}

// BlockStatus appends to dst the base:allocation extents of the bytes from
// off on (the BlockStatuser interface). One request is sent; the extents
// cover at least one byte and at most length bytes (the last one is cut at
// off+length). It fails with ErrNotAdvertised unless base:allocation was
// negotiated.
func (c *Client) BlockStatus(ctx context.Context, off, length int64, dst []Extent) ([]Extent, error) {
	if !c.hasBase {
		return dst, fmt.Errorf("%w: base:allocation was not negotiated (%w)", ErrNotAdvertised, clientErrno{ENOTSUP})
	}
	if length == 0 {
		if err := c.check(off, 0); err != nil {
			return dst, err
		}
		return dst, nil
	}
	var got bool
	err := c.BlockStatusFlags(ctx, off, length, 0, func(m MetaContext, ext []Extent) error {
		if m.ID != c.baseID {
			return nil
		}
		got = true
		dst = clientClampExtents(dst, ext, min(length, clientMaxCommandLength))
		return nil
	})
	if err == nil && !got {
		err = protoErr("BLOCK_STATUS reply without base:allocation extents")
	}
	return dst, err
}

// clientClampExtents appends ext to dst, cutting them at limit bytes.
func clientClampExtents(dst, ext []Extent, limit int64) []Extent {
	var sum int64
	for _, e := range ext {
		if sum >= limit {
			break
		}
		if sum+int64(e.Length) > limit {
			e.Length = uint32(limit - sum)
		}
		sum += int64(e.Length)
		dst = append(dst, e)
	}
	return dst
}

// BlockStatusFlags sends one NBD_CMD_BLOCK_STATUS for [off, off+length)
// (length capped at 1 GiB) with flags (FlagReqOne only) and calls fn once
// per negotiated context the server described, with the extents from off
// on, as the server sent them (the last may run past the range). ext is
// valid only during the call.
func (c *Client) BlockStatusFlags(ctx context.Context, off, length int64, flags CmdFlags, fn func(m MetaContext, ext []Extent) error) error {
	if err := c.check(off, length); err != nil {
		return err
	}
	if len(c.contexts) == 0 {
		return fmt.Errorf("%w: no metadata context was negotiated (%w)", ErrNotAdvertised, clientErrno{ENOTSUP})
	}
	if err := c.checkFlags(CmdBlockStatus, flags, FlagReqOne); err != nil {
		return err
	}
	if length == 0 {
		return nil
	}
	length = min(length, clientMaxCommandLength)
	cc := c.pick()
	s, err := cc.acquire(ctx)
	if err != nil {
		return err
	}
	if err := cc.start(ctx, s, CmdBlockStatus, flags, uint64(off), uint32(length), nil, nil); err != nil {
		return err
	}
	err, abandoned := cc.wait(ctx, s)
	if abandoned {
		return err
	}
	defer cc.release(s)
	if err != nil {
		return err
	}
	for _, r := range s.extRuns {
		var m MetaContext
		for _, x := range c.contexts {
			if x.ID == r.id {
				m = x
			}
		}
		if err := fn(m, s.ext[r.start:r.end]); err != nil {
			return err
		}
	}
	return nil
}

// WalkExtents calls fn for each extent of the named metadata context over
// [off, off+length), in order, with the offset where the extent starts,
// sending as many BLOCK_STATUS requests as it takes. The last extent is
// cut at off+length. An error from fn stops the walk and is returned.
func (c *Client) WalkExtents(ctx context.Context, metaContext string, off, length int64, fn func(off int64, e Extent) error) error {
	var id uint32
	found := false
	for _, m := range c.contexts {
		if m.Name == metaContext {
			id, found = m.ID, true
		}
	}
	if !found {
		return fmt.Errorf("%w: metadata context %q was not negotiated (%w)", ErrNotAdvertised, metaContext, clientErrno{ENOTSUP})
	}
	if err := c.check(off, length); err != nil {
		return err
	}
	end := off + length
	for off < end {
		var batch []Extent
		got := false
		err := c.BlockStatusFlags(ctx, off, end-off, 0, func(m MetaContext, ext []Extent) error {
			if m.ID == id {
				got = true
				batch = clientClampExtents(batch[:0], ext, end-off)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if !got {
			return protoErr(fmt.Sprintf("BLOCK_STATUS reply without extents for %q", metaContext))
		}
		for _, e := range batch {
			if err := fn(off, e); err != nil {
				return err
			}
			off += int64(e.Length)
		}
	}
	return nil
}

// clientErrno is the errno a local refusal stands for, so that a server
// re-exporting a Client answers it as the protocol expects (ENOTSUP for a
// feature the upstream lacks, EPERM for a read-only export, EINVAL for a
// bad range) and errors.Is(err, syscall.ENOTSUP) works. It does not claim
// to come from the server: its text is the plain errno's.
type clientErrno struct{ e Errno }

func (x clientErrno) Error() string { return x.e.Syscall().Error() }

// Is matches as the Errno does.
func (x clientErrno) Is(target error) bool { return x.e.Is(target) }

// As yields the Errno.
func (x clientErrno) As(target any) bool {
	if p, ok := target.(*Errno); ok {
		*p = x.e
		return true
	}
	return false
}
