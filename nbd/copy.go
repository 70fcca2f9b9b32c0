package nbd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
)

// Defaults of CopyOptions.
const (
	DefaultCopyRequestSize = 256 << 10 // bytes one read or write moves
	DefaultCopyRequests    = 16        // requests in flight
)

// copyZeroPiece bounds the range of one WriteZeroes of Copy, so large
// holes are zeroed by several workers at once and progress moves.
const copyZeroPiece = 1 << 30

// ErrCopySize is returned by Copy when the destination is smaller than
// the source.
var ErrCopySize = errors.New("nbd: copy destination smaller than its source")

// CopyOptions tune Copy. The zero value copies with DefaultCopyRequests
// requests of DefaultCopyRequestSize in flight, writes the source's zero
// extents with WriteZeroes, and does not flush.
type CopyOptions struct {
	// RequestSize is the most bytes one read or write moves (0:
	// DefaultCopyRequestSize). It is lowered to the maximum payload of
	// either end and to a multiple of their minimum blocks (BlockSizeOf).
	RequestSize int
	// Requests is how many requests are in flight at once, each in a
	// goroutine of its own with a buffer of RequestSize (0:
	// DefaultCopyRequests). A *Client spreads them over its connections
	// (WithConnections, when the server allows multi-conn).
	Requests int
	// DestinationIsZero says the destination already reads as zeroes (a
	// new sparse file, a new MemDisk): the source's zero extents are then
	// skipped. Otherwise they are written with WriteZeroes (a Zeroer
	// destination that supports it) or as buffers of zeroes.
	DestinationIsZero bool
	// NoExtents copies every byte as data, without asking the source for
	// its allocation. A source that is not a BlockStatuser (or a *Client
	// without base:allocation) is copied so anyway.
	NoExtents bool
	// Flush flushes the destination (a Flusher) once all is written.
	Flush bool
	// Progress, if not nil, is called with the totals so far after each
	// piece of the copy is done. Calls do not overlap and come from the
	// copying goroutines: it must be quick and must not call Copy.
	Progress func(CopyStats)
}

// CopyStats counts the bytes of a copy. Done is Data+Zeroed+Skipped.
type CopyStats struct {
	Size    int64 // bytes of the source, all to be copied
	Done    int64 // bytes of the source dealt with so far
	Data    int64 // bytes read and written
	Zeroed  int64 // bytes of zero extents written as zeroes
	Skipped int64 // bytes of zero extents skipped (DestinationIsZero)
}

// CopyError is the error of one request of Copy: which operation failed,
// where, and why (Err, also reached by errors.Is and errors.As).
type CopyError struct {
	Op     string // "read", "write", "write zeroes" or "flush"
	Offset int64
	Length int64
	Err    error
}

func (e *CopyError) Error() string {
	if e.Op == "flush" {
		return "nbd: copy: flush: " + e.Err.Error()
	}
	return fmt.Sprintf("nbd: copy: %s of %d bytes at %d: %v", e.Op, e.Length, e.Offset, e.Err)
}

func (e *CopyError) Unwrap() error { return e.Err }

// Copy copies the Size bytes of src to dst, from offset 0, and returns
// what it did. It keeps opts.Requests requests in flight, reads and
// writes at most opts.RequestSize bytes each, learns the source's zero
// extents with WalkExtents (a BlockStatuser source) and skips them or
// writes them with WriteZeroes (see CopyOptions), then flushes if asked.
// A *Client end is driven with its context-taking calls (Pread, Pwrite),
// so ctx cancels requests in flight; other backends are not interrupted
// but no new request starts once ctx ends.
//
// The first failure stops the copy: the others are cancelled and Copy
// returns a *CopyError naming the operation and the offset (or the
// walk's error, which names its offset too). The bytes of dst are then
// partly copied. src and dst must be safe for concurrent use, as every
// Backend is; Copy keeps nothing after it returns.
func Copy(ctx context.Context, dst, src Backend, opts CopyOptions) (CopyStats, error) {
	size := src.Size()
	c := &copier{dst: dst, src: src, opts: opts, stats: CopyStats{Size: size}}
	if ds := dst.Size(); ds < size {
		return c.stats, fmt.Errorf("%w: %d bytes to copy into %d", ErrCopySize, size, ds)
	}
	c.setup()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.cancel = cancel
	work := make(chan copyPiece, c.requests)
	var wg sync.WaitGroup
	for range c.requests {
		wg.Go(func() { c.worker(ctx, work) })
	}
	werr := c.produce(ctx, work)
	close(work)
	wg.Wait()
	if err := c.failure(); err != nil {
		return c.snapshot(), err
	}
	if werr != nil {
		return c.snapshot(), werr
	}
	if err := ctx.Err(); err != nil {
		return c.snapshot(), err
	}
	if f, ok := dst.(Flusher); ok && opts.Flush {
		if err := f.Flush(ctx); err != nil {
			return c.snapshot(), &CopyError{Op: "flush", Err: err}
		}
	}
	return c.snapshot(), nil
}

// copyPiece is one request of a copy: data to read and write, or zeroes.
type copyPiece struct {
	off, n int64
	zero   bool
}

type copier struct {
	dst, src Backend
	opts     CopyOptions
	zeroer   Zeroer // nil: write zero buffers
	align    int64  // the larger minimum block of the two ends
	reqSize  int64
	requests int
	zeroes   []byte // reqSize of zeroes, shared read-only
	zonce    sync.Once
	cancel   context.CancelFunc

	data, zeroed, skipped atomic.Int64

	mu    sync.Mutex // guards err and serializes Progress
	err   error
	stats CopyStats
}

// setup sizes the requests from both ends' block sizes and finds how to
// zero the destination.
func (c *copier) setup() {
	smin, _, smax := BlockSizeOf(c.src)
	dmin, _, dmax := BlockSizeOf(c.dst)
	c.align = int64(max(smin, dmin, 1))
	c.reqSize = int64(c.opts.RequestSize)
	if c.reqSize <= 0 {
		c.reqSize = DefaultCopyRequestSize
	}
	c.reqSize = min(c.reqSize, int64(smax), int64(dmax), copyZeroPiece)
	c.reqSize = max(c.reqSize/c.align*c.align, c.align)
	c.requests = c.opts.Requests
	if c.requests <= 0 {
		c.requests = DefaultCopyRequests
	}
	if z, ok := c.dst.(Zeroer); ok {
		c.zeroer = z
		if cl, ok := c.dst.(*Client); ok && !cl.Flags().Has(ExportSendWriteZeroes) {
			c.zeroer = nil
		}
	}
}

// extents reports whether the source's allocation is to be asked.
func (c *copier) extents() (BlockStatuser, bool) {
	b, ok := c.src.(BlockStatuser)
	if !ok || c.opts.NoExtents {
		return nil, false
	}
	if cl, ok := c.src.(*Client); ok && !cl.hasBase {
		return nil, false
	}
	return b, true
}

// fail records the first error and stops the copy.
func (c *copier) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
	c.cancel()
}

func (c *copier) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *copier) snapshot() CopyStats {
	s := c.stats
	s.Data, s.Zeroed, s.Skipped = c.data.Load(), c.zeroed.Load(), c.skipped.Load()
	s.Done = s.Data + s.Zeroed + s.Skipped
	return s
}

// done counts a finished piece and reports progress.
func (c *copier) done(p copyPiece, skipped bool) {
	switch {
	case skipped:
		c.skipped.Add(p.n)
	case p.zero:
		c.zeroed.Add(p.n)
	default:
		c.data.Add(p.n)
	}
	if c.opts.Progress != nil {
		c.mu.Lock()
		c.opts.Progress(c.snapshot())
		c.mu.Unlock()
	}
}

// worker serves pieces until work is closed; after a failure or the end
// of ctx it only drains.
func (c *copier) worker(ctx context.Context, work <-chan copyPiece) {
	var buf []byte
	for p := range work {
		if ctx.Err() != nil {
			continue
		}
		if !p.zero && buf == nil {
			buf = make([]byte, c.reqSize)
		}
		if err := c.do(ctx, p, buf); err != nil {
			c.fail(err)
			continue
		}
		c.done(p, false)
	}
}

func (c *copier) do(ctx context.Context, p copyPiece, buf []byte) error {
	if p.zero {
		return c.zero(ctx, p.off, p.n)
	}
	b := buf[:p.n]
	if err := copyRead(ctx, c.src, b, p.off); err != nil {
		return &CopyError{Op: "read", Offset: p.off, Length: p.n, Err: err}
	}
	if err := copyWrite(ctx, c.dst, b, p.off); err != nil {
		return &CopyError{Op: "write", Offset: p.off, Length: p.n, Err: err}
	}
	return nil
}

// zero writes zeroes over [off, off+n): WriteZeroes, or buffers of zeroes
// where the destination cannot (no Zeroer, or ENOTSUP).
func (c *copier) zero(ctx context.Context, off, n int64) error {
	if c.zeroer != nil {
		err := c.zeroer.WriteZeroes(ctx, off, n, 0)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.ENOTSUP) {
			return &CopyError{Op: "write zeroes", Offset: off, Length: n, Err: err}
		}
	}
	c.zonce.Do(func() { c.zeroes = make([]byte, c.reqSize) })
	for n > 0 {
		k := min(n, c.reqSize)
		if err := ctx.Err(); err != nil {
			return &CopyError{Op: "write", Offset: off, Length: k, Err: err}
		}
		if err := copyWrite(ctx, c.dst, c.zeroes[:k], off); err != nil {
			return &CopyError{Op: "write", Offset: off, Length: k, Err: err}
		}
		off += k
		n -= k
	}
	return nil
}

// copyRead fills p from b at off: with ctx on a *Client.
func copyRead(ctx context.Context, b Backend, p []byte, off int64) error {
	if cl, ok := b.(*Client); ok {
		return cl.Pread(ctx, p, off, 0)
	}
	n, err := b.ReadAt(p, off)
	if n == len(p) && err == io.EOF {
		err = nil
	}
	if err == nil && n < len(p) {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// copyWrite writes p to b at off: with ctx on a *Client.
func copyWrite(ctx context.Context, b Backend, p []byte, off int64) error {
	if cl, ok := b.(*Client); ok {
		return cl.Pwrite(ctx, p, off, 0)
	}
	n, err := b.WriteAt(p, off)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	return err
}
