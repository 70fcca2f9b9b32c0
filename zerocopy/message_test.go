package zerocopy

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// flat returns the message's bytes by concatenating its fragments (test code
// does the copy, so the message's accounting stays untouched).
func flat(m *Message) []byte {
	out := []byte{}
	for _, p := range m.Buffers(nil) {
		out = append(out, p...)
	}
	return out
}

// filled returns a buffer from p whose payload is data (len(data) <= size).
func filled(p *Pool, data string) *Buf {
	b := p.Get()
	copy(b.Writable(), data)
	return b
}

func TestPushInPlaceUsesHeadroom(t *testing.T) {
	p := newTestPool(t, 64, 16, true)
	m := NewMessage(p)
	defer m.Release()
	if err := m.Append(filled(p, "payload"), 0, 7); err != nil {
		t.Fatal(err)
	}
	h, err := m.Push(4)
	if err != nil {
		t.Fatal(err)
	}
	copy(h, "HDR:")
	h2, err := m.Push(12)
	if err != nil {
		t.Fatal(err)
	}
	copy(h2, "outer-header")
	if m.NumFragments() != 1 {
		t.Fatalf("pushes into headroom made %d fragments, want 1", m.NumFragments())
	}
	if got, want := string(flat(m)), "outer-headerHDR:payload"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	if st := p.Stats(); st.Gets != 1 {
		t.Fatalf("in-place pushes took buffers: %+v", st)
	}
	// The headroom is used up: the next push takes a header buffer.
	h3, err := m.Push(1)
	if err != nil {
		t.Fatal(err)
	}
	h3[0] = '!'
	if m.NumFragments() != 2 || string(flat(m)) != "!outer-headerHDR:payload" {
		t.Fatalf("after overflowing push: %d fragments, %q", m.NumFragments(), flat(m))
	}
	if _, err := m.Push(17); !errors.Is(err, ErrNoHeadroom) {
		t.Fatalf("Push beyond the headroom: %v, want ErrNoHeadroom", err)
	}
}

func TestPushOnSharedBufferDoesNotWriteIt(t *testing.T) {
	p := newTestPool(t, 32, 8, true)
	a := NewMessage(p)
	b := NewMessage(p)
	defer a.Release()
	defer b.Release()
	if err := a.Append(filled(p, "data"), 0, 4); err != nil {
		t.Fatal(err)
	}
	if err := a.Clone(b); err != nil {
		t.Fatal(err)
	}
	h, err := a.Push(2)
	if err != nil {
		t.Fatal(err)
	}
	copy(h, "A:")
	h, err = b.Push(2)
	if err != nil {
		t.Fatal(err)
	}
	copy(h, "B:")
	if string(flat(a)) != "A:data" || string(flat(b)) != "B:data" {
		t.Fatalf("shared buffer headroom clobbered: %q %q", flat(a), flat(b))
	}
	if a.NumFragments() != 2 || b.NumFragments() != 2 {
		t.Fatalf("push on a shared buffer must take a header buffer: %d %d fragments", a.NumFragments(), b.NumFragments())
	}
}

func TestMessageViewsAliasBuffers(t *testing.T) {
	p := newTestPool(t, 64, 0, false)
	m := NewMessage(p)
	defer m.Release()
	b := filled(p, "0123456789")
	payload := b.Bytes()
	if err := m.Append(b, 2, 6); err != nil {
		t.Fatal(err)
	}
	var tail Message
	defer tail.Release()
	if err := m.Split(3, &tail); err != nil {
		t.Fatal(err)
	}
	if &m.Fragment(0)[0] != &payload[2] || &tail.Fragment(0)[0] != &payload[5] {
		t.Fatal("Split copied bytes: the fragments do not view the original buffer")
	}
	if b.Refs() != 2 {
		t.Fatalf("split fragment holds %d references, want 2", b.Refs())
	}
	if err := m.Join(&tail); err != nil {
		t.Fatal(err)
	}
	if m.NumFragments() != 1 || b.Refs() != 1 || tail.Len() != 0 {
		t.Fatalf("Join did not merge the halves: %d fragments, %d refs, tail %d", m.NumFragments(), b.Refs(), tail.Len())
	}
	if &m.Fragment(0)[0] != &payload[2] || string(flat(m)) != "234567" {
		t.Fatalf("joined message %q", flat(m))
	}
}

func TestMessageErrors(t *testing.T) {
	p := newTestPool(t, 16, 4, true)
	m := NewMessage(p)
	defer m.Release()
	if err := m.Append(filled(p, "abcdef"), 0, 6); err != nil {
		t.Fatal(err)
	}
	b := p.Get()
	if err := m.Append(b, 10, 7); !errors.Is(err, ErrRange) {
		t.Errorf("Append past the end: %v", err)
	}
	if b.Refs() != 1 || b.Frozen() {
		t.Errorf("failed Append took the reference or froze the buffer")
	}
	b.Release()
	checks := []struct {
		name string
		err  error
		want error
	}{
		{"Pop too much", m.Pop(make([]byte, 7)), ErrShort},
		{"TrimFront too much", m.TrimFront(7), ErrShort},
		{"TrimFront negative", m.TrimFront(-1), ErrRange},
		{"Truncate past end", m.Truncate(7), ErrRange},
		{"Split past end", m.Split(7, new(Message)), ErrRange},
		{"Split into itself", m.Split(1, m), ErrSameMessage},
		{"Join itself", m.Join(m), ErrSameMessage},
		{"Clone into itself", m.Clone(m), ErrSameMessage},
		{"Push negative", func() error { _, err := m.Push(-1); return err }(), ErrRange},
		{"ReadFromN negative", func() error { _, err := m.ReadFromN(bytes.NewReader(nil), -1); return err }(), ErrRange},
		{"ReadFrom without pool", func() error { _, err := new(Message).ReadFrom(bytes.NewReader([]byte("x"))); return err }(), ErrNoPool},
		{"Push without pool", func() error { _, err := new(Message).Push(1); return err }(), ErrNoHeadroom},
	}
	for _, c := range checks {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	if string(flat(m)) != "abcdef" {
		t.Fatalf("failed operations changed the message: %q", flat(m))
	}
}

func TestFront(t *testing.T) {
	p := newTestPool(t, 8, 4, false)
	m := NewMessage(p)
	defer m.Release()
	m.Append(filled(p, "abcd"), 0, 4)
	m.Append(filled(p, "efgh"), 0, 4)
	if f, ok := m.Front(4); !ok || string(f) != "abcd" {
		t.Errorf("Front(4) = %q, %v", f, ok)
	}
	if _, ok := m.Front(5); ok {
		t.Error("Front(5) across fragments reported contiguous")
	}
	var hdr [5]byte
	if err := m.Pop(hdr[:]); err != nil || string(hdr[:]) != "abcde" {
		t.Errorf("Pop across fragments = %q, %v", hdr, err)
	}
	if st := p.Stats(); st.Outstanding != 1 {
		t.Errorf("Pop did not release the emptied buffer: %+v", st)
	}
}

func TestReadFrom(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 1000) // 16000 bytes
	for _, size := range []int{1, 7, 4096, 16000, 20000} {
		p := newTestPool(t, size, 8, true)
		var acct Accounting
		m := NewMessage(p)
		m.SetAccounting(&acct)
		n, err := m.ReadFrom(iotest.OneByteReader(bytes.NewReader(data)))
		if err != nil || n != int64(len(data)) {
			t.Fatalf("size %d: ReadFrom = %d, %v", size, n, err)
		}
		if diff := cmp.Diff(data, flat(m)); diff != "" {
			t.Fatalf("size %d: bytes differ (-want +got):\n%s", size, diff)
		}
		if want := (len(data) + size - 1) / size; m.NumFragments() != want {
			t.Errorf("size %d: %d fragments, want %d (every buffer filled)", size, m.NumFragments(), want)
		}
		if st := acct.Snapshot(); st.Copied != 0 || st.Crossings != int64(len(data)) {
			t.Errorf("size %d: accounting %+v", size, st)
		}
		h, err := m.Push(8) // the first buffer has its headroom free
		if err != nil {
			t.Fatal(err)
		}
		copy(h, "HEADER::")
		if got := flat(m); string(got[:8]) != "HEADER::" || !bytes.Equal(got[8:], data) {
			t.Fatalf("size %d: push after ReadFrom broke the message", size)
		}
		m.Release()
		if st := p.Stats(); st.Outstanding != 0 {
			t.Fatalf("size %d: leak %+v", size, st)
		}
	}
}

func TestReadFromN(t *testing.T) {
	p := newTestPool(t, 100, 0, true)
	m := NewMessage(p)
	defer m.Release()
	src := bytes.NewReader(bytes.Repeat([]byte{7}, 250))
	if n, err := m.ReadFromN(src, 230); err != nil || n != 230 || m.Len() != 230 {
		t.Fatalf("ReadFromN(230) = %d, %v; Len %d", n, err, m.Len())
	}
	if n, err := m.ReadFromN(src, 30); err != io.ErrUnexpectedEOF || n != 20 || m.Len() != 250 {
		t.Fatalf("short ReadFromN = %d, %v; Len %d", n, err, m.Len())
	}
	if n, err := m.ReadFromN(src, 1); err != io.EOF || n != 0 {
		t.Fatalf("ReadFromN at EOF = %d, %v", n, err)
	}
	if n, err := m.ReadFromN(src, 0); err != nil || n != 0 {
		t.Fatalf("ReadFromN(0) = %d, %v", n, err)
	}
	n, err := m.ReadFrom(iotest.TimeoutReader(iotest.OneByteReader(bytes.NewReader([]byte("xyz")))))
	if n != 1 || err == nil || m.Len() != 251 {
		t.Fatalf("ReadFrom with a failing reader = %d, %v; Len %d (bytes read must stay)", n, err, m.Len())
	}
	// The last bytes and io.EOF in one Read (io.Reader allows it): all n
	// were read, so no error, as io.ReadFull.
	n, err = m.ReadFromN(iotest.DataErrReader(bytes.NewReader(bytes.Repeat([]byte{8}, 150))), 150)
	if n != 150 || err != nil || m.Len() != 401 {
		t.Fatalf("ReadFromN(150) of 150 bytes ending with io.EOF = %d, %v; Len %d", n, err, m.Len())
	}
	n, err = m.ReadFromN(iotest.DataErrReader(bytes.NewReader(bytes.Repeat([]byte{9}, 50))), 60)
	if n != 50 || err != io.ErrUnexpectedEOF || m.Len() != 451 {
		t.Fatalf("ReadFromN(60) of 50 bytes ending with io.EOF = %d, %v; Len %d", n, err, m.Len())
	}
}

// errWriter accepts limit bytes, then fails.
type errWriter struct {
	buf   bytes.Buffer
	limit int
}

var errFull = errors.New("writer full")

func (w *errWriter) Write(p []byte) (int, error) {
	if room := w.limit - w.buf.Len(); len(p) > room {
		w.buf.Write(p[:room])
		return room, errFull
	}
	return w.buf.Write(p)
}

func TestWriteToKeepsUnsentBytes(t *testing.T) {
	p := newTestPool(t, 10, 4, true)
	m := NewMessage(p)
	m.ReadFrom(bytes.NewReader([]byte("0123456789abcdefghij-tail")))
	w := &errWriter{limit: 13}
	n, err := m.WriteTo(w)
	if n != 13 || !errors.Is(err, errFull) {
		t.Fatalf("WriteTo = %d, %v", n, err)
	}
	if string(flat(m)) != "defghij-tail" {
		t.Fatalf("unsent bytes %q", flat(m))
	}
	if st := p.Stats(); st.Outstanding != 2 {
		t.Fatalf("sent buffer not released: %+v", st)
	}
	var rest bytes.Buffer
	if _, err := m.WriteTo(&rest); err != nil || rest.String() != "defghij-tail" || m.Len() != 0 {
		t.Fatalf("second WriteTo: %q, %v, Len %d", rest.String(), err, m.Len())
	}
	if st := p.Stats(); st.Outstanding != 0 {
		t.Fatalf("leak after WriteTo: %+v", st)
	}
}

func TestWriteToOneFragment(t *testing.T) {
	p := newTestPool(t, 64, 8, true)
	m := NewMessage(p)
	m.ReadFrom(bytes.NewReader([]byte("payload")))
	h, _ := m.Push(4)
	copy(h, "HDR:")
	if m.NumFragments() != 1 {
		t.Fatalf("%d fragments, want 1", m.NumFragments())
	}
	w := &errWriter{limit: 6}
	if n, err := m.WriteTo(w); n != 6 || !errors.Is(err, errFull) || string(flat(m)) != "yload" {
		t.Fatalf("WriteTo = %d, %v; left %q", n, err, flat(m))
	}
	var out bytes.Buffer
	if n, err := m.WriteTo(&out); n != 5 || err != nil || out.String() != "yload" || m.Len() != 0 {
		t.Fatalf("second WriteTo = %d, %v, %q", n, err, out.String())
	}
	if st := p.Stats(); st.Outstanding != 0 {
		t.Fatalf("leak: %+v", st)
	}
}

func TestAppendBytesBorrows(t *testing.T) {
	var m Message
	ext := []byte("external")
	m.AppendBytes(ext)
	m.AppendBytes(nil)
	if m.NumFragments() != 1 || &m.Fragment(0)[0] != &ext[0] {
		t.Fatal("AppendBytes copied or added an empty fragment")
	}
	var out bytes.Buffer
	if _, err := m.WriteTo(&out); err != nil || out.String() != "external" {
		t.Fatalf("WriteTo = %q, %v", out.String(), err)
	}
}

func TestCopyToCountsCopies(t *testing.T) {
	p := newTestPool(t, 4, 0, false)
	var acct Accounting
	m := NewMessage(p)
	defer m.Release()
	m.SetAccounting(&acct)
	m.ReadFrom(bytes.NewReader([]byte("0123456789")))
	acct.AddPayload(10)
	dst := make([]byte, 6)
	if n := m.CopyTo(dst); n != 6 || string(dst) != "012345" {
		t.Fatalf("CopyTo = %d, %q", n, dst)
	}
	st := acct.Snapshot()
	if st.Copied != 6 || st.CopiesPerByte() != 0.6 || st.CrossingsPerByte() != 1 {
		t.Fatalf("accounting %+v (%v)", st, st)
	}
}

// TestMessageEditing is the property: any sequence of push, pop, trim,
// truncate, append, split, join, clone, read and write on a few messages
// gives the same bytes as the same edits on flat []byte models, copies no
// payload byte, and leaks no buffer.
func TestMessageEditing(t *testing.T) {
	rapid.Check(t, messageMachine)
}

// FuzzMessageEditing runs the same property from fuzzed bytes.
func FuzzMessageEditing(f *testing.F) {
	f.Fuzz(rapid.MakeFuzz(messageMachine))
}

func messageMachine(t *rapid.T) {
	size := rapid.IntRange(1, 24).Draw(t, "size")
	headroom := rapid.IntRange(0, 12).Draw(t, "headroom")
	p := newTestPool(t, size, headroom, true)
	hp := p
	if rapid.Bool().Draw(t, "separate header pool") {
		hp = newTestPool(t, 1, rapid.IntRange(0, 12).Draw(t, "header headroom"), true)
	}
	const k = 3
	var acct Accounting
	msgs := make([]*Message, k)
	models := make([][]byte, k)
	for i := range msgs {
		msgs[i] = NewMessage(p)
		msgs[i].SetHeaderPool(hp)
		msgs[i].SetAccounting(&acct)
		models[i] = []byte{}
	}
	idx := func(t *rapid.T, label string) int { return rapid.IntRange(0, k-1).Draw(t, label) }
	two := func(t *rapid.T) (int, int) {
		i := idx(t, "i")
		j := rapid.IntRange(0, k-2).Draw(t, "j")
		if j >= i {
			j++
		}
		return i, j
	}
	data := func(t *rapid.T, max int) []byte {
		return rapid.SliceOfN(rapid.Byte(), 0, max).Draw(t, "data")
	}
	t.Repeat(map[string]func(*rapid.T){
		"append": func(t *rapid.T) {
			i := idx(t, "i")
			b := p.Get()
			payload := data(t, size)
			copy(b.Writable(), payload)
			off := rapid.IntRange(0, len(payload)).Draw(t, "off")
			n := rapid.IntRange(0, len(payload)-off).Draw(t, "n")
			if err := msgs[i].Append(b, off, n); err != nil {
				t.Fatal(err)
			}
			models[i] = append(models[i], payload[off:off+n]...)
		},
		"append bytes": func(t *rapid.T) {
			i := idx(t, "i")
			d := data(t, 2*size)
			msgs[i].AppendBytes(d) // d is never changed afterwards
			models[i] = append(models[i], d...)
		},
		"push": func(t *rapid.T) {
			i := idx(t, "i")
			hdr := data(t, max(headroom, hp.Headroom())+2)
			h, err := msgs[i].Push(len(hdr))
			if err != nil {
				if !errors.Is(err, ErrNoHeadroom) || len(hdr) <= hp.Headroom() {
					t.Fatalf("Push(%d) with headroom %d/%d: %v", len(hdr), headroom, hp.Headroom(), err)
				}
				return
			}
			if len(h) != len(hdr) {
				t.Fatalf("Push(%d) returned %d bytes", len(hdr), len(h))
			}
			copy(h, hdr)
			models[i] = append(append([]byte{}, hdr...), models[i]...)
		},
		"pop": func(t *rapid.T) {
			i := idx(t, "i")
			n := rapid.IntRange(0, len(models[i])+2).Draw(t, "n")
			dst := make([]byte, n)
			err := msgs[i].Pop(dst)
			if n > len(models[i]) {
				if !errors.Is(err, ErrShort) {
					t.Fatalf("Pop(%d) of %d bytes: %v", n, len(models[i]), err)
				}
				return
			}
			if err != nil || !bytes.Equal(dst, models[i][:n]) {
				t.Fatalf("Pop(%d) = %q, %v; want %q", n, dst, err, models[i][:n])
			}
			models[i] = models[i][n:]
		},
		"front": func(t *rapid.T) {
			i := idx(t, "i")
			n := rapid.IntRange(0, len(models[i])).Draw(t, "n")
			f, ok := msgs[i].Front(n)
			first := 0
			if msgs[i].NumFragments() > 0 {
				first = len(msgs[i].Fragment(0))
			}
			if ok != (n <= first) {
				t.Fatalf("Front(%d) ok=%v with a %d-byte first fragment", n, ok, first)
			}
			if ok && !bytes.Equal(f, models[i][:n]) {
				t.Fatalf("Front(%d) = %q, want %q", n, f, models[i][:n])
			}
		},
		"trim front": func(t *rapid.T) {
			i := idx(t, "i")
			n := rapid.IntRange(0, len(models[i])).Draw(t, "n")
			if err := msgs[i].TrimFront(n); err != nil {
				t.Fatal(err)
			}
			models[i] = models[i][n:]
		},
		"truncate": func(t *rapid.T) {
			i := idx(t, "i")
			n := rapid.IntRange(0, len(models[i])).Draw(t, "n")
			if err := msgs[i].Truncate(n); err != nil {
				t.Fatal(err)
			}
			models[i] = models[i][:n]
		},
		"split": func(t *rapid.T) {
			i, j := two(t)
			off := rapid.IntRange(0, len(models[i])).Draw(t, "off")
			if err := msgs[i].Split(off, msgs[j]); err != nil {
				t.Fatal(err)
			}
			models[j] = append(models[j], models[i][off:]...)
			models[i] = models[i][:off]
		},
		"join": func(t *rapid.T) {
			i, j := two(t)
			if err := msgs[i].Join(msgs[j]); err != nil {
				t.Fatal(err)
			}
			models[i] = append(models[i], models[j]...)
			models[j] = []byte{}
		},
		"clone": func(t *rapid.T) {
			i, j := two(t)
			if err := msgs[i].Clone(msgs[j]); err != nil {
				t.Fatal(err)
			}
			models[j] = append(models[j], models[i]...)
		},
		"read from": func(t *rapid.T) {
			i := idx(t, "i")
			d := data(t, 3*size)
			if _, err := msgs[i].ReadFrom(bytes.NewReader(d)); err != nil {
				t.Fatal(err)
			}
			models[i] = append(models[i], d...)
		},
		"read": func(t *rapid.T) {
			i := idx(t, "i")
			p := make([]byte, rapid.IntRange(0, len(models[i])+2).Draw(t, "n"))
			before := acct.Snapshot().Copied
			n, err := msgs[i].Read(p)
			want := min(len(p), len(models[i]))
			switch {
			case len(models[i]) == 0 && len(p) > 0:
				if n != 0 || err != io.EOF {
					t.Fatalf("Read of an empty message = %d, %v", n, err)
				}
			case n != want || err != nil || !bytes.Equal(p[:n], models[i][:n]):
				t.Fatalf("Read(%d) = %d, %v, %q; model %q", len(p), n, err, p[:n], models[i])
			}
			// Read is the one edit here that copies: check its count, then
			// take it out of the tally.
			if c := acct.Snapshot().Copied - before; c != int64(n) {
				t.Fatalf("Read of %d bytes counted %d copied", n, c)
			}
			acct.AddCopy(-int64(n))
			models[i] = models[i][n:]
		},
		"write to": func(t *rapid.T) {
			i := idx(t, "i")
			var out bytes.Buffer
			n, err := msgs[i].WriteTo(&out)
			if err != nil || n != int64(len(models[i])) || !bytes.Equal(out.Bytes(), models[i]) {
				t.Fatalf("WriteTo = %d, %v, %q; want %q", n, err, out.Bytes(), models[i])
			}
			models[i] = []byte{}
		},
		"read from at": func(t *rapid.T) {
			i := idx(t, "i")
			d := data(t, 3*size)
			off := rapid.IntRange(0, len(d)).Draw(t, "off")
			n := rapid.IntRange(0, len(d)-off+2).Draw(t, "n")
			got, err := msgs[i].ReadFromAt(bytes.NewReader(d), int64(off), int64(n))
			avail := min(n, len(d)-off)
			if got != int64(avail) || (avail < n) != (err == io.ErrUnexpectedEOF) || (avail == n && err != nil) {
				t.Fatalf("ReadFromAt(%d, %d) of %d bytes = %d, %v", off, n, len(d), got, err)
			}
			models[i] = append(models[i], d[off:off+avail]...)
		},
		"write to at": func(t *rapid.T) {
			i := idx(t, "i")
			off := rapid.IntRange(0, 10).Draw(t, "off")
			var dst atWriter
			n, err := msgs[i].WriteToAt(&dst, int64(off))
			var want []byte // nothing written for an empty message
			if len(models[i]) > 0 {
				want = append(make([]byte, off), models[i]...)
			}
			if err != nil || n != int64(len(models[i])) || !bytes.Equal(dst.b, want) {
				t.Fatalf("WriteToAt(%d) = %d, %v, %q; want %q", off, n, err, dst.b, want)
			}
			models[i] = []byte{}
		},
		"release": func(t *rapid.T) {
			i := idx(t, "i")
			msgs[i].Release()
			models[i] = []byte{}
		},
		"": func(t *rapid.T) {
			frags := 0
			for i, m := range msgs {
				if m.Len() != len(models[i]) {
					t.Fatalf("message %d: Len %d, model %d", i, m.Len(), len(models[i]))
				}
				if diff := cmp.Diff(models[i], flat(m)); diff != "" {
					t.Fatalf("message %d differs from the model (-model +message):\n%s", i, diff)
				}
				for f := 0; f < m.NumFragments(); f++ {
					if len(m.Fragment(f)) == 0 {
						t.Fatalf("message %d has an empty fragment %d", i, f)
					}
				}
				frags += m.NumFragments()
			}
			if out := p.Stats().Outstanding + hp.Stats().Outstanding*btoi(hp != p); out > int64(frags) {
				t.Fatalf("%d buffers outstanding for %d fragments: a leak", out, frags)
			}
			if c := acct.Snapshot().Copied; c != 0 {
				t.Fatalf("editing copied %d payload bytes", c)
			}
		},
	})
	for _, m := range msgs {
		m.Release()
	}
	if a, b := p.Stats().Outstanding, hp.Stats().Outstanding; a != 0 || b != 0 {
		t.Fatalf("after releasing every message: %d data and %d header buffers outstanding", a, b)
	}
}

func btoi(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// atWriter is an io.WriterAt over a growing slice.
type atWriter struct{ b []byte }

func (w *atWriter) WriteAt(p []byte, off int64) (int, error) {
	if end := int(off) + len(p); end > len(w.b) {
		w.b = append(w.b, make([]byte, end-len(w.b))...)
	}
	return copy(w.b[off:], p), nil
}

// TestReadFromAtWriteToAtFile moves a payload from one file to another at
// offsets through pooled buffers, with no user-space copy.
func TestReadFromAtWriteToAtFile(t *testing.T) {
	dir := t.TempDir()
	data := bytes.Repeat([]byte("0123456789abcdefghijklmnopqrstuvwxyz"), 5000) // 180000 bytes
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(filepath.Join(dir, "dst"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	p := newTestPool(t, 64<<10, 16, true)
	var acct Accounting
	m := NewMessage(p)
	m.SetAccounting(&acct)
	if n, err := m.ReadFromAt(in, 1000, 150_000); err != nil || n != 150_000 || m.NumFragments() != 3 {
		t.Fatalf("ReadFromAt = %d, %v, %d fragments", n, err, m.NumFragments())
	}
	if n, err := m.WriteToAt(out, 4096); err != nil || n != 150_000 || m.Len() != 0 {
		t.Fatalf("WriteToAt = %d, %v, %d left", n, err, m.Len())
	}
	got, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[4096:], data[1000:151_000]) || len(got) != 4096+150_000 {
		t.Fatal("destination file differs")
	}
	if st := acct.Snapshot(); st.Copied != 0 || st.Crossings != 300_000 {
		t.Fatalf("accounting %+v", st)
	}
	if n, err := m.ReadFromAt(in, int64(len(data))-10, 20); n != 10 || err != io.ErrUnexpectedEOF {
		t.Fatalf("ReadFromAt past EOF = %d, %v", n, err)
	}
	m.Release()
	if st := p.Stats(); st.Outstanding != 0 {
		t.Fatalf("leak: %+v", st)
	}
	if _, err := m.ReadFromAt(in, -1, 1); !errors.Is(err, ErrRange) {
		t.Fatalf("negative offset: %v", err)
	}
	if _, err := m.WriteToAt(out, -1); !errors.Is(err, ErrRange) {
		t.Fatalf("negative offset: %v", err)
	}
}

// halfWriter breaks io.Writer's contract: it takes half of each write and
// reports no error.
type halfWriter struct{ bytes.Buffer }

func (w *halfWriter) Write(p []byte) (int, error) { return w.Buffer.Write(p[:len(p)/2]) }

// badConn is a halfWriter posing as a socket whose descriptor cannot be
// had: a Batch writes it through net.Buffers.
type badConn struct{ halfWriter }

func (*badConn) SyscallConn() (syscall.RawConn, error) { return nil, errors.New("no descriptor") }

// A short write with no error is reported as io.ErrShortWrite, whatever
// the number of fragments and whichever way a Batch writes.
func TestWriteToShortWrite(t *testing.T) {
	p := newTestPool(t, 10, 0, true)
	for _, frags := range []int{1, 2} {
		m := NewMessage(p)
		m.ReadFrom(bytes.NewReader(bytes.Repeat([]byte{1}, 10*frags)))
		if n, err := m.WriteTo(&halfWriter{}); err != io.ErrShortWrite || int(n)+m.Len() != 10*frags {
			t.Errorf("%d fragments: WriteTo = %d, %v; %d bytes left", frags, n, err, m.Len())
		}
		m.Release()
	}
	m := NewMessage(p)
	m.ReadFrom(bytes.NewReader(bytes.Repeat([]byte{2}, 20)))
	b := NewBatch(&badConn{})
	b.Add(m)
	if n, err := b.Write(); err != io.ErrShortWrite || n >= 20 {
		t.Errorf("Batch.Write to a socket without a descriptor = %d, %v; want a short count and io.ErrShortWrite", n, err)
	}
	m.Release()
}
