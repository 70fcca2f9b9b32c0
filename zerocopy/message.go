package zerocopy

import (
	"errors"
	"fmt"
	"io"
	"net"
)

// ErrNoPool reports a Message operation that needs buffers (ReadFrom,
// ReadFromN) on a message bound to no pool.
var ErrNoPool = errors.New("zerocopy: message has no pool")

// frag is one fragment of a message: a view p into the storage of buffer b
// (p's capacity reaches the end of the storage, which locates the view), or
// caller memory when b is nil.
type frag struct {
	b *Buf
	p []byte
}

// start returns the offset of the view in b's storage.
func (f *frag) start() int { return cap(f.b.store) - cap(f.p) }

// Message is an x-kernel style message: an ordered list of fragments, each
// a read-only view into a pooled Buf (or into caller memory), edited
// without copying payload bytes. Headers are pushed and popped at the front,
// data is appended at the back, and a message can be split at any offset
// and joined to another.
//
// Ownership. A Message holds one reference per fragment that views a
// buffer (adjacent views of one buffer are merged into one fragment, holding
// one reference). The buffers go back to their pool when the bytes viewing
// them leave every message: by TrimFront, Pop, Truncate, Read, WriteTo,
// WriteToAt, or Release. Append takes over the caller's reference; Split and
// Clone add references, never copies; Join moves references.
//
// Retention. A slice returned by Push, Front or Fragment is valid until the
// message next changes at that place (the bytes are trimmed or the message
// is released); slices returned by Front and Fragment are read-only. Memory
// given to AppendBytes is retained, never written, until the bytes leave
// the message; the caller must keep it unchanged until then.
//
// A Message is not safe for concurrent use; distinct messages sharing
// buffers may be used by different goroutines.
type Message struct {
	pool  *Pool // ReadFrom's buffers
	hpool *Pool // header buffers for Push
	acct  *Accounting
	frags []frag
	n     int
	vec   [][]byte    // WriteTo's reusable iovec list
	nb    net.Buffers // WriteTo's consumable view of vec, kept here so it does not escape per call
}

// NewMessage returns an empty message whose ReadFrom and Push take buffers
// from p (p may be nil: then they fail with ErrNoPool / ErrNoHeadroom).
func NewMessage(p *Pool) *Message {
	m := new(Message)
	m.Init(p)
	return m
}

// Init releases everything m holds and binds it to pool p for both data and
// header buffers. The zero Message is an empty message with no pool.
func (m *Message) Init(p *Pool) {
	m.Release()
	m.pool, m.hpool = p, p
}

// SetHeaderPool makes Push take header buffers (needed when the first
// fragment has no free headroom) from hp, typically a pool of small buffers,
// instead of the data pool.
func (m *Message) SetHeaderPool(hp *Pool) { m.hpool = hp }

// SetAccounting makes m record the bytes it copies (CopyTo, Read) and moves
// through system calls (ReadFrom, ReadFromN, ReadFromAt, WriteTo, WriteToAt)
// into a; nil turns it off.
func (m *Message) SetAccounting(a *Accounting) { m.acct = a }

// Len returns the number of bytes in the message.
func (m *Message) Len() int { return m.n }

// NumFragments returns the number of fragments.
func (m *Message) NumFragments() int { return len(m.frags) }

// Fragment returns the read-only bytes of fragment i.
func (m *Message) Fragment(i int) []byte {
	p := m.frags[i].p
	return p[:len(p):len(p)]
}

// Buffers appends the fragments' read-only views to dst and returns it: the
// iovec list of the message, for a caller that does its own scatter-gather.
func (m *Message) Buffers(dst [][]byte) [][]byte {
	for i := range m.frags {
		p := m.frags[i].p
		dst = append(dst, p[:len(p):len(p)])
	}
	return dst
}

// Release drops every reference the message holds and empties it. The
// message stays bound to its pools and can be reused.
func (m *Message) Release() {
	m.dropFront(len(m.frags))
	m.n = 0
}

// dropFront releases and removes the first k fragments.
func (m *Message) dropFront(k int) {
	for i := 0; i < k; i++ {
		f := &m.frags[i]
		m.n -= len(f.p)
		if f.b != nil {
			f.b.Release()
		}
	}
	rest := copy(m.frags, m.frags[k:])
	clear(m.frags[rest:])
	m.frags = m.frags[:rest]
}

// Push makes room for an n-byte header in front of the message and returns
// it for the caller to fill. When the first fragment's buffer is held by
// this message alone and has n free bytes of headroom before the view, the
// header goes there (no allocation, no new fragment); otherwise the header
// goes into the headroom of a new buffer from the header pool, as a new
// first fragment. Push fails with ErrNoHeadroom when n exceeds that pool's
// headroom.
func (m *Message) Push(n int) ([]byte, error) {
	if n < 0 {
		return nil, fmt.Errorf("%w: Push(%d)", ErrRange, n)
	}
	if n == 0 {
		return []byte{}, nil
	}
	if len(m.frags) > 0 {
		if f := &m.frags[0]; f.b != nil {
			if off := f.start(); f.b.pushable(off, n) {
				f.p = f.b.store[off-n:][:n+len(f.p)]
				m.n += n
				return f.p[:n:n], nil
			}
		}
	}
	hp := m.hpool
	if hp == nil || n > hp.headroom {
		headroom := 0
		if hp != nil {
			headroom = hp.headroom
		}
		return nil, fmt.Errorf("%w: Push(%d) with %d bytes of headroom", ErrNoHeadroom, n, headroom)
	}
	b := hp.Get()
	b.freeze()
	h := hp.headroom
	m.frags = append(m.frags, frag{})
	copy(m.frags[1:], m.frags)
	m.frags[0] = frag{b: b, p: b.store[h-n:][:n]}
	m.n += n
	return m.frags[0].p[:n:n], nil
}

// Front returns a read-only view of the first n bytes when they lie in one
// fragment, so a header can be parsed in place; ok is false otherwise (use
// Peek or Pop to copy it out).
func (m *Message) Front(n int) (p []byte, ok bool) {
	if n < 0 || n > m.n {
		return nil, false
	}
	if n == 0 {
		return []byte{}, true
	}
	if q := m.frags[0].p; len(q) >= n {
		return q[:n:n], true
	}
	return nil, false
}

// Peek copies the first len(dst) bytes into dst without removing them. It
// copies header bytes, which are not counted as payload copies.
func (m *Message) Peek(dst []byte) error {
	if len(dst) > m.n {
		return fmt.Errorf("%w: %d bytes wanted, %d held", ErrShort, len(dst), m.n)
	}
	for i := 0; len(dst) > 0; i++ {
		k := copy(dst, m.frags[i].p)
		dst = dst[k:]
	}
	return nil
}

// Pop removes the first len(dst) bytes (a header) and copies them into dst.
func (m *Message) Pop(dst []byte) error {
	if err := m.Peek(dst); err != nil {
		return err
	}
	return m.TrimFront(len(dst))
}

// TrimFront removes the first n bytes without copying them, releasing the
// buffers no longer viewed.
func (m *Message) TrimFront(n int) error {
	if n < 0 {
		return fmt.Errorf("%w: TrimFront(%d)", ErrRange, n)
	}
	if n > m.n {
		return fmt.Errorf("%w: %d bytes wanted, %d held", ErrShort, n, m.n)
	}
	k := 0
	for k < len(m.frags) && len(m.frags[k].p) <= n {
		n -= len(m.frags[k].p)
		k++
	}
	m.dropFront(k)
	if n > 0 {
		m.frags[0].p = m.frags[0].p[n:]
		m.n -= n
	}
	return nil
}

// Truncate keeps the first n bytes and drops the rest.
func (m *Message) Truncate(n int) error {
	if n < 0 || n > m.n {
		return fmt.Errorf("%w: Truncate(%d) of %d bytes", ErrRange, n, m.n)
	}
	i, k := m.locate(n)
	keep := i
	if k > 0 {
		m.frags[i].p = m.frags[i].p[:k]
		keep++
	}
	for j := keep; j < len(m.frags); j++ {
		if b := m.frags[j].b; b != nil {
			b.Release()
		}
	}
	clear(m.frags[keep:])
	m.frags = m.frags[:keep]
	m.n = n
	return nil
}

// locate returns the fragment holding byte off and the offset inside it;
// for off == Len it returns (NumFragments, 0).
func (m *Message) locate(off int) (i, k int) {
	for i = 0; i < len(m.frags); i++ {
		if l := len(m.frags[i].p); off < l {
			return i, off
		} else {
			off -= l
		}
	}
	return i, 0
}

// Append adds bytes [off, off+n) of b's payload at the end of the message.
// It takes over the caller's reference to b (also when n is 0, in which case
// the reference is released) and freezes b. On error the caller keeps its
// reference.
func (m *Message) Append(b *Buf, off, n int) error {
	b.live("Append")
	if off < 0 || n < 0 || off > b.pool.size-n {
		return fmt.Errorf("%w: Append of [%d, %d+%d) from a %d-byte buffer", ErrRange, off, off, n, b.pool.size)
	}
	b.freeze()
	if n == 0 {
		b.Release()
		return nil
	}
	m.appendFrag(frag{b: b, p: b.store[b.pool.headroom+off:][:n]})
	return nil
}

// AppendBytes adds caller memory p at the end of the message without
// copying it. The message never writes to p and retains it until its bytes
// leave the message; the caller must not change p until then.
func (m *Message) AppendBytes(p []byte) {
	if len(p) > 0 {
		m.appendFrag(frag{p: p[:len(p):len(p)]})
	}
}

// appendFrag adds f at the end, merging it with the last fragment when both
// view adjacent bytes of the same buffer (one reference is then released).
func (m *Message) appendFrag(f frag) {
	m.n += len(f.p)
	if k := len(m.frags); k > 0 && f.b != nil {
		last := &m.frags[k-1]
		if last.b == f.b && last.start()+len(last.p) == f.start() {
			last.p = last.p[:len(last.p)+len(f.p)]
			f.b.Release()
			return
		}
	}
	m.frags = append(m.frags, f)
}

// Split moves the bytes from offset off to the end of the message onto the
// end of tail, without copying: a fragment cut in two is shared by both
// messages (one more reference on its buffer). m keeps bytes [0, off).
func (m *Message) Split(off int, tail *Message) error {
	if tail == m {
		return ErrSameMessage
	}
	if off < 0 || off > m.n {
		return fmt.Errorf("%w: Split(%d) of %d bytes", ErrRange, off, m.n)
	}
	i, k := m.locate(off)
	first := i
	if k > 0 {
		f := m.frags[i]
		if f.b != nil {
			f.b.Ref()
		}
		tail.appendFrag(frag{b: f.b, p: f.p[k:]})
		m.frags[i].p = f.p[:k]
		first = i + 1
	}
	for j := first; j < len(m.frags); j++ {
		tail.appendFrag(m.frags[j])
	}
	clear(m.frags[first:])
	m.frags = m.frags[:first]
	m.n = off
	return nil
}

// Join moves every byte of other onto the end of m, without copying, and
// leaves other empty.
func (m *Message) Join(other *Message) error {
	if other == m {
		return ErrSameMessage
	}
	for i := range other.frags {
		m.appendFrag(other.frags[i])
	}
	clear(other.frags)
	other.frags = other.frags[:0]
	other.n = 0
	return nil
}

// Clone appends to dst a copy of m that shares m's buffers (one more
// reference each, no byte copied), for a second consumer or a retransmit.
func (m *Message) Clone(dst *Message) error {
	if dst == m {
		return ErrSameMessage
	}
	for _, f := range m.frags {
		if f.b != nil {
			f.b.Ref()
		}
		dst.appendFrag(f)
	}
	return nil
}

// CopyTo copies the message's first bytes into dst, flattening it, and
// returns the number of bytes copied, min(len(dst), Len()). The bytes are
// counted as user-space copies.
func (m *Message) CopyTo(dst []byte) int {
	total := 0
	for i := 0; i < len(m.frags) && len(dst) > 0; i++ {
		k := copy(dst, m.frags[i].p)
		dst = dst[k:]
		total += k
	}
	m.acct.AddCopy(int64(total))
	return total
}

// Read copies bytes from the front of the message into p and removes them,
// for a consumer that needs them in its own memory; it returns io.EOF when
// the message is empty. The bytes are counted as user-space copies (WriteTo
// avoids them).
func (m *Message) Read(p []byte) (int, error) {
	if m.n == 0 {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := 0
	for i := 0; i < len(m.frags) && n < len(p); i++ {
		n += copy(p[n:], m.frags[i].p)
	}
	m.acct.AddCopy(int64(n))
	return n, m.TrimFront(n)
}

// WriteTo writes the whole message to w and removes what was written,
// releasing the buffers that were sent; on error the unsent bytes stay in
// the message. A message of one fragment (the usual case after ReadFromN
// and Push into the headroom) is one Write. Otherwise, when w is a
// *net.TCPConn, *net.UnixConn or another net.Conn of the standard library
// (not wrapped), the message goes out in a single writev(2) per round (the
// kernel takes at most 1024 fragments at a time); any other writer receives
// one Write per fragment. WriteTo copies nothing
// and allocates nothing in steady state.
func (m *Message) WriteTo(w io.Writer) (int64, error) {
	if len(m.frags) == 1 { // one fragment (a header pushed into headroom): a plain write
		k, err := w.Write(m.frags[0].p)
		if k < 0 || k > m.n {
			return 0, fmt.Errorf("zerocopy: writer returned %d for a %d-byte write", k, m.n)
		}
		if err == nil && k < m.n {
			err = io.ErrShortWrite
		}
		m.acct.AddCrossing(int64(k))
		m.TrimFront(k)
		return int64(k), err
	}
	m.vec = m.Buffers(m.vec[:0])
	m.nb = m.vec
	n, err := m.nb.WriteTo(w)
	m.nb = nil
	clear(m.vec)
	if err == nil && n < int64(m.n) { // a writer breaking io.Writer's contract
		err = io.ErrShortWrite
	}
	m.acct.AddCrossing(n)
	if terr := m.TrimFront(int(n)); terr != nil && err == nil {
		err = terr
	}
	return n, err
}

// ReadFrom reads from r until io.EOF into new buffers from the message's
// pool, appended at the end (the first lands just after its headroom, so a
// header can be pushed in front in place). Every buffer is filled before the
// next is taken. It returns the number of bytes read; io.EOF is not an
// error. On another error the bytes read so far stay in the message.
func (m *Message) ReadFrom(r io.Reader) (int64, error) {
	n, err := m.read(r, -1)
	if err == io.EOF {
		err = nil
	}
	return n, err
}

// ReadFromN reads exactly n bytes from r into new pooled buffers appended at
// the end of the message, like io.ReadFull: it returns io.EOF if r was at
// its end and io.ErrUnexpectedEOF if it ended after some but not all bytes
// (the bytes read stay in the message); once all n are read, an error r
// returned with the last of them (io.EOF, say) is not reported.
func (m *Message) ReadFromN(r io.Reader, n int64) (int64, error) {
	if n < 0 {
		return 0, fmt.Errorf("%w: ReadFromN(%d)", ErrRange, n)
	}
	got, err := m.read(r, n)
	switch {
	case got == n:
		err = nil
	case err == io.EOF && got > 0:
		err = io.ErrUnexpectedEOF
	}
	return got, err
}

// ReadFromAt reads n bytes of r starting at offset off (a disk or file:
// pread, no file position) into new pooled buffers appended at the end of the
// message, one ReadAt per buffer. It returns the bytes read and
// io.ErrUnexpectedEOF if r ends first (the bytes read stay in the message).
func (m *Message) ReadFromAt(r io.ReaderAt, off, n int64) (int64, error) {
	if off < 0 || n < 0 {
		return 0, fmt.Errorf("%w: ReadFromAt(%d, %d)", ErrRange, off, n)
	}
	if m.pool == nil {
		return 0, ErrNoPool
	}
	var total int64
	for total < n {
		b := m.pool.Get()
		p := b.Writable()
		if int64(len(p)) > n-total {
			p = p[:n-total]
		}
		k, err := r.ReadAt(p, off+total)
		if k < 0 || k > len(p) {
			k, err = 0, fmt.Errorf("zerocopy: ReaderAt returned %d bytes for a %d-byte read", k, len(p))
		}
		if k == len(p) && err == io.EOF {
			err = nil // io.ReaderAt may report EOF with the last full read
		}
		total += int64(k)
		m.acct.AddCrossing(int64(k))
		if k > 0 {
			b.freeze()
			m.appendFrag(frag{b: b, p: b.store[m.pool.headroom:][:k]})
		} else {
			b.Release()
		}
		if err == io.EOF || (err == nil && k < len(p)) {
			return total, io.ErrUnexpectedEOF
		}
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// WriteToAt writes the whole message to w at offset off, one WriteAt per
// fragment (for a disk or file: pwrite, no flattening, no copy), and removes
// what was written, releasing the buffers; on error the unwritten bytes stay
// and the returned count says how far it got.
func (m *Message) WriteToAt(w io.WriterAt, off int64) (int64, error) {
	if off < 0 {
		return 0, fmt.Errorf("%w: WriteToAt(%d)", ErrRange, off)
	}
	var total int64
	var err error
	i := 0
	for ; i < len(m.frags); i++ {
		p := m.frags[i].p
		var k int
		k, err = w.WriteAt(p, off+total)
		if k < 0 || k > len(p) {
			k, err = 0, fmt.Errorf("zerocopy: WriterAt returned %d for a %d-byte write", k, len(p))
		}
		if err == nil && k < len(p) {
			err = io.ErrShortWrite
		}
		total += int64(k)
		if err != nil {
			break
		}
	}
	m.acct.AddCrossing(total)
	m.TrimFront(int(total))
	return total, err
}

// read reads up to limit bytes (no limit when negative) into pooled buffers.
func (m *Message) read(r io.Reader, limit int64) (int64, error) {
	if m.pool == nil {
		return 0, ErrNoPool
	}
	var total int64
	for limit < 0 || total < limit {
		b := m.pool.Get()
		p := b.Writable()
		if limit >= 0 && int64(len(p)) > limit-total {
			p = p[:limit-total]
		}
		fill := 0
		var err error
		for fill < len(p) && err == nil {
			var k int
			k, err = r.Read(p[fill:])
			if k < 0 || k > len(p)-fill {
				err = fmt.Errorf("zerocopy: reader returned %d bytes for a %d-byte read", k, len(p)-fill)
				k = 0
			}
			fill += k
		}
		total += int64(fill)
		m.acct.AddCrossing(int64(fill))
		if fill > 0 {
			b.freeze()
			m.appendFrag(frag{b: b, p: b.store[m.pool.headroom:][:fill]})
		} else {
			b.Release()
		}
		if err != nil {
			return total, err
		}
	}
	return total, nil
}
