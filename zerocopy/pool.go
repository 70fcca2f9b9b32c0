package zerocopy

import (
	"fmt"
	"hash/crc32"
	"sync"
	"sync/atomic"
)

// Default pool geometry: one buffer holds one 64 KiB NBD payload (the paper's
// evaluation block) with room in front for the headers of a few layers.
const (
	DefaultSize     = 64 << 10
	DefaultHeadroom = 64
)

// poison fills released buffers in a checked pool.
const poison = 0xDB

// Config describes the buffers of a Pool.
type Config struct {
	// Size is the number of payload bytes in each buffer; it must be > 0.
	Size int
	// Headroom is the number of bytes reserved in front of the payload of
	// each buffer, so that Message.Push can prepend headers in place. Zero
	// is allowed (then Push fails with ErrNoHeadroom when it needs a
	// header buffer); negative is invalid.
	Headroom int
	// Checked turns on the debug mode: every misuse is caught, at a cost.
	// Buffer handles are never reused (a stale *Buf always panics), the
	// payload is checksummed at hand-off and verified on Ref and Release,
	// and released storage is poisoned and verified on the next Get. Use it
	// in tests; leave it off in production.
	Checked bool
}

// Pool is a pool of fixed-size, reference-counted buffers (fbufs) for one
// data path. Get never blocks and never fails: when the free list is empty it
// allocates a new buffer, which returns to the free list on its last Release,
// so after warm-up (or Prealloc) Get and Release allocate nothing.
//
// A Pool is safe for concurrent use by multiple goroutines.
type Pool struct {
	size     int
	headroom int
	checked  bool

	mu      sync.Mutex
	free    []*Buf // unchecked: reusable handles; checked: dead handles whose storage is reusable
	gets    int64
	puts    int64
	allocs  int64
	dropped int64
}

// PoolStats is a snapshot of a Pool's counters.
type PoolStats struct {
	Gets        int64 // buffers handed out by Get
	Puts        int64 // buffers returned by their last Release
	Allocs      int64 // buffers allocated (Get with an empty free list, Prealloc)
	Dropped     int64 // free buffers let go to the garbage collector by Trim
	Free        int   // buffers on the free list now
	Outstanding int64 // Gets - Puts: buffers in use now
}

// NewPool returns a pool of buffers of size payload bytes with
// DefaultHeadroom bytes of headroom. It panics if size <= 0, like make.
func NewPool(size int) *Pool {
	p, err := NewPoolConfig(Config{Size: size, Headroom: DefaultHeadroom})
	if err != nil {
		panic(err)
	}
	return p
}

// NewPoolConfig returns a pool configured by c.
func NewPoolConfig(c Config) (*Pool, error) {
	if c.Size <= 0 || c.Headroom < 0 {
		return nil, fmt.Errorf("%w: size %d, headroom %d", ErrInvalidConfig, c.Size, c.Headroom)
	}
	return &Pool{size: c.Size, headroom: c.Headroom, checked: c.Checked}, nil
}

// Size returns the payload size of the pool's buffers.
func (p *Pool) Size() int { return p.size }

// Headroom returns the headroom in front of each buffer's payload.
func (p *Pool) Headroom() int { return p.headroom }

// Checked reports whether the pool runs in the checked (debug) mode.
func (p *Pool) Checked() bool { return p.checked }

// Prealloc adds n new buffers to the free list, so that the first n Gets do
// not allocate.
func (p *Pool) Prealloc(n int) {
	bufs := make([]*Buf, n)
	for i := range bufs {
		bufs[i] = p.newBuf()
		if p.checked {
			fill(bufs[i].store, poison)
		}
	}
	p.mu.Lock()
	p.free = append(p.free, bufs...)
	p.allocs += int64(n)
	p.mu.Unlock()
}

func (p *Pool) newBuf() *Buf {
	return &Buf{pool: p, store: make([]byte, p.headroom+p.size)}
}

// Get returns a writable buffer holding one reference, owned by the caller.
// Its payload bytes are not zeroed: they hold whatever the last user left
// (or the poison byte 0xDB in a checked pool).
func (p *Pool) Get() *Buf {
	p.mu.Lock()
	var b *Buf
	if n := len(p.free); n > 0 {
		b = p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
	} else {
		p.allocs++
	}
	p.gets++
	p.mu.Unlock()

	switch {
	case b == nil:
		b = p.newBuf()
	case p.checked:
		// The old handle stays dead forever; its storage moves to a new one.
		store := b.store
		b.store = nil
		for i, c := range store {
			if c != poison {
				panic(fmt.Errorf("%w (byte %d of storage is %#x, want poison %#x)", ErrWriteAfterRelease, i, c, poison))
			}
		}
		b = &Buf{pool: p, store: store}
	}
	b.frozen.Store(false)
	b.refs.Store(1)
	return b
}

func (p *Pool) put(b *Buf) {
	if p.checked {
		fill(b.store, poison)
	}
	p.mu.Lock()
	p.free = append(p.free, b)
	p.puts++
	p.mu.Unlock()
}

// Stats returns a snapshot of the pool's counters.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PoolStats{Gets: p.gets, Puts: p.puts, Allocs: p.allocs, Dropped: p.dropped, Free: len(p.free), Outstanding: p.gets - p.puts}
}

// Trim lets all but keep of the free buffers go to the garbage collector
// and returns how many it dropped. The pool never shrinks on its own: its
// memory is the high-water mark of buffers in use, until Trim.
func (p *Pool) Trim(keep int) int {
	keep = max(keep, 0)
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.free) - keep
	if n <= 0 {
		return 0
	}
	clear(p.free[keep:])
	p.free = p.free[:keep]
	p.dropped += int64(n)
	return n
}

// Buf is one fixed-size, reference-counted buffer of a Pool (an fbuf).
//
// Its storage is Headroom bytes of headroom followed by Size bytes of
// payload. Life cycle:
//
//   - Get returns it writable, with one reference, to one owner, who fills
//     the payload through Writable.
//   - Hand-off (Ref, Freeze, or Message.Append) makes it read-only for good:
//     from then on Writable panics, and nobody may write to the payload,
//     including through a slice taken from Writable before the hand-off (a
//     checked pool detects that).
//   - Every holder of a reference calls Release exactly once; the last
//     Release returns the buffer to its pool, and any later use of the
//     handle or of a slice into it is a bug (double release panics).
//
// The reference count is atomic: references may be taken and released from
// different goroutines. Reading the payload concurrently is safe once the
// buffer is frozen.
type Buf struct {
	pool   *Pool
	store  []byte
	refs   atomic.Int32
	frozen atomic.Bool
	sum    uint32 // checked pool: CRC-32C of the payload at hand-off
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Pool returns the pool the buffer belongs to.
func (b *Buf) Pool() *Pool { return b.pool }

// Len returns the payload size (the pool's Size).
func (b *Buf) Len() int { return b.pool.size }

// Refs returns the current number of references (0 after the last Release).
func (b *Buf) Refs() int { return int(b.refs.Load()) }

// Frozen reports whether the buffer has been handed off and is read-only.
func (b *Buf) Frozen() bool { return b.frozen.Load() }

// Bytes returns the payload for reading. The slice is valid until the
// caller's reference is released; the caller must not write to it once the
// buffer is frozen.
func (b *Buf) Bytes() []byte {
	b.live("Bytes")
	h := b.pool.headroom
	return b.store[h : h+b.pool.size : h+b.pool.size]
}

// Writable returns the payload for writing. It panics with ErrReadOnly once
// the buffer has been handed off. The slice must not be used after the
// hand-off.
func (b *Buf) Writable() []byte {
	b.live("Writable")
	if b.frozen.Load() {
		panic(fmt.Errorf("%w (buffer %p, %d references)", ErrReadOnly, b, b.refs.Load()))
	}
	h := b.pool.headroom
	return b.store[h : h+b.pool.size : h+b.pool.size]
}

// Freeze hands the buffer off without adding a reference: it becomes
// read-only. Freezing a frozen buffer does nothing.
func (b *Buf) Freeze() {
	b.live("Freeze")
	b.freeze()
}

func (b *Buf) freeze() {
	if b.frozen.Load() {
		return
	}
	if b.pool.checked {
		b.sum = crc32.Checksum(b.payload(), castagnoli)
	}
	b.frozen.Store(true)
}

// Ref adds a reference for another holder and returns b. Sharing is a
// hand-off: the buffer becomes read-only. Ref of a released buffer panics
// with ErrReleased.
func (b *Buf) Ref() *Buf {
	b.live("Ref")
	b.freeze()
	b.verify()
	if b.refs.Add(1) <= 1 {
		panic(fmt.Errorf("%w (Ref raced with the last Release of buffer %p)", ErrReleased, b))
	}
	return b
}

// Release drops the caller's reference; the last one returns the buffer to
// its pool. Releasing more times than there were references panics with
// ErrDoubleRelease (always while the buffer sits in the pool; in a checked
// pool also after it was handed out again).
func (b *Buf) Release() {
	if b.store == nil || b.refs.Load() <= 0 {
		panic(fmt.Errorf("%w (buffer %p was returned to its pool)", ErrDoubleRelease, b))
	}
	b.verify()
	switch n := b.refs.Add(-1); {
	case n == 0:
		b.pool.put(b)
	case n < 0:
		b.refs.Add(1)
		panic(fmt.Errorf("%w (buffer %p)", ErrDoubleRelease, b))
	}
}

func (b *Buf) payload() []byte {
	h := b.pool.headroom
	return b.store[h : h+b.pool.size]
}

// live panics when b holds no reference.
func (b *Buf) live(op string) {
	if b.store == nil || b.refs.Load() <= 0 {
		panic(fmt.Errorf("%w (%s on buffer %p)", ErrReleased, op, b))
	}
}

// verify checks, in a checked pool, that a frozen payload did not change.
func (b *Buf) verify() {
	if !b.pool.checked || !b.frozen.Load() || b.store == nil {
		return
	}
	if got := crc32.Checksum(b.payload(), castagnoli); got != b.sum {
		panic(fmt.Errorf("%w (buffer %p: CRC-32C %#08x at hand-off, %#08x now)", ErrModifiedAfterHandoff, b, b.sum, got))
	}
}

// pushable reports whether the caller may write n header bytes in front of
// a view starting at store[off]: it holds the only reference and the bytes
// lie inside the headroom.
func (b *Buf) pushable(off, n int) bool {
	return b.refs.Load() == 1 && off <= b.pool.headroom && off >= n
}

func fill(p []byte, c byte) {
	for i := range p {
		p[i] = c
	}
}
