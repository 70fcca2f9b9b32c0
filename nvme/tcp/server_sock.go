package tcp

import (
	"io"
	"net"
	"syscall"
)

// sockReader is the connection as the server's pduReader sees it. On a
// socket it reads with read(2) through the descriptor's RawConn, so it
// learns when the next read would block: then, if the reader holds the
// pen, it returns from the descriptor's read lock, writes the held
// completions and tries again before it parks on the network poller
// (the host has nothing more to send before it gets them). Without a
// descriptor (net.Pipe, a wrapped connection) it reads the connection,
// and the reader puts the pen down before a PDU it has not buffered whole
// (conn.loop). nbd's server reads its sockets the same way
// (nbd/server_request.go, serverSockReader).
//
// A direct read (conn.readPayload) also reads what follows the payload,
// up to fillAfterDirect bytes (its digest, the next command's header),
// into ahead in the same readv(2), as the host does (host_read.go), so
// that at depth a command with data costs one system call; and the first
// read after it is cut to fillAfterDirect bytes, so that the data behind
// the next header is not pulled into the pduReader's buffer (and copied
// out again) with it.
type sockReader struct {
	c     *conn
	nc    net.Conn
	rc    syscall.RawConn       // nil without a descriptor
	try   func(fd uintptr) bool // read, bound once
	limit int

	ahead []byte // read by a direct read beyond its payload, not yet Read
	abuf  [fillAfterDirect]byte

	p, q    []byte   // the raw call's destinations: q after p, by readv
	v       [][]byte // or these, by readv (readPieces)
	n       int
	err     error
	blocked bool
	rest    bool // reading the rest of a payload: retry before parking
	retries int
}

// payloadRetries is how many times a read of the rest of a large payload
// tries again at once when it finds nothing, before it parks: the host is
// in the middle of sending it, and parking costs two thread wake-ups
// where a few read(2)s cost less (nbd's server does the same, measured by
// its BenchmarkServerWrite64KQD8).
const payloadRetries = 5

func newSockReader(c *conn) *sockReader {
	s := &sockReader{c: c, nc: c.nc}
	if sc, ok := c.nc.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			s.rc = rc
			s.try = s.read
		}
	}
	return s
}

func (s *sockReader) Read(b []byte) (int, error) {
	if len(s.ahead) > 0 {
		n := copy(b, s.ahead)
		s.ahead = s.ahead[n:]
		return n, nil // the limit waits for the next read of the socket
	}
	if s.limit > 0 && len(b) > s.limit {
		b = b[:s.limit]
	}
	s.limit = 0
	return s.readSock(b)
}

// directReader reads the rest of a payload from the socket through a
// sockReader: without the limit, retrying before it parks, and on a
// socket into ahead too once the payload is whole.
type directReader sockReader

func (d *directReader) Read(b []byte) (int, error) {
	s := (*sockReader)(d)
	if len(s.ahead) > 0 {
		return s.Read(b)
	}
	s.rest = true
	if s.rc != nil {
		s.q = s.abuf[:]
	}
	n, err := s.readSock(b)
	s.rest, s.q = false, nil
	if n > len(b) {
		s.ahead = s.abuf[:n-len(b)]
		n = len(b)
	}
	return n, err
}

// readPieces reads the rest of a payload straight into pieces, and what
// follows it into ahead, in one readv, as Read does into one buffer; it
// returns the bytes that landed in pieces. The socket has a descriptor,
// nothing is ahead, and pieces has room for one more piece (which it
// uses: the caller clears it).
func (d *directReader) readPieces(pieces [][]byte) (int, error) {
	s := (*sockReader)(d)
	want := 0
	for _, p := range pieces {
		want += len(p)
	}
	s.rest, s.v = true, append(pieces, s.abuf[:])
	n, err := s.readSock(nil)
	s.rest, s.v = false, nil
	if n > want {
		s.ahead = s.abuf[:n-want]
		n = want
	}
	return n, err
}

func (s *sockReader) readSock(b []byte) (int, error) {
	if s.rc == nil {
		return s.nc.Read(b)
	}
	if len(b) == 0 && s.v == nil {
		return 0, nil
	}
	s.p = b
	for {
		s.n, s.err, s.blocked = 0, nil, false
		if err := s.rc.Read(s.try); err != nil {
			s.p = nil
			return 0, err // closed, or past the read deadline
		}
		if !s.blocked {
			s.p = nil
			return s.n, s.err
		}
		if err := s.c.release(); err != nil {
			s.p = nil
			return 0, err
		}
	}
}

// read is the RawConn's read function: done unless the socket is empty
// and no completion is held.
func (s *sockReader) read(fd uintptr) bool {
	for {
		var n int
		var err error
		if s.v != nil {
			n, err = rawReadvPieces(fd, s.v)
		} else if s.q != nil {
			n, err = rawReadv(fd, s.p, s.q)
		} else {
			n, err = rawRead(fd, s.p)
		}
		switch err {
		case nil:
			s.n = n
			if n == 0 {
				s.err = io.EOF
			}
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			if s.rest && s.retries < payloadRetries {
				s.retries++
				continue
			}
			if s.c.holding {
				s.blocked = true
				return true
			}
			return false // park until readable
		}
		s.err = err
		return true
	}
}
