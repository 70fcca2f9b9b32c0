package zerocopy_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nhdkit/nhd/zerocopy"
)

// A buffer is filled by its owner, handed off by reference, and returns to
// the pool on its last release.
func ExamplePool() {
	pool := zerocopy.NewPool(4096)
	b := pool.Get()
	copy(b.Writable(), "sector data")

	shared := b.Ref() // hand-off: two references, read-only from now on
	fmt.Println(b.Refs(), b.Frozen(), string(shared.Bytes()[:11]))

	shared.Release()
	b.Release() // the last reference: back to the pool
	st := pool.Stats()
	fmt.Println(st.Outstanding, st.Free)
	// Output:
	// 2 true sector data
	// 0 1
}

// Misuse panics with an error that wraps a sentinel.
func ExampleBuf_Release() {
	pool := zerocopy.NewPool(512)
	b := pool.Get()
	b.Release()
	defer func() {
		err := recover().(error)
		fmt.Println(errors.Is(err, zerocopy.ErrDoubleRelease))
	}()
	b.Release()
	// Output: true
}

// An NBD simple reply built x-kernel style: the payload is read into pooled
// buffers, the 16-byte header pushed in front into the headroom, and the
// message cut and rejoined, all without copying the payload.
func ExampleMessage() {
	pool := zerocopy.NewPool(8)
	m := zerocopy.NewMessage(pool)
	defer m.Release()
	m.ReadFrom(strings.NewReader("payload-of-20-bytes!"))
	fmt.Println(m.Len(), m.NumFragments())

	h, _ := m.Push(16)
	binary.BigEndian.PutUint32(h[0:], 0x67446698) // reply magic
	binary.BigEndian.PutUint32(h[4:], 0)          // error
	binary.BigEndian.PutUint64(h[8:], 42)         // cookie
	fmt.Println(m.Len(), m.NumFragments())        // the header went into headroom

	var tail zerocopy.Message
	m.Split(16+10, &tail) // header and 10 bytes | 10 bytes
	fmt.Printf("%d + %d bytes\n", m.Len(), tail.Len())
	m.Join(&tail)

	var hdr [16]byte
	m.Pop(hdr[:])
	fmt.Printf("cookie %d, payload %q\n", binary.BigEndian.Uint64(hdr[8:]), m.Buffers(nil))
	// Output:
	// 20 3
	// 36 3
	// 26 + 10 bytes
	// cookie 42, payload ["payload-" "of-20-by" "tes!"]
}

// WriteTo sends every fragment (with one writev on a socket) and releases
// the buffers it sent.
func ExampleMessage_WriteTo() {
	pool := zerocopy.NewPool(64)
	m := zerocopy.NewMessage(pool)
	m.AppendBytes([]byte("world"))
	h, _ := m.Push(6)
	copy(h, "hello ")

	var out bytes.Buffer
	n, err := m.WriteTo(&out)
	fmt.Println(n, err, out.String(), m.Len(), pool.Stats().Outstanding)
	// Output: 11 <nil> hello world 0 0
}

// Copies per byte before and after: flattening a header and a payload into
// one frame copies every byte once; sending the message as it is copies none.
func ExampleAccounting() {
	pool := zerocopy.NewPool(64 << 10)
	payload := pool.Get()
	payload.Freeze()
	defer payload.Release()

	var before, after zerocopy.Accounting
	frame := make([]byte, 16+64<<10)
	for _, acct := range []*zerocopy.Accounting{&before, &after} {
		m := zerocopy.NewMessage(pool)
		m.SetAccounting(acct)
		acct.AddPayload(64 << 10)
		m.Append(payload.Ref(), 0, 64<<10)
		m.Push(16)
		if acct == &before {
			m.CopyTo(frame) // then write(frame)
			m.Release()
		} else {
			m.WriteTo(discard{})
		}
	}
	fmt.Printf("before: %.2f copies/byte\nafter:  %.2f copies/byte\n",
		before.Snapshot().CopiesPerByte(), after.Snapshot().CopiesPerByte())
	// Output:
	// before: 1.00 copies/byte
	// after:  0.00 copies/byte
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// A Batch writes several messages, each a header pushed into the headroom
// of its payload's buffer, together: here, on a writer without writev, in
// one Write.
func ExampleBatch() {
	pool := zerocopy.NewPool(64)
	var out bytes.Buffer
	batch := zerocopy.NewBatch(&out)
	var msgs [2]zerocopy.Message
	for i, payload := range []string{"first", "second"} {
		m := &msgs[i]
		m.Init(pool)
		m.ReadFromN(strings.NewReader(payload), int64(len(payload)))
		h, _ := m.Push(3)
		copy(h, fmt.Sprintf("%d: ", i))
		batch.Add(m)
	}
	n, err := batch.Write()
	fmt.Println(n, err, strconv.Quote(out.String()))
	for i := range msgs {
		msgs[i].Release()
	}
	fmt.Println(pool.Stats().Outstanding, "buffers outstanding")
	// Output:
	// 17 <nil> "0: first1: second"
	// 0 buffers outstanding
}
