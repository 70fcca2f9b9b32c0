package zerocopy

import (
	"io"
	"net"
	"syscall"
)

// Batch writes the bytes of several messages to one destination together,
// each message whole and in order: on a socket with one writev(2) (more
// only when the batch has more than 1024 fragments or the socket takes
// part of it), on any other writer (a TLS connection, net.Pipe) with one
// Write of a flattened copy. So every message leaves in one piece, and the
// messages finished at the same time share a system call.
//
// On Linux, a destination that implements syscall.Conn (*net.TCPConn,
// *net.UnixConn) is written with raw writev(2) calls on its non-blocking
// descriptor through its RawConn: the network poller still parks the
// goroutine while the socket is full, but the runtime's system call
// bookkeeping is skipped (see batch_linux.go for why that matters to a
// server that waits for its client between requests). A wrapper that
// changes the bytes must therefore not expose SyscallConn.
//
// Add records views of a message's bytes; it does not take the message,
// whose bytes must not change until Write returns; the caller releases or
// reuses the messages afterwards. A Batch is not safe for concurrent use.
// In steady state Add and Write allocate nothing.
type Batch struct {
	w    io.Writer
	raw  *rawWriter // Linux, w a syscall.Conn: raw writev
	sock bool       // w a syscall.Conn: net.Buffers writes it with writev
	vec  [][]byte
	n    int
	nb   net.Buffers // vec, as WriteTo consumes it; kept here so it does not escape
	flat []byte      // a flattened batch, for a writer without writev
	acct *Accounting
}

// NewBatch returns an empty batch that writes to w.
func NewBatch(w io.Writer) *Batch {
	b := &Batch{w: w}
	if sc, ok := w.(syscall.Conn); ok {
		b.sock = true
		if rc, err := sc.SyscallConn(); err == nil {
			b.raw = newRawWriter(rc)
		}
	}
	return b
}

// SetAccounting makes the batch record the bytes it writes (crossings) and
// flattens (copies) into a; nil turns it off.
func (b *Batch) SetAccounting(a *Accounting) { b.acct = a }

// SetSplice makes Write move a batch of at least min bytes into the
// destination without copying it, where it can: on Linux, to a socket (any
// descriptor that splice(2) writes), the batch's pages are handed to the
// kernel through a pipe (vmsplice(2), then splice(2)) instead of being
// copied by writev(2). Elsewhere, and when the kernel refuses (the
// batch then goes out by writev, and so do later ones), it changes
// nothing. min <= 0 turns it off and closes the pipe.
//
// The price is a longer retention: the destination's buffers then point at
// the batch's memory after Write has returned, until the receiver has
// consumed those bytes (a peer on this machine: has read them; a remote
// one: has acknowledged them). So the bytes must not change, nor their
// memory be reused, until the caller knows the receiver has them, such as
// by a reply the receiver sends only after reading them. A protocol whose
// reply follows the request's payload (NBD's WRITE, NVMe/TCP's in-capsule
// data) gives that for requests that complete; a request abandoned before
// its reply leaves its buffer to the receiver until the connection is
// gone at both ends. Only bytes in the Go heap may be spliced: a buffer on
// a goroutine's stack can move.
func (b *Batch) SetSplice(min int) {
	if b.raw != nil {
		b.raw.setSplice(min)
	}
}

// SpliceMin is a threshold for SetSplice that suits most protocols: below
// it a copy by writev costs less than splicing's two system calls and its
// pinning of pages (BenchmarkBatchSplice). Package nbd's client and
// nvme/tcp's host use it.
const SpliceMin = 32 << 10

// Spliced returns the bytes Write has moved into the destination by
// splice(2) (SetSplice); 0 where it never could.
func (b *Batch) Spliced() int64 {
	if b.raw == nil {
		return 0
	}
	return b.raw.splicedBytes()
}

// Add appends the bytes of m to the batch, after those added before.
func (b *Batch) Add(m *Message) {
	b.vec = m.Buffers(b.vec)
	b.n += m.Len()
}

// AddBytes appends p to the batch as one piece, after what was added
// before. Like Add it records a view: p must not change until Write
// returns.
func (b *Batch) AddBytes(p []byte) {
	if len(p) > 0 {
		b.vec = append(b.vec, p)
		b.n += len(p)
	}
}

// AddPrefix appends the first n bytes of views to the batch, piece by
// piece as AddBytes does (all of them if they hold fewer), and returns the
// views left: a piece cut at n is cut in place (the returned first view
// is its rest, in views' own backing array). It lets a long message go out
// in windows of n bytes, each its own Write (under a deadline of its
// own, say).
func (b *Batch) AddPrefix(views [][]byte, n int) [][]byte {
	for n > 0 && len(views) > 0 {
		p := views[0]
		if len(p) > n {
			b.AddBytes(p[:n])
			views[0] = p[n:]
			return views
		}
		b.AddBytes(p)
		n -= len(p)
		views = views[1:]
	}
	return views
}

// Len returns the number of bytes in the batch.
func (b *Batch) Len() int { return b.n }

// Write writes the whole batch and empties it, also on error (the
// destination is then unusable: how much of the batch it took is unknown).
// It returns the bytes written.
func (b *Batch) Write() (int64, error) {
	defer b.reset()
	switch {
	case b.n == 0:
		return 0, nil
	case b.raw != nil && b.raw.splices(b.n):
		n, spliced, err := b.raw.splicev(b.vec)
		if !spliced {
			b.acct.AddCrossing(n)
		}
		return n, err
	case b.raw != nil:
		n, err := b.raw.writev(b.vec)
		b.acct.AddCrossing(n)
		return n, err
	case len(b.vec) == 1:
		k, err := b.w.Write(b.vec[0])
		if err == nil && k < len(b.vec[0]) {
			err = io.ErrShortWrite
		}
		b.acct.AddCrossing(int64(k))
		return int64(k), err
	case b.sock:
		b.nb = b.vec
		n, err := b.nb.WriteTo(b.w)
		b.nb = nil
		if err == nil && n < int64(b.n) { // a writer breaking io.Writer's contract
			err = io.ErrShortWrite
		}
		b.acct.AddCrossing(n)
		return n, err
	}
	flat := b.flat[:0]
	for _, p := range b.vec {
		flat = append(flat, p...)
	}
	b.flat = flat
	b.acct.AddCopy(int64(len(flat)))
	k, err := b.w.Write(flat)
	if err == nil && k < len(flat) {
		err = io.ErrShortWrite
	}
	b.acct.AddCrossing(int64(k))
	return int64(k), err
}

// reset forgets the batch, keeping no view of any message alive.
func (b *Batch) reset() {
	clear(b.vec)
	b.vec = b.vec[:0]
	b.n = 0
}
