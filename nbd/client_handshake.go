package nbd

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// HandshakeStyle is the handshake a server spoke.
type HandshakeStyle uint8

const (
	// StyleOldstyle: the server sent the export's size and flags at once;
	// no options, no export names, no TLS.
	StyleOldstyle HandshakeStyle = iota + 1
	// StyleNewstyle: options without replies; only NBD_OPT_EXPORT_NAME.
	StyleNewstyle
	// StyleFixedNewstyle: options with replies; everything.
	StyleFixedNewstyle
)

func (s HandshakeStyle) String() string {
	switch s {
	case StyleOldstyle:
		return "oldstyle"
	case StyleNewstyle:
		return "newstyle"
	case StyleFixedNewstyle:
		return "fixed newstyle"
	}
	return "unknown"
}

// MetaContext is a metadata context the server agreed to (or listed):
// its id in block status replies and its name.
type MetaContext struct {
	ID   uint32
	Name string
}

// ExportEntry is one export of an NBD_OPT_LIST reply.
type ExportEntry struct {
	Name        string
	Description string
}

// clientMaxOptionReply bounds the data of one option reply: the largest a
// well-formed reply can be is an NBD_REP_SERVER of a 4096-byte name and a
// 4096-byte description.
const clientMaxOptionReply = 4 + 2*MaxStringLength

// clientMaxReplies bounds the replies to one option (LIST, META_CONTEXT,
// INFO), so a server cannot keep the client reading forever.
const clientMaxReplies = 1 << 16

// clientMaxListBytes bounds what the client keeps of the replies to one
// LIST or META_CONTEXT option.
const clientMaxListBytes = 16 << 20

// Negotiator drives the option phase of one connection by hand, as
// libnbd's "opt mode" does: list exports, query an export, list or set
// metadata contexts, then Go into transmission (or Abort). Dial and
// NewClient use it with a fixed sequence; use it yourself to do more.
//
// A Negotiator is not safe for concurrent use. Its methods honour their
// context by setting the connection's deadline while they run.
type Negotiator struct {
	conn   net.Conn
	cfg    *clientConfig
	style  HandshakeStyle
	noZero bool // both sides chose NO_ZEROES
	tls    bool
	sr     bool // structured replies negotiated
	ctxs   []MetaContext
	ctxFor string // the export ctxs were set for
	done   bool   // went into transmission, aborted or failed
	// oldstyle: what the greeting said
	oldSize  uint64
	oldFlags ExportFlags
	hdr      [OptionReplySize]byte
	buf      []byte
}

// Negotiate reads the server's greeting on conn and answers it; with a TLS
// option (WithTLS) it then upgrades the connection with NBD_OPT_STARTTLS,
// failing with ErrTLSUnavailable if the server cannot. On error conn is
// closed.
func Negotiate(ctx context.Context, conn net.Conn, opts ...Option) (*Negotiator, error) {
	return newNegotiator(ctx, conn, newClientConfig(opts))
}

func newNegotiator(ctx context.Context, conn net.Conn, cfg *clientConfig) (*Negotiator, error) {
	n := &Negotiator{conn: conn, cfg: cfg}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true) // the default in Go, but be sure (nbd-facts)
	}
	err := n.with(ctx, n.greet)
	if err == nil && cfg.tls != nil {
		err = n.StartTLS(ctx, cfg.tls)
	}
	if err != nil {
		n.fail()
		return nil, err
	}
	return n, nil
}

// with runs f with conn's deadline set from ctx, and cancels a blocked
// read or write when ctx ends.
func (n *Negotiator) with(ctx context.Context, f func() error) error {
	if n.done {
		return errClientNegotiationOver
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok {
		_ = n.conn.SetDeadline(d)
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = n.conn.SetDeadline(time.Unix(1, 0))
		close(fired)
	})
	err := f()
	if !stop() {
		<-fired // so the deadline cannot land after the reset below
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		// The deadline or cancellation is why the I/O failed. The
		// connection's deadline (ctx's) can fire a moment before ctx
		// itself reports it.
		cerr := ctx.Err()
		if d, ok := ctx.Deadline(); ok && cerr == nil && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(d) {
			cerr = context.DeadlineExceeded
		}
		if cerr != nil {
			err = fmt.Errorf("%w (%v)", cerr, err)
		}
	}
	_ = n.conn.SetDeadline(time.Time{})
	if err != nil {
		var pe *ProtocolError
		if errors.As(err, &pe) || ctx.Err() != nil || !isOptionError(err) {
			// The stream is unusable after a protocol error, a
			// cancelled read or an I/O error.
			n.fail()
		}
	}
	return err
}

func isOptionError(err error) bool {
	var oe *OptionError
	return errors.As(err, &oe)
}

func (n *Negotiator) fail() {
	n.done = true
	_ = n.conn.Close()
}

func (n *Negotiator) greet() error {
	var b [18]byte
	if _, err := io.ReadFull(n.conn, b[:16]); err != nil {
		return handshakeIOError("reading the greeting", err)
	}
	if m := binary.BigEndian.Uint64(b[:]); m != MagicNBD {
		return badMagic("greeting", m)
	}
	switch m := binary.BigEndian.Uint64(b[8:]); m {
	case MagicOldstyle:
		// u64 size, u32 flags (transmission flags in the low 16 bits), 124 zeroes
		var o [8 + 4 + ExportNameZeroes]byte
		if _, err := io.ReadFull(n.conn, o[:]); err != nil {
			return handshakeIOError("reading the oldstyle greeting", err)
		}
		n.style = StyleOldstyle
		n.oldSize = binary.BigEndian.Uint64(o[:])
		n.oldFlags = ExportFlags(binary.BigEndian.Uint32(o[8:]))
		if !n.oldFlags.Has(ExportHasFlags) {
			return protoErr("oldstyle flags " + n.oldFlags.String() + " without HAS_FLAGS")
		}
		return nil
	case MagicIHaveOpt:
	default:
		return badMagic("greeting", m)
	}
	if _, err := io.ReadFull(n.conn, b[16:18]); err != nil {
		return handshakeIOError("reading the handshake flags", err)
	}
	hf := HandshakeFlags(binary.BigEndian.Uint16(b[16:]))
	var cf ClientFlags
	n.style = StyleNewstyle
	if hf.Has(HandshakeFixedNewstyle) {
		cf |= ClientFixedNewstyle
		n.style = StyleFixedNewstyle
	}
	if hf.Has(HandshakeNoZeroes) {
		cf |= ClientNoZeroes
		n.noZero = true
	}
	binary.BigEndian.PutUint32(b[:4], uint32(cf))
	if _, err := n.conn.Write(b[:4]); err != nil {
		return handshakeIOError("sending the client flags", err)
	}
	return nil
}

func handshakeIOError(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("nbd: server hung up while %s: %w", what, io.ErrUnexpectedEOF)
	}
	return fmt.Errorf("nbd: %s: %w", what, err)
}

// ExportName returns the export named by the URI or WithExportName.
func (n *Negotiator) ExportName() string { return n.cfg.export }

// Style reports the handshake the server spoke.
func (n *Negotiator) Style() HandshakeStyle { return n.style }

// TLS reports whether the connection has been upgraded to TLS.
func (n *Negotiator) TLS() bool { return n.tls }

// errClientNegotiationOver is the error of a Negotiator call after the
// negotiation ended.
var errClientNegotiationOver = fmt.Errorf("%w: negotiation is over", ErrNegotiation)

func (n *Negotiator) needFixed(o OptionCode) error {
	if n.style != StyleFixedNewstyle {
		return fmt.Errorf("%w: option %v needs fixed newstyle, the server speaks %v (%w)", ErrNotAdvertised, o, n.style, clientErrno{ENOTSUP})
	}
	return nil
}

// send writes one option in one write.
func (n *Negotiator) send(o OptionCode, data []byte) error {
	if len(data) > 1<<20 {
		return fmt.Errorf("%w: option %v data of %d bytes, refused locally", ErrOptTooBig, o, len(data))
	}
	b := make([]byte, OptionHeaderSize, OptionHeaderSize+len(data))
	h := OptionHeader{Option: o, Length: uint32(len(data))}
	h.Put((*[OptionHeaderSize]byte)(b))
	b = append(b, data...)
	if _, err := n.conn.Write(b); err != nil {
		return handshakeIOError("sending option "+o.String(), err)
	}
	return nil
}

// reply reads one option reply to o. The data it returns is valid until the
// next call. An error reply comes back as an *OptionError.
func (n *Negotiator) reply(o OptionCode) (OptionReplyType, []byte, error) {
	if _, err := io.ReadFull(n.conn, n.hdr[:]); err != nil {
		return 0, nil, handshakeIOError("reading the reply to "+o.String(), err)
	}
	var r OptionReply
	if err := r.Parse(&n.hdr); err != nil {
		return 0, nil, err
	}
	if r.Option != o {
		return 0, nil, protoErr("reply to option " + r.Option.String() + " while waiting for " + o.String())
	}
	if r.Length > clientMaxOptionReply {
		return 0, nil, protoErr(fmt.Sprintf("option reply %v of %d bytes, more than any reply can hold (%d)", r.Type, r.Length, clientMaxOptionReply))
	}
	if cap(n.buf) < int(r.Length) {
		n.buf = make([]byte, r.Length)
	}
	d := n.buf[:r.Length]
	if _, err := io.ReadFull(n.conn, d); err != nil {
		return 0, nil, handshakeIOError("reading the reply to "+o.String(), err)
	}
	if r.Type.IsError() {
		msg := d
		if len(msg) > MaxStringLength {
			msg = msg[:MaxStringLength]
		}
		return r.Type, nil, &OptionError{Option: o, Reply: r.Type, Message: string(msg)}
	}
	return r.Type, d, nil
}

// simple sends o with data and expects a bare ACK.
func (n *Negotiator) simple(o OptionCode, data []byte) error {
	if err := n.send(o, data); err != nil {
		return err
	}
	t, d, err := n.reply(o)
	if err != nil {
		return err
	}
	if t != RepAck || len(d) != 0 {
		return protoErr(fmt.Sprintf("reply %v of %d bytes to %v, want an empty ACK", t, len(d), o))
	}
	return nil
}

// StartTLS upgrades the connection with NBD_OPT_STARTTLS and a TLS client
// handshake using cfg (crypto/tls; X.509 only). Any option error comes back
// wrapped with ErrTLSUnavailable; a failed TLS handshake ends the
// connection (proto.md: it is too late to go on without TLS). Negotiated
// meta contexts and structured replies are forgotten, as the protocol asks.
func (n *Negotiator) StartTLS(ctx context.Context, cfg *tls.Config) error {
	if n.tls {
		return fmt.Errorf("%w: TLS is already on", ErrNegotiation)
	}
	if err := n.needFixed(OptStartTLS); err != nil {
		return fmt.Errorf("%w: %w", ErrTLSUnavailable, err)
	}
	err := n.with(ctx, func() error { return n.simple(OptStartTLS, nil) })
	if err != nil {
		if isOptionError(err) {
			// No downgrade: a caller that asked for TLS does not get
			// plaintext.
			n.fail()
		}
		return fmt.Errorf("%w: %w", ErrTLSUnavailable, err)
	}
	tc := tls.Client(n.conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		n.fail()
		return fmt.Errorf("nbd: TLS handshake: %w", err)
	}
	n.conn, n.tls = tc, true
	n.sr, n.ctxs = false, nil
	return nil
}

// StructuredReplies negotiates NBD_OPT_STRUCTURED_REPLY. An error reply
// (for example ERR_UNSUP) leaves the connection usable with simple replies.
func (n *Negotiator) StructuredReplies(ctx context.Context) error {
	if err := n.needFixed(OptStructuredReply); err != nil {
		return err
	}
	return n.with(ctx, func() error {
		if err := n.simple(OptStructuredReply, nil); err != nil {
			return err
		}
		n.sr = true
		return nil
	})
}

// List asks the server for its exports (NBD_OPT_LIST).
func (n *Negotiator) List(ctx context.Context) ([]ExportEntry, error) {
	if err := n.needFixed(OptList); err != nil {
		return nil, err
	}
	var out []ExportEntry
	kept := 0
	err := n.with(ctx, func() error {
		if err := n.send(OptList, nil); err != nil {
			return err
		}
		for range clientMaxReplies {
			t, d, err := n.reply(OptList)
			if err != nil {
				return err
			}
			switch t {
			case RepAck:
				if len(d) != 0 {
					return protoErr("ACK with data to LIST")
				}
				return nil
			case RepServer:
				name, desc, err := ParseServerReply(d)
				if err != nil {
					return err
				}
				if kept += len(d); kept > clientMaxListBytes {
					return protoErr("LIST replies of more than 16 MiB")
				}
				out = append(out, ExportEntry{Name: name, Description: desc})
			default:
				return protoErr("reply " + t.String() + " to LIST")
			}
		}
		return protoErr("more than 65536 replies to LIST")
	})
	return out, err
}

// metaContexts runs LIST_META_CONTEXT or SET_META_CONTEXT.
func (n *Negotiator) metaContexts(ctx context.Context, o OptionCode, export string, queries []string) ([]MetaContext, error) {
	if err := n.needFixed(o); err != nil {
		return nil, err
	}
	if o == OptSetMetaContext && !n.sr {
		return nil, fmt.Errorf("%w: metadata contexts need structured replies (%w)", ErrNotAdvertised, clientErrno{ENOTSUP})
	}
	if err := clientCheckName(export); err != nil {
		return nil, err
	}
	for _, q := range queries {
		if err := clientCheckName(q); err != nil {
			return nil, err
		}
	}
	var out []MetaContext
	kept := 0
	err := n.with(ctx, func() error {
		data := AppendMetaContextRequest(nil, &MetaContextRequest{Export: export, Queries: queries})
		if err := n.send(o, data); err != nil {
			return err
		}
		for range clientMaxReplies {
			t, d, err := n.reply(o)
			if err != nil {
				return err
			}
			switch t {
			case RepAck:
				if len(d) != 0 {
					return protoErr("ACK with data to " + o.String())
				}
				return nil
			case RepMetaContext:
				id, name, err := ParseMetaContextReply(d)
				if err != nil {
					return err
				}
				if kept += len(d); kept > clientMaxListBytes {
					return protoErr(o.String() + " replies of more than 16 MiB")
				}
				if o == OptSetMetaContext {
					for _, m := range out {
						if m.ID == id {
							return protoErr(fmt.Sprintf("meta context id %d given twice", id))
						}
					}
				}
				out = append(out, MetaContext{ID: id, Name: name})
			default:
				return protoErr("reply " + t.String() + " to " + o.String())
			}
		}
		return protoErr("more than 65536 replies to " + o.String())
	})
	return out, err
}

// ListMetaContexts asks which metadata contexts of export match the
// queries (all of them, with none) with NBD_OPT_LIST_META_CONTEXT.
func (n *Negotiator) ListMetaContexts(ctx context.Context, export string, queries ...string) ([]MetaContext, error) {
	return n.metaContexts(ctx, OptListMetaContext, export, queries)
}

// SetMetaContexts selects metadata contexts of export for block status with
// NBD_OPT_SET_META_CONTEXT and returns those the server agreed to; it
// replaces an earlier selection. Structured replies must be on. The
// selection holds only if Go names the same export (proto.md: block status
// needs contexts set for the export "ultimately selected"): a Client that
// Go opens on another export has no contexts, and its BlockStatus fails
// locally with ErrNotAdvertised.
func (n *Negotiator) SetMetaContexts(ctx context.Context, export string, queries ...string) ([]MetaContext, error) {
	m, err := n.metaContexts(ctx, OptSetMetaContext, export, queries)
	if err == nil {
		n.ctxs, n.ctxFor = m, export
	} else if isOptionError(err) {
		n.ctxs = nil
	}
	return m, err
}

func clientCheckName(s string) error {
	if len(s) > MaxStringLength {
		return fmt.Errorf("nbd: name of %d bytes is longer than the protocol's 4096 (%w)", len(s), clientErrno{EINVAL})
	}
	return nil
}

var clientInfoRequests = []InfoType{InfoExport, InfoBlockSize, InfoName, InfoDescription}

// info runs NBD_OPT_INFO or NBD_OPT_GO for export.
func (n *Negotiator) info(o OptionCode, export string) (ExportInfo, error) {
	var e ExportInfo
	data := AppendInfoRequest(nil, &InfoRequest{Name: export, Requests: clientInfoRequests})
	if err := n.send(o, data); err != nil {
		return e, err
	}
	haveExport := false
	for range clientMaxReplies {
		t, d, err := n.reply(o)
		if err != nil {
			return e, err
		}
		switch t {
		case RepAck:
			if len(d) != 0 {
				return e, protoErr("ACK with data to " + o.String())
			}
			if !haveExport {
				return e, protoErr("ACK to " + o.String() + " without NBD_INFO_EXPORT")
			}
			return e, nil
		case RepInfo:
			it, err := ParseInfo(d, &e)
			if err != nil {
				return e, err
			}
			if it == InfoExport {
				haveExport = true
			}
		default:
			// proto.md: a client SHOULD ignore reply types it does not
			// know only if it can; for GO/INFO anything else is wrong.
			return e, protoErr("reply " + t.String() + " to " + o.String())
		}
	}
	return e, protoErr("more than 65536 replies to " + o.String())
}

// Info asks about export without entering transmission (NBD_OPT_INFO),
// requesting its name, description and block size constraints.
func (n *Negotiator) Info(ctx context.Context, export string) (ExportInfo, error) {
	if err := n.needFixed(OptInfo); err != nil {
		return ExportInfo{}, err
	}
	if err := clientCheckName(export); err != nil {
		return ExportInfo{}, err
	}
	var e ExportInfo
	err := n.with(ctx, func() (err error) {
		e, err = n.info(OptInfo, export)
		return err
	})
	return e, err
}

// Abort ends the negotiation politely (NBD_OPT_ABORT) and closes the
// connection.
func (n *Negotiator) Abort(ctx context.Context) error {
	if n.done {
		return nil
	}
	var err error
	if n.style == StyleFixedNewstyle {
		err = n.with(ctx, func() error {
			if err := n.send(OptAbort, nil); err != nil {
				return err
			}
			// The server should ACK, but may just hang up.
			_, _, err := n.reply(OptAbort)
			if errors.Is(err, io.ErrUnexpectedEOF) {
				err = nil
			}
			return err
		})
	}
	n.fail()
	return err
}

// Close closes the connection without a word to the server.
func (n *Negotiator) Close() error {
	if n.done {
		return nil
	}
	n.fail()
	return nil
}

// Go enters transmission on export: NBD_OPT_GO asking for the block size
// constraints, name and description, falling back to NBD_OPT_EXPORT_NAME
// when the server answers ERR_UNSUP (or speaks plain newstyle). On an
// oldstyle connection the export name is ignored. After Go, successful or
// not, the Negotiator is spent; on error the connection is closed.
func (n *Negotiator) Go(ctx context.Context, export string) (*Client, error) {
	if n.done {
		return nil, errClientNegotiationOver
	}
	if err := clientCheckName(export); err != nil {
		n.fail()
		return nil, err
	}
	var e ExportInfo
	err := n.with(ctx, func() error {
		switch n.style {
		case StyleOldstyle:
			e.Size, e.Flags = n.oldSize, n.oldFlags&0xffff
			return nil
		case StyleFixedNewstyle:
			var err error
			e, err = n.info(OptGo, export)
			if !errors.Is(err, ErrOptUnsupported) {
				return err
			}
		}
		if n.cfg.tls != nil && !n.tls {
			return ErrTLSUnavailable
		}
		return n.exportName(export, &e)
	})
	if err != nil {
		n.giveUp(err)
		return nil, err
	}
	n.done = true
	if n.ctxFor != export {
		n.ctxs = nil // set for another export: not usable on this one
	}
	return newClient(n, e)
}

// giveUp ends a negotiation that failed with err. After an option error the
// connection is still in step, so the client first says NBD_OPT_ABORT, as
// proto.md asks of a client that gives up (after NBD_REP_ERR_SHUTDOWN too),
// without waiting for the server's answer (nor, for the ABORT's write,
// more than a second); then it closes the connection. A failure that is
// not an option error (a hang-up, a protocol error) just closes it.
func (n *Negotiator) giveUp(err error) {
	if !n.done && n.style == StyleFixedNewstyle && isOptionError(err) {
		_ = n.conn.SetWriteDeadline(time.Now().Add(time.Second))
		_ = n.send(OptAbort, nil)
	}
	n.fail()
}

// exportName runs NBD_OPT_EXPORT_NAME. The server refuses it only by
// hanging up.
func (n *Negotiator) exportName(export string, e *ExportInfo) error {
	if err := n.send(OptExportName, []byte(export)); err != nil {
		return err
	}
	var b [ExportNameReplySize + ExportNameZeroes]byte
	size := len(b)
	if n.noZero {
		size = ExportNameReplySize
	}
	if _, err := io.ReadFull(n.conn, b[:size]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("nbd: server hung up after NBD_OPT_EXPORT_NAME %q (no such export, or TLS required?): %w", export, io.ErrUnexpectedEOF)
		}
		return handshakeIOError("reading the reply to EXPORT_NAME", err)
	}
	e.Size = binary.BigEndian.Uint64(b[:])
	e.Flags = ExportFlags(binary.BigEndian.Uint16(b[8:]))
	if !e.Flags.Has(ExportHasFlags) {
		return protoErr("export flags " + e.Flags.String() + " without HAS_FLAGS")
	}
	return nil
}
