package fifo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nhdkit/nhd/internal/spin"
)

// DefaultBlockSize is the block size New uses when Config.BlockSize is 0: one
// ATA sector.
const DefaultBlockSize = 512

// DefaultBlocks is the capacity New uses when Config.Blocks is 0.
const DefaultBlocks = 1024

// Errors returned by the FIFO. A consumer that has drained a FIFO closed with
// Close gets io.EOF, the clean end of the stream.
var (
	// ErrConfig reports an invalid Config; the error returned by New wraps it
	// with the offending field.
	ErrConfig = errors.New("fifo: invalid configuration")
	// ErrClosed is returned to the producer by Reserve and Commit after Close.
	ErrClosed = errors.New("fifo: closed")
	// ErrFull is returned by TryReserve and TryReserveN when no block is free.
	ErrFull = errors.New("fifo: full")
	// ErrEmpty is returned by TryPeek and TryPeekN when no block is committed.
	ErrEmpty = errors.New("fifo: empty")
	// ErrOverCommit is returned by Commit for more blocks than the last
	// reservation left outstanding.
	ErrOverCommit = errors.New("fifo: commit of more blocks than reserved")
	// ErrOverRelease is returned by Release for more blocks than the last
	// peek left outstanding.
	ErrOverRelease = errors.New("fifo: release of more blocks than peeked")
	// ErrCount is returned for a block count below 1 (or below 0 for Commit
	// and Release).
	ErrCount = errors.New("fifo: invalid block count")
)

// Mark names a watermark, the software form of the FIFO's interrupt.
type Mark uint8

const (
	// MarkLow: a release lowered the fill level from above Config.Low to at
	// most Config.Low (the FIFO wants data).
	MarkLow Mark = iota + 1
	// MarkHigh: a commit raised the fill level from below Config.High to at
	// least Config.High (the FIFO wants draining).
	MarkHigh
)

// String returns "low" or "high".
func (m Mark) String() string {
	switch m {
	case MarkLow:
		return "low"
	case MarkHigh:
		return "high"
	}
	return fmt.Sprintf("Mark(%d)", uint8(m))
}

// Config sets the shape of a FIFO.
type Config struct {
	// Blocks is the capacity in blocks; 0 means DefaultBlocks.
	Blocks int
	// BlockSize is the size of one block in bytes; 0 means DefaultBlockSize.
	BlockSize int
	// Notify, if not nil, turns on the watermarks, a pair of marks with
	// hysteresis as in flow control: Notify(MarkHigh) when a commit brings
	// the fill level to High or above, then nothing more until a release
	// brings it to Low or below, which calls Notify(MarkLow), and so on:
	// the marks alternate, starting with MarkHigh (a new FIFO is empty,
	// below its low mark). Notify runs synchronously on the goroutine of
	// the Commit or Release that crossed the mark, after the blocks are
	// published; it must be quick and must not call the FIFO's blocking
	// methods. ChanNotify adapts a channel. Watermarks cost one atomic
	// compare-and-swap per Commit and Release; without Notify they cost
	// nothing.
	Notify func(Mark)
	// Low and High are the watermarks in blocks, 0 <= Low < High <= Blocks.
	// They are ignored when Notify is nil.
	Low, High int
	// Spin is how long a blocked call keeps re-checking the other side,
	// yielding the processor, before it parks its goroutine: 0 means
	// DefaultSpin, a negative value parks after a few checks. Spinning
	// trades CPU time for latency: waking a parked goroutine costs
	// microseconds.
	Spin time.Duration
}

// ChanNotify returns a Notify function that sends each mark on ch without
// blocking: a mark is dropped when ch is full, as a level-triggered reader
// that re-reads the fill level (Len) expects.
func ChanNotify(ch chan<- Mark) func(Mark) {
	return func(m Mark) {
		select {
		case ch <- m:
		default:
		}
	}
}

// Stats are the FIFO's counters since New or the last Reset.
type Stats struct {
	Committed uint64 // blocks committed by the producer
	Released  uint64 // blocks released by the consumer
	// CommittedBytes and ReleasedBytes are the block counts times the
	// block size.
	CommittedBytes, ReleasedBytes uint64
	// FullStalls counts producer calls that found too few free blocks
	// (a blocking call that had to wait, or a Try call that got ErrFull).
	FullStalls uint64
	// EmptyStalls counts consumer calls that found too few committed
	// blocks (a blocking call that had to wait, or a Try call that got
	// ErrEmpty).
	EmptyStalls uint64
	// Highs and Lows count the watermark notifications.
	Highs, Lows uint64
}

// DefaultSpin is how long a blocked call spins (re-checking the other
// side, yielding the processor) before it parks, when Config.Spin is 0:
// about what parking and waking a goroutine costs, so a wait costs at most
// about twice the best choice. Longer spins pay on idle cores and hurt on a
// machine whose cores are busy with other work. BenchmarkHandoff measures
// the choices.
const DefaultSpin = spin.FIFO

type pad [64]byte

// producer holds the state only the producer touches.
type producer struct {
	tail      uint64 // blocks committed (private copy of FIFO.tail)
	headCache uint64 // last head seen
	idx       int    // slot of tail
	reserved  int    // blocks of the last reservation not yet committed
	ahead     int    // how far ahead of idx Commit takes a slot's first line (0: not at all)
	stalls    atomic.Uint64
	highs     atomic.Uint64
}

// consumer holds the state only the consumer touches.
type consumer struct {
	head      uint64 // blocks released (private copy of FIFO.head)
	tailCache uint64 // last tail seen
	idx       int    // slot of head
	peeked    int    // blocks of the last peek not yet released
	stalls    atomic.Uint64
	lows      atomic.Uint64
}

// FIFO is a bounded ring of fixed-size blocks between one producer and one
// consumer. The ring owns the memory: the producer reserves free blocks and
// writes them in place, then commits them; the consumer peeks committed
// blocks in place, then releases them. No call allocates.
//
// Concurrency: one goroutine at a time may act as the producer (Reserve*,
// TryReserve*, Commit) and one as the consumer (Peek*, TryPeek*, Release);
// the two run concurrently. Close, CloseWithError, Len, Cap, BlockSize and
// Stats are safe from any goroutine. Reset needs both sides idle.
type FIFO struct {
	buf    []byte
	bs     int
	blocks int
	cap    uint64
	notify func(Mark)
	spin   time.Duration
	low    int64
	high   int64

	_    pad
	tail atomic.Uint64 // blocks committed, written by the producer
	_    pad
	head atomic.Uint64 // blocks released, written by the consumer
	_    pad
	// room parks the producer until the head reaches what it waits for.
	// The consumer reads it on every release, so it has a line of its own
	// that stays shared in both caches.
	room spin.Gate
	_    pad
	data spin.Gate // parks the consumer until the tail reaches its target
	_    pad
	p    producer
	_    pad
	c    consumer
	_    pad
	// level is the fill level for the watermarks shifted left by one, with
	// the mark side in bit 0 (1: above the high mark, waiting for low).
	level atomic.Int64
	_     pad

	closed   atomic.Bool
	closeMu  sync.Mutex
	closeErr error // set once, before closed
}

// New returns an empty FIFO shaped by c.
func New(c Config) (*FIFO, error) {
	if c.Blocks == 0 {
		c.Blocks = DefaultBlocks
	}
	if c.BlockSize == 0 {
		c.BlockSize = DefaultBlockSize
	}
	if c.Spin == 0 {
		c.Spin = DefaultSpin
	}
	if c.Blocks < 0 {
		return nil, fmt.Errorf("%w: Blocks %d < 0", ErrConfig, c.Blocks)
	}
	if c.BlockSize < 0 {
		return nil, fmt.Errorf("%w: BlockSize %d < 0", ErrConfig, c.BlockSize)
	}
	if uint64(c.Blocks)*uint64(c.BlockSize) > 1<<40 {
		return nil, fmt.Errorf("%w: %d blocks of %d bytes is too large", ErrConfig, c.Blocks, c.BlockSize)
	}
	if c.Notify != nil && (c.Low < 0 || c.Low >= c.High || c.High > c.Blocks) {
		return nil, fmt.Errorf("%w: watermarks need 0 <= Low < High <= Blocks, have Low %d, High %d, Blocks %d",
			ErrConfig, c.Low, c.High, c.Blocks)
	}
	f := &FIFO{
		buf:    make([]byte, c.Blocks*c.BlockSize),
		bs:     c.BlockSize,
		blocks: c.Blocks,
		cap:    uint64(c.Blocks),
		notify: c.Notify,
		spin:   c.Spin,
		low:    int64(c.Low),
		high:   int64(c.High),
		room:   spin.NewPublishGate(),
		data:   spin.NewPublishGate(),
	}
	if a := max(prefetchAhead/c.BlockSize, 1); 2*a < c.Blocks {
		f.p.ahead = a
	}
	return f, nil
}

// Cap returns the capacity in blocks.
func (f *FIFO) Cap() int { return f.blocks }

// BlockSize returns the size of a block in bytes.
func (f *FIFO) BlockSize() int { return f.bs }

// Len returns the number of committed blocks not yet released. Called from a
// third goroutine the value is a snapshot that may be stale at once.
func (f *FIFO) Len() int {
	h := f.head.Load()
	return int(f.tail.Load() - h)
}

// Stats returns the counters.
func (f *FIFO) Stats() Stats {
	t, h := f.tail.Load(), f.head.Load()
	bs := uint64(f.bs)
	return Stats{
		Committed:      t,
		Released:       h,
		CommittedBytes: t * bs,
		ReleasedBytes:  h * bs,
		FullStalls:     f.p.stalls.Load(),
		EmptyStalls:    f.c.stalls.Load(),
		Highs:          f.p.highs.Load(),
		Lows:           f.c.lows.Load(),
	}
}

// Reset empties and reopens the FIFO and zeroes its counters, keeping its
// memory (the bytes of the blocks are left as they are). Neither side may be
// in a call, and no watermark callback may be running.
func (f *FIFO) Reset() {
	f.tail.Store(0)
	f.head.Store(0)
	f.room.Reset()
	f.data.Reset()
	f.level.Store(0)
	f.p.tail, f.p.headCache, f.p.idx, f.p.reserved = 0, 0, 0, 0
	f.p.stalls.Store(0)
	f.p.highs.Store(0)
	f.c.head, f.c.tailCache, f.c.idx, f.c.peeked = 0, 0, 0, 0
	f.c.stalls.Store(0)
	f.c.lows.Store(0)
	f.closeMu.Lock()
	f.closeErr = nil
	f.closed.Store(false)
	f.closeMu.Unlock()
}

// Close closes the FIFO: the producer's Reserve and Commit fail with
// ErrClosed from now on, and the consumer gets the blocks committed before
// Close, then io.EOF. Closing twice is harmless; the first close wins. A
// producer closes after its last Commit; a consumer that closes abandons the
// stream (blocks committed concurrently with its Close may never be seen).
func (f *FIFO) Close() { f.CloseWithError(nil) }

// CloseWithError closes the FIFO like Close, but the consumer gets err
// instead of io.EOF once it has drained the committed blocks, and the
// producer gets err instead of ErrClosed. A nil err is Close.
func (f *FIFO) CloseWithError(err error) {
	f.closeMu.Lock()
	if f.closed.Load() {
		f.closeMu.Unlock()
		return
	}
	f.closeErr = err
	f.closed.Store(true)
	f.closeMu.Unlock()
	f.room.Kick()
	f.data.Kick()
}

// producerErr is the error for the producer once closed.
func (f *FIFO) producerErr() error {
	if f.closeErr != nil {
		return f.closeErr
	}
	return ErrClosed
}

// consumerErr is the error for the consumer once closed and drained.
func (f *FIFO) consumerErr() error {
	if f.closeErr != nil {
		return f.closeErr
	}
	return io.EOF
}

func (f *FIFO) slots(idx, n int) []byte {
	lo, hi := idx*f.bs, (idx+n)*f.bs
	return f.buf[lo:hi:hi]
}

// Reserve waits for one free block and returns it for the producer to fill;
// it is ReserveN(ctx, 1), with a shorter fast path.
func (f *FIFO) Reserve(ctx context.Context) ([]byte, error) {
	if f.p.tail-f.p.headCache < f.cap && !f.closed.Load() {
		f.p.reserved = 1
		lo := f.p.idx * f.bs
		return f.buf[lo : lo+f.bs : lo+f.bs], nil
	}
	return f.ReserveN(ctx, 1)
}

// ReserveN waits until k = min(n, blocks from the producer's position to the
// end of the ring) blocks are free and returns them as one contiguous slice
// of k*BlockSize bytes, for the producer to fill in place and Commit. A ring
// whose capacity is a multiple of n always gives exactly n. The slice stays
// the producer's until Commit; a second reservation before Commit replaces
// the first (it starts at the same block). The context is consulted only
// when the call has to wait; its error is returned as is. After Close
// ReserveN returns ErrClosed (or the CloseWithError error).
func (f *FIFO) ReserveN(ctx context.Context, n int) ([]byte, error) {
	if n < 1 {
		return nil, ErrCount
	}
	if f.closed.Load() {
		return nil, f.producerErr()
	}
	k := f.blocks - f.p.idx
	if n < k {
		k = n
	}
	need := uint64(k)
	if f.cap-(f.p.tail-f.p.headCache) < need {
		f.p.headCache = f.head.Load()
		if f.cap-(f.p.tail-f.p.headCache) < need {
			if err := f.waitRoom(ctx, need); err != nil {
				return nil, err
			}
		}
	}
	f.p.reserved = k
	return f.slots(f.p.idx, k), nil
}

// TryReserve is the non-blocking Reserve: ErrFull when no block is free.
func (f *FIFO) TryReserve() ([]byte, error) { return f.TryReserveN(1) }

// TryReserveN reserves as many free contiguous blocks as there are, up to
// n, without waiting: ErrFull when none is free, ErrClosed after Close.
func (f *FIFO) TryReserveN(n int) ([]byte, error) {
	if n < 1 {
		return nil, ErrCount
	}
	if f.closed.Load() {
		return nil, f.producerErr()
	}
	free := f.cap - (f.p.tail - f.p.headCache)
	if free < uint64(n) {
		f.p.headCache = f.head.Load()
		free = f.cap - (f.p.tail - f.p.headCache)
		if free == 0 {
			f.p.stalls.Add(1)
			return nil, ErrFull
		}
	}
	k := f.blocks - f.p.idx
	if n < k {
		k = n
	}
	if uint64(k) > free {
		k = int(free)
	}
	f.p.reserved = k
	return f.slots(f.p.idx, k), nil
}

// waitRoom waits until need blocks are free at the producer's position.
func (f *FIFO) waitRoom(ctx context.Context, need uint64) error {
	f.p.stalls.Add(1)
	target := f.p.tail + need - f.cap // the head that frees need blocks
	sp := spin.NewPacer(f.spin)
	ready := func() bool { return f.head.Load() >= target || f.closed.Load() }
	for {
		f.p.headCache = f.head.Load()
		if f.p.headCache >= target {
			return nil
		}
		if f.closed.Load() {
			return f.producerErr()
		}
		if sp.More() {
			continue
		}
		if !f.room.Park(target, ready, ctx.Done()) {
			return ctx.Err()
		}
		sp.Reset()
	}
}

// Commit publishes the first n blocks of the last reservation to the
// consumer, in order; the rest of the reservation stays reserved and can be
// committed later. Commit(0) does nothing. It fails with ErrOverCommit
// beyond the reservation and with ErrClosed after Close (the blocks are then
// not published).
func (f *FIFO) Commit(n int) error {
	if n < 0 {
		return ErrCount
	}
	if n > f.p.reserved {
		return ErrOverCommit
	}
	if n == 0 {
		return nil
	}
	if f.closed.Load() {
		return f.producerErr()
	}
	f.p.reserved -= n
	fire := f.notify != nil && f.moveLevel(int64(n))
	f.p.tail += uint64(n)
	f.p.idx += n
	if f.p.idx == f.blocks {
		f.p.idx = 0
	}
	f.prefetch()
	spin.Publish(&f.tail, f.p.tail)
	f.data.Wake(f.p.tail)
	if fire {
		f.p.highs.Add(1)
		f.notify(MarkHigh)
	}
	return nil
}

// prefetchAhead is how many bytes ahead of its position the producer
// takes the first cache line of the slot it will fill then (prefetch): far
// enough for a cross-core round trip to end before the producer gets
// there, near enough to stay in its cache. BenchmarkHandoff measures it.
const prefetchAhead = 16 << 10

// prefetch takes the first cache line of the slot f.p.ahead blocks past the
// producer's position for writing, if the consumer is known to be done
// with it (by the head the producer last read). The consumer read that
// slot a lap ago, so the line is in its cache; taking it now, not at the
// producer's first store into the slot, keeps that store (and the tail's,
// behind it in the store buffer) from waiting for the other core.
func (f *FIFO) prefetch() {
	a := f.p.ahead
	if a == 0 || uint64(a) >= f.cap-(f.p.tail-f.p.headCache) {
		return
	}
	i := f.p.idx + a
	if i >= f.blocks {
		i -= f.blocks
	}
	spin.PrefetchWrite(&f.buf[i*f.bs])
}

// Peek waits for one committed block and returns it in place; it is
// PeekN(ctx, 1), with a shorter fast path.
func (f *FIFO) Peek(ctx context.Context) ([]byte, error) {
	if f.c.tailCache != f.c.head {
		f.c.peeked = 1
		lo := f.c.idx * f.bs
		return f.buf[lo : lo+f.bs : lo+f.bs], nil
	}
	return f.PeekN(ctx, 1)
}

// PeekN waits until k = min(n, blocks from the consumer's position to the
// end of the ring) blocks are committed and returns them in place as one
// contiguous slice of k*BlockSize bytes; the consumer reads them and then
// Releases them. The slice stays valid until Release; a second peek before
// Release starts at the same block. Once the FIFO is closed PeekN returns
// what is left, possibly fewer than k blocks, and when nothing is left
// io.EOF (or the CloseWithError error). The context is consulted only when
// the call has to wait.
func (f *FIFO) PeekN(ctx context.Context, n int) ([]byte, error) {
	if n < 1 {
		return nil, ErrCount
	}
	k := f.blocks - f.c.idx
	if n < k {
		k = n
	}
	avail := f.c.tailCache - f.c.head
	if avail < uint64(k) {
		var err error
		if avail, err = f.waitData(ctx, uint64(k)); err != nil {
			return nil, err
		}
		if avail < uint64(k) {
			k = int(avail)
		}
	}
	f.c.peeked = k
	return f.slots(f.c.idx, k), nil
}

// TryPeek is the non-blocking Peek: ErrEmpty when no block is committed.
func (f *FIFO) TryPeek() ([]byte, error) { return f.TryPeekN(1) }

// TryPeekN returns as many committed contiguous blocks as there are, up to
// n, without waiting: ErrEmpty when none is committed, io.EOF (or the
// CloseWithError error) when the FIFO is closed and drained.
func (f *FIFO) TryPeekN(n int) ([]byte, error) {
	if n < 1 {
		return nil, ErrCount
	}
	avail := f.c.tailCache - f.c.head
	if avail < uint64(n) {
		closed := f.closed.Load()
		f.c.tailCache = f.tail.Load()
		avail = f.c.tailCache - f.c.head
		if avail == 0 {
			if closed {
				return nil, f.consumerErr()
			}
			f.c.stalls.Add(1)
			return nil, ErrEmpty
		}
	}
	k := f.blocks - f.c.idx
	if n < k {
		k = n
	}
	if uint64(k) > avail {
		k = int(avail)
	}
	f.c.peeked = k
	return f.slots(f.c.idx, k), nil
}

// waitData waits until need blocks are committed at the consumer's
// position, or the FIFO is closed with fewer (then at least one is
// returned, or the end-of-stream error).
func (f *FIFO) waitData(ctx context.Context, need uint64) (uint64, error) {
	target := f.c.head + need
	stalled := false
	sp := spin.NewPacer(f.spin)
	ready := func() bool { return f.tail.Load() >= target || f.closed.Load() }
	for {
		// Load closed before tail: a producer commits before it closes, so
		// a closed FIFO seen here has all its blocks visible below.
		closed := f.closed.Load()
		f.c.tailCache = f.tail.Load()
		if f.c.tailCache >= target {
			return f.c.tailCache - f.c.head, nil
		}
		if closed {
			if avail := f.c.tailCache - f.c.head; avail > 0 {
				return avail, nil
			}
			return 0, f.consumerErr()
		}
		if !stalled {
			stalled = true
			f.c.stalls.Add(1)
		}
		if sp.More() {
			continue
		}
		if !f.data.Park(target, ready, ctx.Done()) {
			return 0, ctx.Err()
		}
		sp.Reset()
	}
}

// Release gives the first n blocks of the last peek back to the producer;
// the rest of the peek stays valid and can be released later. Release(0)
// does nothing. It fails with ErrOverRelease beyond the peek.
func (f *FIFO) Release(n int) error {
	if n < 0 {
		return ErrCount
	}
	if n > f.c.peeked {
		return ErrOverRelease
	}
	if n == 0 {
		return nil
	}
	f.c.peeked -= n
	fire := f.notify != nil && f.moveLevel(-int64(n))
	f.c.head += uint64(n)
	f.c.idx += n
	if f.c.idx == f.blocks {
		f.c.idx = 0
	}
	spin.Publish(&f.head, f.c.head)
	f.room.Wake(f.c.head)
	if fire {
		f.c.lows.Add(1)
		f.notify(MarkLow)
	}
	return nil
}

// moveLevel adds d to the fill level and reports whether the move crossed
// the mark the level was heading for: the high mark when d > 0, the low
// mark when d < 0. Level and side change in one atomic step, so the marks
// alternate exactly even when both sides move at once. The producer moves
// the level before it publishes its blocks and the consumer before it frees
// its slots, so the level never leaves [0, Cap].
func (f *FIFO) moveLevel(d int64) bool {
	for {
		old := f.level.Load()
		lvl, above := old>>1+d, old&1
		fire := false
		if d > 0 && above == 0 && lvl >= f.high {
			fire, above = true, 1
		} else if d < 0 && above == 1 && lvl <= f.low {
			fire, above = true, 0
		}
		if f.level.CompareAndSwap(old, lvl<<1|above) {
			return fire
		}
	}
}
