package tcp

import (
	"hash/crc32"
	"io"

	"github.com/nhdkit/nhd/nbd"
)

// How the target moves a command's data without copying it more than
// once: a read from an nbd.Lender is sent from the backend's memory (the
// lent pieces go into the writev behind the C2HData header), a write's
// data is read from the socket straight into the buffer handed to the
// backend, and the whole pages of a write to an nbd.PageTaker are handed
// over instead of copied: one page in the slot's buffer (writePage),
// several in pages of the slot's own (takesPages). nbd's server does the
// same (nbd/server_read.go, nbd/server_request.go).

// directMin is the smallest data the reader reads straight from the
// socket rather than through its buffer.
const directMin = 16 << 10

// fillAfterDirect bounds the first read into the reader's buffer after a
// direct read: a command header, so that the data following it is not
// pulled into the buffer (and copied out again) with it.
const fillAfterDirect = CmdSize + DigestSize

// readPayload reads the next len(b) bytes of the PDU's data into b: what
// is buffered from the buffer, the rest of a large one straight from the
// socket.
func (c *conn) readPayload(b []byte) error {
	r := c.r
	n := r.br.Buffered()
	if len(b) < directMin || n >= len(b) {
		return r.readData(b)
	}
	if len(b) > r.data {
		panic("nvme/tcp: readPayload past the PDU's data")
	}
	if n > 0 {
		r.br.Read(b[:n]) // cannot fail: n bytes are buffered
	}
	c.src.retries = 0
	if _, err := io.ReadFull((*directReader)(c.src), b[n:]); err != nil {
		return noEOF(err)
	}
	c.src.limit = fillAfterDirect
	r.data -= len(b)
	if r.dgst {
		r.crc = crc32.Update(r.crc, castagnoli, b)
	}
	return nil
}

// lendRead serves read i from the backend's memory if the backend lends
// it (nvme.Queue.LendRead), in at most maxIOV-3 pieces of at most a page
// each (so the C2HData and its CapsuleResp fit one writev). It reports
// false, having done nothing, otherwise.
func (c *conn) lendRead(i uint16, n int) bool {
	sl := &c.slots[i]
	pieces, loan, cpl, ok := c.q.LendRead(&sl.cmd, n, sl.pieces[:0])
	sl.pieces = pieces
	if !ok {
		return false
	}
	fits := len(pieces) <= maxIOV-3
	for _, p := range pieces {
		fits = fits && p.Len <= len(holeZeroes)
	}
	if !fits {
		clear(pieces)
		sl.pieces = pieces[:0]
		loan.GiveBack()
		return false
	}
	sl.loan, sl.cpl, sl.n = loan, cpl, n
	return true
}

// writePage hands data, the slot's whole buffer when it is exactly a
// page, to the backend (nvme.Queue.WritePage) and takes the page it gives
// back as the slot's next buffer. It reports false, having done nothing,
// when the backend does not take it.
func (c *conn) writePage(sl *slot, data []byte) bool {
	if len(data) != nbd.PageSize || cap(sl.buf) != nbd.PageSize || &data[0] != &sl.buf[:1][0] {
		return false
	}
	old, cpl, ok := c.q.WritePage(&sl.cmd, (*[nbd.PageSize]byte)(data))
	if !ok {
		return false
	}
	sl.buf = nil
	if old != nil {
		sl.buf = old[:]
	}
	sl.cpl = cpl
	return true
}

// takesPages reports whether the slot's command, whose data is n bytes,
// is a write of more than one whole page that the backend takes as pages
// (nvme.Queue.TakesPages; one page goes through writePage), and if so
// makes the slot's pages ready to read it into.
func (c *conn) takesPages(sl *slot, n int) bool {
	k := c.q.TakesPages(&sl.cmd)
	if k < 2 || k*nbd.PageSize != n {
		return false
	}
	if cap(sl.pages) < k {
		p := make([]*[nbd.PageSize]byte, k)
		copy(p, sl.pages[:cap(sl.pages)])
		sl.pages = p
	}
	sl.pages = sl.pages[:k]
	for j, p := range sl.pages {
		if p == nil {
			sl.pages[j] = new([nbd.PageSize]byte)
		}
	}
	sl.paged, sl.n = true, n
	return true
}

// maxReadPieces bounds the pieces of one readv into a write's pages (and
// what follows them): 1 MiB of pages a call.
const maxReadPieces = 17

// readPages reads the next n bytes of the PDU's data into the slot's
// pages, from byte at of the command's data on: what is buffered, then
// the rest straight from the socket, into as many pages as one readv
// takes (readPagesDirect), as readPayload does into one buffer.
func (c *conn) readPages(sl *slot, at, n int) error {
	r := c.r
	if c.src.rc != nil && n >= directMin && len(c.src.ahead) == 0 && r.br.Buffered() < n {
		if n > r.data {
			panic("nvme/tcp: readPages past the PDU's data")
		}
		for b := r.br.Buffered(); b > 0; {
			p := sl.piece(at, b)
			if err := r.readData(p); err != nil {
				return err
			}
			at, n, b = at+len(p), n-len(p), b-len(p)
		}
		return c.readPagesDirect(sl, at, n)
	}
	for n > 0 {
		p := sl.piece(at, n)
		if err := c.readPayload(p); err != nil {
			return err
		}
		at, n = at+len(p), n-len(p)
	}
	return nil
}

// piece returns the slot's pages from byte at of the command's data on, at
// most n bytes and no further than the end of at's page.
func (sl *slot) piece(at, n int) []byte {
	o := at % nbd.PageSize
	return sl.pages[at/nbd.PageSize][o : o+min(n, nbd.PageSize-o)]
}

// writePages hands the slot's pages to the backend (nvme.Queue.WritePages);
// the pages it gives back are the slot's for its next such write. It
// reports false when the queue no longer takes them (the controller or
// the namespace changed since takesPages).
func (c *conn) writePages(sl *slot) bool {
	sl.paged = false
	cpl, ok := c.q.WritePages(&sl.cmd, sl.pages)
	if ok {
		sl.cpl = cpl
	}
	return ok
}

// gather copies the slot's pages into its buffer, for Exec.
func (sl *slot) gather() []byte {
	b := sl.data(sl.n)
	for j, p := range sl.pages {
		copy(b[j*nbd.PageSize:], p[:])
	}
	return b
}

// readPagesDirect reads n bytes of the PDU's data, none of them
// buffered, from the socket straight into the slot's pages from byte at
// of the command's data on, digesting them.
func (c *conn) readPagesDirect(sl *slot, at, n int) error {
	r := c.r
	c.src.retries = 0
	defer clear(c.pieces[:cap(c.pieces)]) // keep no page alive
	for n > 0 {
		pieces := c.pieces[:0]
		for a, m := at, n; m > 0 && len(pieces) < maxReadPieces-1; {
			p := sl.piece(a, m)
			pieces = append(pieces, p)
			a, m = a+len(p), m-len(p)
		}
		got, err := (*directReader)(c.src).readPieces(pieces)
		if err == nil && got == 0 {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return noEOF(err)
		}
		r.data -= got
		at, n = at+got, n-got
		for _, p := range pieces {
			k := min(got, len(p))
			if r.dgst {
				r.crc = crc32.Update(r.crc, castagnoli, p[:k])
			}
			if got -= k; got == 0 {
				break
			}
		}
	}
	c.src.limit = fillAfterDirect
	return nil
}
