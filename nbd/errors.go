package nbd

import (
	"errors"
	"strconv"
	"syscall"
)

// Errno is an error value carried on the wire in a reply (proto.md, "Error
// values"). Errors returned by the client for a server's error reply are of
// this type (or wrap it), and errors.Is(err, syscall.EIO) works for each of
// the values the protocol defines. A value the protocol does not define is
// kept as received but compares equal to EINVAL, as proto.md asks.
type Errno uint32

// The error values the protocol defines.
const (
	EPERM     Errno = 1
	EIO       Errno = 5
	ENOMEM    Errno = 12
	EINVAL    Errno = 22
	ENOSPC    Errno = 28
	EOVERFLOW Errno = 75
	ENOTSUP   Errno = 95
	ESHUTDOWN Errno = 108
)

// Known reports whether e is one of the values the protocol defines.
func (e Errno) Known() bool {
	switch e {
	case EPERM, EIO, ENOMEM, EINVAL, ENOSPC, EOVERFLOW, ENOTSUP, ESHUTDOWN:
		return true
	}
	return false
}

// Canonical returns e if it is Known, EINVAL otherwise.
func (e Errno) Canonical() Errno {
	if e.Known() {
		return e
	}
	return EINVAL
}

// Syscall returns the syscall.Errno of e's canonical value.
func (e Errno) Syscall() syscall.Errno { return syscall.Errno(e.Canonical()) }

func (e Errno) Error() string {
	s := "nbd: server error " + strconv.FormatUint(uint64(e), 10)
	if !e.Known() {
		return s + " (unknown, treated as EINVAL)"
	}
	return s + " (" + e.Syscall().Error() + ")"
}

// Is makes errors.Is(err, syscall.EIO) true for an Errno of EIO, and so on
// for every value; an unknown value matches syscall.EINVAL.
func (e Errno) Is(target error) bool {
	switch t := target.(type) {
	case syscall.Errno:
		return t == e.Syscall()
	case Errno:
		return t.Canonical() == e.Canonical()
	}
	return false
}

// ErrnoOf chooses the wire error value for err, as a server answers a
// failed request: an Errno as itself, a syscall.Errno the protocol knows as
// that value (EOPNOTSUPP as ENOTSUP, EDQUOT and EFBIG as ENOSPC, EROFS and
// EACCES as EPERM), anything else as EIO. ErrnoOf(nil) is 0.
func ErrnoOf(err error) Errno {
	if err == nil {
		return 0
	}
	var e Errno
	if errors.As(err, &e) {
		return e.Canonical()
	}
	var se syscall.Errno
	if errors.As(err, &se) {
		switch se {
		case syscall.EPERM, syscall.EROFS, syscall.EACCES:
			return EPERM
		case syscall.EIO:
			return EIO
		case syscall.ENOMEM:
			return ENOMEM
		case syscall.EINVAL:
			return EINVAL
		case syscall.ENOSPC, syscall.EDQUOT, syscall.EFBIG:
			return ENOSPC
		case syscall.EOVERFLOW:
			return EOVERFLOW
		case syscall.ENOTSUP:
			return ENOTSUP
		case syscall.ESHUTDOWN:
			return ESHUTDOWN
		}
	}
	return EIO
}

// OptionError is a fixed-newstyle option error reply (a reply type with
// bit 31 set). Message is the server's optional UTF-8 text.
type OptionError struct {
	Option  OptionCode
	Reply   OptionReplyType
	Message string
}

func (e *OptionError) Error() string {
	s := "nbd: option " + e.Option.String() + " failed: " + e.Reply.String()
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Is makes errors.Is(err, ErrUnsupported) and its siblings work on an
// option error of the matching reply type.
func (e *OptionError) Is(target error) bool {
	s, ok := optionErrorSentinels[e.Reply]
	return ok && target == s
}

// Sentinels matched by OptionError.Is, one per option error reply type.
var (
	ErrOptUnsupported    = errors.New("nbd: option not supported by the server (ERR_UNSUP)")
	ErrOptPolicy         = errors.New("nbd: option forbidden by server policy (ERR_POLICY)")
	ErrOptInvalid        = errors.New("nbd: option syntactically or semantically invalid (ERR_INVALID)")
	ErrOptPlatform       = errors.New("nbd: option not supported on the server's platform (ERR_PLATFORM)")
	ErrOptTLSRequired    = errors.New("nbd: server requires TLS first (ERR_TLS_REQD)")
	ErrOptUnknownExport  = errors.New("nbd: export not available (ERR_UNKNOWN)")
	ErrOptShutdown       = errors.New("nbd: server is shutting down (ERR_SHUTDOWN)")
	ErrOptBlockSizeReqd  = errors.New("nbd: server requires block size negotiation (ERR_BLOCK_SIZE_REQD)")
	ErrOptTooBig         = errors.New("nbd: option request too big (ERR_TOO_BIG)")
	ErrOptExtHeadersReqd = errors.New("nbd: server requires extended headers (ERR_EXT_HEADER_REQD)")
)

var optionErrorSentinels = map[OptionReplyType]error{
	RepErrUnsup: ErrOptUnsupported, RepErrPolicy: ErrOptPolicy, RepErrInvalid: ErrOptInvalid,
	RepErrPlatform: ErrOptPlatform, RepErrTLSReqd: ErrOptTLSRequired, RepErrUnknown: ErrOptUnknownExport,
	RepErrShutdown: ErrOptShutdown, RepErrBlockSizeReqd: ErrOptBlockSizeReqd, RepErrTooBig: ErrOptTooBig,
	RepErrExtHeaderReqd: ErrOptExtHeadersReqd,
}

// ProtocolError reports a peer that broke the protocol: bad magic, a length
// out of bounds, a chunk that cannot be, and so on. The connection that
// carried it is not usable afterwards.
type ProtocolError struct {
	Msg string
}

func (e *ProtocolError) Error() string { return "nbd: protocol error: " + e.Msg }

// Is makes errors.Is(err, ErrProtocol) true for every ProtocolError.
func (e *ProtocolError) Is(target error) bool { return target == ErrProtocol }

// ErrProtocol matches every *ProtocolError with errors.Is.
var ErrProtocol = errors.New("nbd: protocol error")

// Errors the client returns for requests it refuses or cannot complete
// locally. Each is a sentinel for errors.Is; the returned error usually wraps
// it with details.
var (
	// ErrClosed is returned by calls on a Client after Close.
	ErrClosed = errors.New("nbd: client closed")
	// ErrNotAdvertised is returned for a command or flag the server did
	// not advertise; the request is never sent (proto.md: a client MUST NOT
	// use a feature whose flag is clear).
	ErrNotAdvertised = errors.New("nbd: feature not advertised by the server")
	// ErrReadOnly is returned for a write, trim or zeroing of a read-only
	// export. It also matches syscall.EPERM with errors.Is.
	ErrReadOnly error = readOnlyError{}
	// ErrOutOfRange is returned for a request past the end of the export.
	ErrOutOfRange = errors.New("nbd: request past the end of the export")
	// ErrUnaligned is returned for a request that breaks the server's
	// advertised minimum block size.
	ErrUnaligned = errors.New("nbd: request not aligned to the server's minimum block size")
	// ErrTooLarge is returned by StartRead and StartWrite for a buffer
	// longer than the server's maximum payload (Client.BlockSize): a
	// started call is one request. Pread and Pwrite split such buffers.
	ErrTooLarge = errors.New("nbd: request longer than the maximum payload")
	// ErrTLSUnavailable is returned when TLS is required (an nbds URI or
	// WithTLS) but the server cannot provide it; the client never falls
	// back to plaintext.
	ErrTLSUnavailable = errors.New("nbd: TLS required but not available from the server")
	// ErrInvalidFlag is returned for a command flag that the command does
	// not take (proto.md lists the flags of each command, e.g. FUA is not
	// a READ's); the request is never sent. It also matches
	// syscall.EINVAL, what a server would answer.
	ErrInvalidFlag = errors.New("nbd: command flag not valid for the command")
	// ErrNegotiation is returned by a Negotiator call made out of place:
	// after Go, Abort, Close or a failure ended the negotiation, or
	// StartTLS with TLS already on. Nothing is sent.
	ErrNegotiation = errors.New("nbd: Negotiator call out of place")
)

type readOnlyError struct{}

func (readOnlyError) Error() string        { return "nbd: export is read-only" }
func (readOnlyError) Is(target error) bool { return target == syscall.EPERM }
