package nbd

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// serverConnState is the phase of a server connection.
type serverConnState uint8

const (
	serverStateHandshake    serverConnState = iota // option haggling
	serverStateTransmission                        // serving requests
	serverStateDone                                // closed or closing
)

func (st serverConnState) String() string {
	switch st {
	case serverStateHandshake:
		return "handshake"
	case serverStateTransmission:
		return "transmission"
	}
	return "done"
}

// serverConn is one client connection.
type serverConn struct {
	srv *Server
	log *slog.Logger
	ctx context.Context

	cmu   sync.Mutex // guards netc, state, hsDeadline and stopAt
	netc  net.Conn   // the connection; a *tls.Conn after STARTTLS
	state serverConnState
	// hsDeadline ends the handshake; stopAt, once Shutdown has begun,
	// ends it sooner.
	hsDeadline, stopAt time.Time

	// Negotiated in the handshake; fixed during transmission.
	fixed      bool
	noZeroes   bool
	tlsUp      bool
	structured bool
	metaSet    bool   // SET_META_CONTEXT selected base:allocation ...
	metaExport string // ... for this export name
	export     *serverExport
	flags      ExportFlags // as advertised to this client
	statusOK   bool        // block status may be used
	lend       bool        // reads are sent from the MemDisk's memory (a socket)

	opt []byte // option data, reused
	rep []byte // option reply, reused

	// Idleness, for eviction: requests in flight (header read, reply not
	// yet written), when the last one ended (or the session began), and
	// whether the session was chosen to make room.
	active     atomic.Int32
	lastActive atomic.Int64 // Unix nanoseconds
	evicted    atomic.Bool
	// pushedOut: newer connections took this handshake's place; goodbye:
	// it holds a Server.refusing token while it says why (c.cmu).
	pushedOut atomic.Bool
	goodbye   bool

	writeNs atomic.Int64 // moving average of backend write time
	readNs  atomic.Int64 // moving average of a read's service time, reply included
}

// errServerHangUp ends a session on purpose, without a protocol error to
// report (an abort, or a request the protocol answers with a hang-up).
var errServerHangUp = errors.New("nbd: server hung up")

func (s *Server) newConn(nc net.Conn) *serverConn {
	c := &serverConn{srv: s, netc: nc, ctx: s.baseCtx}
	c.writeNs.Store(serverInlineBudget) // slow until shown quick
	c.readNs.Store(serverInlineBudget)
	c.log = s.logger().With("remote", nc.RemoteAddr().String())
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true) // proto.md: both sides SHOULD disable Nagle
	}
	return c
}

func (c *serverConn) nc() net.Conn {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	return c.netc
}

// serverShutdownOptionGrace is how long a connection still haggling
// options may go on once Shutdown has begun: long enough for a client to
// send its next option, read NBD_REP_ERR_SHUTDOWN and abort, short enough
// that a silent one does not hold up Shutdown.
const serverShutdownOptionGrace = time.Second

// stopReading is Shutdown's request: a connection still haggling gets
// NBD_REP_ERR_SHUTDOWN for its next options and is dropped after
// serverShutdownOptionGrace; one in transmission stops reading requests
// and finishes those it has.
func (c *serverConn) stopReading() {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	switch c.state {
	case serverStateHandshake:
		c.stopAt = time.Now().Add(serverShutdownOptionGrace)
		if !c.hsDeadline.IsZero() {
			c.netc.SetDeadline(c.handshakeDeadline())
		}
	case serverStateTransmission:
		c.netc.SetReadDeadline(time.Now())
	}
}

// handshakeDeadline is the earlier of hsDeadline and stopAt; c.cmu held.
func (c *serverConn) handshakeDeadline() time.Time {
	if !c.stopAt.IsZero() && c.stopAt.Before(c.hsDeadline) {
		return c.stopAt
	}
	return c.hsDeadline
}

// enterTransmission switches the state, unless the server is shutting
// down.
func (c *serverConn) enterTransmission() bool {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	if c.srv.inShutdown.Load() || c.state != serverStateHandshake {
		return false
	}
	c.netc.SetDeadline(time.Time{})
	c.state = serverStateTransmission
	c.opt, c.rep = nil, nil // the session keeps no handshake buffer
	return true
}

func (c *serverConn) serve() error {
	defer c.srv.untrackConn(c)
	err := c.handshake()
	if err == nil {
		if !c.enterTransmission() {
			err = ErrServerClosed
		} else {
			c.log.Debug("nbd: transmission", "export", c.export.Name, "flags", c.flags, "structured", c.structured)
			err = c.transmit()
		}
	}
	c.cmu.Lock()
	c.state = serverStateDone
	nc := c.netc
	if c.goodbye {
		c.goodbye = false
		<-c.srv.refusing
	}
	c.cmu.Unlock()
	nc.Close()
	switch {
	case err == nil, errors.Is(err, errServerHangUp):
		c.log.Debug("nbd: connection closed")
		return nil
	case c.srv.inShutdown.Load():
		return ErrServerClosed
	}
	c.srv.logConnFailed(c.log, err)
	return err
}

// handshake runs the fixed newstyle negotiation (proto.md, "Newstyle
// negotiation") until the client picks an export with NBD_OPT_GO or
// NBD_OPT_EXPORT_NAME. It returns nil when transmission may begin.
func (c *serverConn) handshake() error {
	nc := c.netc
	c.cmu.Lock()
	c.hsDeadline = time.Now().Add(c.srv.handshakeTimeout())
	nc.SetDeadline(c.handshakeDeadline())
	c.cmu.Unlock()
	var hello [18]byte
	binary.BigEndian.PutUint64(hello[0:], MagicNBD)
	binary.BigEndian.PutUint64(hello[8:], MagicIHaveOpt)
	binary.BigEndian.PutUint16(hello[16:], uint16(HandshakeFixedNewstyle|HandshakeNoZeroes))
	if _, err := nc.Write(hello[:]); err != nil {
		return err
	}
	var cf [4]byte
	if _, err := io.ReadFull(nc, cf[:]); err != nil {
		return err
	}
	flags := ClientFlags(binary.BigEndian.Uint32(cf[:]))
	// proto.md: "the server MUST drop the TCP connection if the client
	// sets an unknown flag".
	if flags&^(ClientFixedNewstyle|ClientNoZeroes) != 0 {
		return &ProtocolError{Msg: fmt.Sprintf("client flags 0x%x with unknown bits", uint32(flags))}
	}
	c.fixed = flags.Has(ClientFixedNewstyle)
	c.noZeroes = flags.Has(ClientNoZeroes)

	for n := 0; ; n++ {
		if n == serverMaxOptions {
			return &ProtocolError{Msg: "too many options"}
		}
		var hb [OptionHeaderSize]byte
		if _, err := io.ReadFull(c.netc, hb[:]); err != nil {
			return err
		}
		var h OptionHeader
		if err := h.Parse(&hb); err != nil {
			return err
		}
		done, err := c.option(h)
		if err != nil || done {
			return err
		}
	}
}

// option answers one option; done reports that transmission begins.
func (c *serverConn) option(h OptionHeader) (done bool, err error) {
	if h.Length > serverMaxOptionData {
		if h.Length > serverDiscardLimit || h.Option == OptExportName || !c.fixed {
			return false, &ProtocolError{Msg: fmt.Sprintf("option %v with %d bytes of data", h.Option, h.Length)}
		}
		if _, err := io.CopyN(io.Discard, c.netc, int64(h.Length)); err != nil {
			return false, err
		}
		return false, c.reply(h.Option, RepErrTooBig, "option data too long")
	}
	data, err := c.optionData(int(h.Length))
	if err != nil {
		return false, err
	}
	if !c.fixed && h.Option != OptExportName {
		// Plain newstyle knows only EXPORT_NAME; an old server hangs up.
		return false, &ProtocolError{Msg: "option " + h.Option.String() + " without fixed newstyle"}
	}
	if c.srv.inShutdown.Load() {
		return c.optShuttingDown(h, "server shutting down")
	}
	if c.pushedOut.Load() {
		return c.optShuttingDown(h, serverPushedOutReason)
	}
	if c.srv.RequireTLS && !c.tlsUp {
		switch h.Option {
		case OptStartTLS, OptAbort:
		case OptExportName:
			// proto.md FORCEDTLS: it cannot error, so terminate.
			return false, &ProtocolError{Msg: "NBD_OPT_EXPORT_NAME before TLS"}
		default:
			return false, c.reply(h.Option, RepErrTLSReqd, "TLS is required")
		}
	}
	switch h.Option {
	case OptAbort:
		// proto.md: the server MUST reply with ACK; the client may already
		// be gone, so a failed write is no error.
		c.reply(h.Option, RepAck, "")
		return false, errServerHangUp
	case OptExportName:
		return c.optExportName(data)
	case OptList:
		return false, c.optList(h, data)
	case OptStartTLS:
		return false, c.optStartTLS(h, data)
	case OptInfo, OptGo:
		return c.optInfo(h, data)
	case OptStructuredReply:
		if len(data) != 0 {
			return false, c.reply(h.Option, RepErrInvalid, "NBD_OPT_STRUCTURED_REPLY takes no data")
		}
		c.structured = true
		return false, c.reply(h.Option, RepAck, "")
	case OptListMetaContext, OptSetMetaContext:
		return false, c.optMetaContext(h, data)
	}
	return false, c.reply(h.Option, RepErrUnsup, "")
}

// optShuttingDown answers an option received once Shutdown has begun, or
// once the handshake was pushed out, with why.
// proto.md: the server "SHOULD error further options received (other
// than an NBD_OPT_ABORT) with NBD_REP_ERR_SHUTDOWN", and the client MUST
// then abort. EXPORT_NAME cannot be answered with an error: hang up.
func (c *serverConn) optShuttingDown(h OptionHeader, why string) (bool, error) {
	switch h.Option {
	case OptAbort:
		c.reply(h.Option, RepAck, "")
		return false, errServerHangUp
	case OptExportName:
		return false, fmt.Errorf("nbd: NBD_OPT_EXPORT_NAME while shutting down: %w", errServerHangUp)
	}
	return false, c.reply(h.Option, RepErrShutdown, why)
}

// reply sends an option reply with a message (for errors) or no data.
func (c *serverConn) reply(opt OptionCode, t OptionReplyType, msg string) error {
	return c.replyData(opt, t, []byte(msg))
}

func (c *serverConn) replyData(opt OptionCode, t OptionReplyType, data []byte) error {
	r := OptionReply{Option: opt, Type: t, Length: uint32(len(data))}
	var hb [OptionReplySize]byte
	r.Put(&hb)
	c.rep = append(append(c.rep[:0], hb[:]...), data...)
	_, err := c.netc.Write(c.rep)
	if cap(c.rep) > serverOptionKeep {
		c.rep = nil // a large reply's buffer is not kept
	}
	return err
}

// serverOptionKeep bounds the option data and reply buffers a handshake
// keeps from one option to the next: enough for a name of the protocol's
// longest. Larger data and replies take buffers of their own, let go once
// the option is answered.
const serverOptionKeep = MaxStringLength + 64

// serverOptionGrowFrom is the first size of the buffer of a large
// option's data, which then doubles as the data arrives.
const serverOptionGrowFrom = 1 << 10

// optionData reads the n bytes of an option's data (at most
// serverMaxOptionData): into c.opt if they fit serverOptionKeep, else into
// a buffer of their own that grows as they arrive, so a client that
// announces 64 KiB and stalls holds about what it has sent.
func (c *serverConn) optionData(n int) ([]byte, error) {
	if n <= serverOptionKeep {
		if cap(c.opt) < n {
			c.opt = make([]byte, n)
		}
		data := c.opt[:n]
		_, err := io.ReadFull(c.netc, data)
		return data, err
	}
	buf := make([]byte, 0, serverOptionGrowFrom)
	for len(buf) < n {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(n, 2*cap(buf))-len(buf))
		}
		k, err := c.netc.Read(buf[len(buf):min(n, cap(buf))])
		buf = buf[:len(buf)+k]
		if err != nil && len(buf) < n {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return buf, nil
}

func (c *serverConn) optExportName(data []byte) (bool, error) {
	if len(data) > MaxStringLength {
		return false, &ProtocolError{Msg: "export name longer than 4096 bytes"}
	}
	x := c.srv.exports[string(data)]
	if x == nil {
		// proto.md: the server MUST terminate the session.
		return false, fmt.Errorf("nbd: client asked for unknown export %q with NBD_OPT_EXPORT_NAME: %w", data, errServerHangUp)
	}
	c.choose(x)
	var b [ExportNameReplySize + ExportNameZeroes]byte
	binary.BigEndian.PutUint64(b[0:], x.size)
	binary.BigEndian.PutUint16(b[8:], uint16(c.flags))
	n := len(b)
	if c.noZeroes {
		n = ExportNameReplySize
	}
	_, err := c.netc.Write(b[:n])
	return err == nil, err
}

// choose fixes the export and the flags advertised for it.
func (c *serverConn) choose(x *serverExport) {
	c.export = x
	c.flags = c.exportFlags(x)
	c.statusOK = c.structured && c.metaSet && c.metaExport == x.Name
}

func (c *serverConn) exportFlags(x *serverExport) ExportFlags {
	f := x.flags
	if c.structured {
		f |= ExportSendDF // proto.md: MUST be clear without structured replies
	}
	return f
}

func (c *serverConn) optList(h OptionHeader, data []byte) error {
	if len(data) != 0 {
		return c.reply(h.Option, RepErrInvalid, "NBD_OPT_LIST takes no data")
	}
	var b []byte
	for _, name := range c.srv.names {
		x := c.srv.exports[name]
		b = AppendServerReply(b[:0], x.Name, x.Description)
		if err := c.replyData(h.Option, RepServer, b); err != nil {
			return err
		}
	}
	return c.reply(h.Option, RepAck, "")
}

func (c *serverConn) optStartTLS(h OptionHeader, data []byte) error {
	switch {
	case c.srv.TLSConfig == nil:
		return c.reply(h.Option, RepErrUnsup, "TLS is not configured")
	case c.tlsUp:
		return c.reply(h.Option, RepErrInvalid, "TLS is already up")
	case len(data) != 0:
		return c.reply(h.Option, RepErrInvalid, "NBD_OPT_STARTTLS takes no data")
	}
	if err := c.reply(h.Option, RepAck, ""); err != nil {
		return err
	}
	tc := tls.Server(c.netc, c.srv.TLSConfig)
	if err := tc.HandshakeContext(c.ctx); err != nil {
		return fmt.Errorf("nbd: TLS handshake: %w", err)
	}
	c.cmu.Lock()
	c.netc = tc
	c.cmu.Unlock()
	c.tlsUp = true
	if certs := tc.ConnectionState().PeerCertificates; len(certs) > 0 {
		c.log.Debug("nbd: TLS up with a client certificate", "subject", certs[0].Subject.String())
	}
	// proto.md: "the server MUST NOT preserve any negotiation state".
	c.structured, c.metaSet, c.metaExport = false, false, ""
	return nil
}

// checkClientAuth refuses a TLSConfig whose client certificate check
// could be bypassed or would trust the wrong CAs (see Server.TLSConfig).
func (s *Server) checkClientAuth() error {
	cfg := s.TLSConfig
	if cfg == nil || cfg.GetConfigForClient != nil {
		return nil
	}
	requires := cfg.ClientAuth == tls.RequireAnyClientCert || cfg.ClientAuth == tls.RequireAndVerifyClientCert
	if requires && !s.RequireTLS {
		return errors.New("nbd: Server.TLSConfig requires client certificates but RequireTLS is false: a client that skips STARTTLS would be served without one")
	}
	verifies := cfg.ClientAuth == tls.VerifyClientCertIfGiven || cfg.ClientAuth == tls.RequireAndVerifyClientCert
	if verifies && cfg.ClientCAs == nil {
		return errors.New("nbd: Server.TLSConfig verifies client certificates but has no ClientCAs: they would be checked against the system's roots")
	}
	return nil
}

func (c *serverConn) optInfo(h OptionHeader, data []byte) (bool, error) {
	req, err := ParseInfoRequest(data)
	if err != nil {
		return false, c.reply(h.Option, RepErrInvalid, "malformed info request")
	}
	x := c.srv.exports[req.Name]
	if x == nil {
		return false, c.reply(h.Option, RepErrUnknown, "no such export")
	}
	flags := c.exportFlags(x)
	b := AppendInfoExport(nil, x.size, flags)
	if err := c.replyData(h.Option, RepInfo, b); err != nil {
		return false, err
	}
	// Each info type is answered once however often it is asked for, so
	// an option's replies are bounded whatever its data: EXPORT, NAME,
	// DESCRIPTION, BLOCK_SIZE and ACK at most.
	var name, desc bool
	for _, t := range req.Requests {
		switch t {
		case InfoName:
			name = true
		case InfoDescription:
			desc = x.Description != ""
		}
		// proto.md: unknown requests MUST be ignored; EXPORT and
		// BLOCK_SIZE are sent anyway.
	}
	if name {
		b = AppendInfoString(b[:0], InfoName, x.Name)
		if err := c.replyData(h.Option, RepInfo, b); err != nil {
			return false, err
		}
	}
	if desc {
		b = AppendInfoString(b[:0], InfoDescription, x.Description)
		if err := c.replyData(h.Option, RepInfo, b); err != nil {
			return false, err
		}
	}
	// Always sent: the server enforces its maximum payload, which is not
	// the protocol's default of "unlimited".
	b = AppendInfoBlockSize(b[:0], x.minBlock, x.prefBlock, x.maxPayload)
	if err := c.replyData(h.Option, RepInfo, b); err != nil {
		return false, err
	}
	if err := c.reply(h.Option, RepAck, ""); err != nil {
		return false, err
	}
	if h.Option == OptGo {
		c.choose(x)
		return true, nil
	}
	return false, nil
}

func (c *serverConn) optMetaContext(h OptionHeader, data []byte) error {
	set := h.Option == OptSetMetaContext
	if set {
		// proto.md: SET replaces earlier selections, even when it fails.
		c.metaSet, c.metaExport = false, ""
	}
	if !c.structured {
		return c.reply(h.Option, RepErrInvalid, "structured replies not negotiated")
	}
	req, err := ParseMetaContextRequest(data)
	if err != nil {
		return c.reply(h.Option, RepErrInvalid, "malformed meta context request")
	}
	if c.srv.exports[req.Export] == nil {
		return c.reply(h.Option, RepErrUnknown, "no such export")
	}
	match := !set && len(req.Queries) == 0 // LIST with no query lists all
	for _, q := range req.Queries {
		ns, leaf, ok := strings.Cut(q, ":")
		if !ok || ns == "" {
			return c.reply(h.Option, RepErrInvalid, "meta context query without a namespace")
		}
		if ns != "base" {
			continue // proto.md: unknown namespaces MUST be ignored
		}
		// "base:" is a wildcard for LIST and selects nothing in SET.
		if leaf == "allocation" || (leaf == "" && !set) {
			match = true
		}
	}
	if match {
		var id uint32 // proto.md: LIST's ids are reserved, zero
		if set {
			id = serverMetaContextID
			c.metaSet, c.metaExport = true, req.Export
		}
		if err := c.replyData(h.Option, RepMetaContext, AppendMetaContextReply(nil, id, MetaContextBaseAllocation)); err != nil {
			return err
		}
	}
	return c.reply(h.Option, RepAck, "")
}
