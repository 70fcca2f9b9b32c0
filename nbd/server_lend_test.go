package nbd

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// serverCopiedDisk is a MemDisk the server does not recognise as one, so
// its reads are copied into the slot's buffer (readStructured,
// readSimple) instead of sent from the disk's memory (readLent).
type serverCopiedDisk struct {
	*MemDisk
	serverNotLender
}

// serverNotLender hides a MemDisk's Lend, GiveBack and TakePage: names
// at the same depth of an embedding are ambiguous, so none is promoted.
type serverNotLender struct{ Lend, GiveBack, TakePage struct{} }

// Reads sent from a MemDisk's memory are the replies the copying path
// sends for the same disk, byte for byte: simple and structured, with
// holes, under DF, and with more runs than one reply carries.
func TestServerLentReadsMatchCopied(t *testing.T) {
	const chunks = serverMaxReadRuns + 16
	size := int64(chunks*MemDiskChunkSize + 1000)
	d := NewMemDisk(size)
	lent := serverTestStart(t, &Server{Exports: []Export{{Backend: d}}})
	copied := serverTestStart(t, &Server{Exports: []Export{{Backend: serverCopiedDisk{MemDisk: d}}}})
	type pair struct{ lent, copied *serverRawClient }
	clients := map[bool]pair{}
	for _, structured := range []bool{false, true} {
		p := pair{serverTestDial(t, lent), serverTestDial(t, copied)}
		p.lent.negotiate("", structured, false)
		p.copied.negotiate("", structured, false)
		clients[structured] = p
	}
	// reply reads the whole reply to a read of n bytes, as it came.
	reply := func(c *serverRawClient, structured bool, n int) []byte {
		if !structured {
			r, data := c.simple(n)
			var b [SimpleReplySize]byte
			r.Put(&b)
			return append(b[:], data...)
		}
		var out []byte
		for _, ch := range c.chunks() {
			var b [ChunkHeaderSize]byte
			ch.ChunkHeader.Put(&b)
			out = append(append(out, b[:]...), ch.payload...)
		}
		return out
	}
	rapid.Check(t, func(rt *rapid.T) {
		// The connections' deadline bounds each case, not the whole run
		// (under -race on a loaded machine the run takes tens of seconds).
		for _, p := range clients {
			p.lent.nc.SetDeadline(time.Now().Add(20 * time.Second))
			p.copied.nc.SetDeadline(time.Now().Add(20 * time.Second))
		}
		// A layout of data and holes, chunk by chunk, some data partial;
		// or a checkerboard, more runs than a reply carries.
		checkerboard := rapid.Bool().Draw(rt, "checkerboard")
		for i := range int64(chunks + 1) {
			off, n := i*MemDiskChunkSize, min(MemDiskChunkSize, size-i*MemDiskChunkSize)
			kind := int(i % 2)
			if !checkerboard {
				kind = rapid.IntRange(0, 2).Draw(rt, "chunk")
			}
			switch kind {
			case 0:
				d.Trim(t.Context(), off, n)
			case 1:
				d.WriteAt(bytes.Repeat([]byte{byte(i + 1)}, int(n)), off)
			case 2:
				d.Trim(t.Context(), off, n)
				d.WriteAt([]byte{byte(i), 0, byte(i)}, off+rapid.Int64Range(0, n-3).Draw(rt, "at"))
			}
		}
		for range rapid.IntRange(1, 8).Draw(rt, "reads") {
			structured := rapid.Bool().Draw(rt, "structured")
			var flags CmdFlags
			if structured && rapid.Bool().Draw(rt, "DF") {
				flags = FlagDF
			}
			off := rapid.Int64Range(0, size-1).Draw(rt, "off")
			var n int64
			switch rapid.IntRange(0, 2).Draw(rt, "length") {
			case 0:
				n = rapid.Int64Range(0, min(4096, size-off)).Draw(rt, "n")
			case 1:
				n = rapid.Int64Range(0, min(3*MemDiskChunkSize, size-off)).Draw(rt, "n")
			case 2: // the rest of the disk, with the smallest offsets likeliest
				off /= rapid.Int64Range(1, 1000).Draw(rt, "div")
				n = size - off
			}
			p := clients[structured]
			p.lent.request(CmdRead, flags, 1, uint64(off), uint32(n), nil)
			p.copied.request(CmdRead, flags, 1, uint64(off), uint32(n), nil)
			got, want := reply(p.lent, structured, int(n)), reply(p.copied, structured, int(n))
			if !bytes.Equal(got, want) {
				rt.Fatalf("read [%d,+%d) flags %v structured %v: the lent reply (%d bytes) differs from the copied one (%d bytes)",
					off, n, flags, structured, len(got), len(want))
			}
		}
	})
	serverTestNoLoans(t, d)
}

// A read reply waiting on a client that does not read is sent from the
// disk's memory, lent; writes meanwhile land in copies, so the reply
// still carries what the disk held when the read was served.
func TestServerLentReadKeepsItsData(t *testing.T) {
	const n = 8 << 20 // more than the socket buffers hold
	d := NewMemDisk(n)
	d.WriteAt(bytes.Repeat([]byte{1}, n), 0)
	path := serverTestStart(t, &Server{Exports: []Export{{Backend: d}}})
	c := serverTestDial(t, path)
	c.negotiate("", true, false)
	c.request(CmdRead, 0, 1, 0, n, nil)
	for deadline := time.Now().Add(10 * time.Second); d.loans[n/MemDiskChunkSize-1].Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the read's last chunk was never lent")
		}
		time.Sleep(time.Millisecond)
	}
	// The chunks the reply is sent from: once it is written, nothing of the
	// server's may keep them (the disk has copies by then).
	freed := make(chan int, 2)
	for _, i := range []int{0, n/MemDiskChunkSize - 1} {
		runtime.SetFinalizer(d.chunks[i], func(*[MemDiskChunkSize]byte) { freed <- i })
	}
	d.WriteAt(bytes.Repeat([]byte{2}, n), 0)
	got, holes, err := serverTestAssemble(t, c.chunks(), 0, n)
	if err != nil || holes != 0 {
		t.Fatalf("read: %v, %d bytes of holes", err, holes)
	}
	if i := bytes.IndexByte(got, 2); i >= 0 {
		t.Fatalf("byte %d of the reply was written after the read was served", i)
	}
	now := make([]byte, n)
	d.ReadAt(now, 0)
	if !bytes.Equal(now, bytes.Repeat([]byte{2}, n)) {
		t.Fatal("the write under the loan is not on the disk")
	}
	serverTestNoLoans(t, d)
	deadline := time.After(5 * time.Second)
	for done := 0; done < 2; {
		runtime.GC()
		select {
		case <-freed:
			done++
		case <-deadline:
			t.Fatal("a chunk replaced under a loan is still referenced after the reply was written")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// serverTestNoLoans waits for every loan of d to be given back (a reply
// is given back after its client has it).
func serverTestNoLoans(t *testing.T, d *MemDisk) {
	t.Helper()
	want := make([]int32, len(d.loans))
	var got []int32
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		got = got[:0]
		for i := range d.loans {
			got = append(got, d.loans[i].Load())
		}
		if cmp.Equal(got, want) || time.Now().After(deadline) {
			break
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("loans outstanding (-want +got):\n%s", diff)
	}
}
