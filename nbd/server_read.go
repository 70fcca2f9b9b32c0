package nbd

import (
	"encoding/binary"
)

// Replies to NBD_CMD_READ (simple, structured, or lent from the backend's
// memory) and NBD_CMD_BLOCK_STATUS.

// serverHoleChunkSize is the size of a whole OFFSET_HOLE chunk.
const serverHoleChunkSize = ChunkHeaderSize + OffsetHoleSize

// readSimple answers a READ with a simple reply: the data read into
// pooled buffers, the header pushed into the first one's headroom.
func (c *serverConn) readSimple(ts *serverTransmitState, s *serverSlot) {
	n := int64(s.req.Length)
	if n > 0 {
		s.reply.Init(c.srv.bufs.pool(n))
		if _, err := s.reply.ReadFromAt(c.export.Backend, int64(s.req.Offset), n); err != nil {
			c.sendError(ts, s, ErrnoOf(err), "")
			return
		}
	}
	h := c.pushHeader(s, SimpleReplySize)
	r := SimpleReply{Cookie: s.req.Cookie}
	r.Put((*[SimpleReplySize]byte)(h))
	c.send(ts, s)
}

// readStructured answers a READ with OFFSET_DATA chunks for data and
// OFFSET_HOLE chunks for ranges the backend reports as reading zero. The
// range is read into pooled buffers before anything is sent, so the last
// content chunk carries DONE; a reply of one data chunk has its header
// pushed into the first buffer's headroom, one of several chunks is cut
// into runs without copying (zerocopy's Split and Join), with the chunk
// headers between them.
func (c *serverConn) readStructured(ts *serverTransmitState, s *serverSlot) {
	r := &s.req
	if r.Length == 0 {
		b := c.pushHeader(s, ChunkHeaderSize)
		h := ChunkHeader{Flags: ReplyFlagDone, Type: ChunkNone, Cookie: r.Cookie}
		h.Put((*[ChunkHeaderSize]byte)(b))
		c.send(ts, s)
		return
	}
	runs := c.readRuns(s)
	single := len(runs) == 1 && !runs[0].hole
	data := &s.reply
	if !single {
		data = &s.data
	}
	data.Init(c.srv.bufs.pool(int64(r.Length)))
	if _, err := data.ReadFromAt(c.export.Backend, int64(r.Offset), int64(r.Length)); err != nil {
		data.Release()
		c.sendError(ts, s, ErrnoOf(err), "")
		return
	}
	if single {
		putDataChunkHeader(c.pushHeader(s, serverHeadroom), ReplyFlagDone, r.Cookie, runs[0])
		c.send(ts, s)
		return
	}
	hdrs := s.chunkHeaders(len(runs))
	tail := &s.tail
	for i, run := range runs {
		var flags ReplyFlags
		if i == len(runs)-1 {
			flags = ReplyFlagDone
		}
		if run.hole {
			b := hdrs[:serverHoleChunkSize]
			putHoleChunk(b, flags, r.Cookie, run)
			s.reply.AppendBytes(b)
			hdrs = hdrs[serverHoleChunkSize:]
			data.TrimFront(int(run.n))
			continue
		}
		b := hdrs[:serverHeadroom]
		putDataChunkHeader(b, flags, r.Cookie, run)
		s.reply.AppendBytes(b)
		hdrs = hdrs[serverHeadroom:]
		data.Split(int(run.n), tail)
		s.reply.Join(data)
		data, tail = tail, data
	}
	c.send(ts, s)
}

// putDataChunkHeader writes the header of an OFFSET_DATA chunk for run
// (chunk header and offset, serverHeadroom bytes) into b.
func putDataChunkHeader(b []byte, flags ReplyFlags, cookie uint64, run serverRun) {
	h := ChunkHeader{Flags: flags, Type: ChunkOffsetData, Cookie: cookie, Length: OffsetDataHeaderSize + run.n}
	h.Put((*[ChunkHeaderSize]byte)(b))
	binary.BigEndian.PutUint64(b[ChunkHeaderSize:], run.off)
}

// putHoleChunk writes a whole OFFSET_HOLE chunk for run into b.
func putHoleChunk(b []byte, flags ReplyFlags, cookie uint64, run serverRun) {
	h := ChunkHeader{Flags: flags, Type: ChunkOffsetHole, Cookie: cookie, Length: OffsetHoleSize}
	h.Put((*[ChunkHeaderSize]byte)(b))
	PutOffsetHole((*[OffsetHoleSize]byte)(b[ChunkHeaderSize:]), run.off, run.n)
}

// readLent answers a READ from a Lender's memory: the backend lends the
// pieces the read covers and the reply goes out as headers and those
// pieces in one writev, with no copy before the socket's. It sends what
// readStructured and readSimple send, byte for byte: holes as OFFSET_HOLE
// chunks (structured) or zeroes (simple).
func (c *serverConn) readLent(ts *serverTransmitState, s *serverSlot) {
	r := &s.req
	if r.Length == 0 {
		if c.structured {
			c.readStructured(ts, s)
		} else {
			c.readSimple(ts, s)
		}
		return
	}
	off, n := int64(r.Offset), int64(r.Length)
	s.pieces = c.export.lender.Lend(off, n, s.pieces[:0])
	s.lent = [2]int64{off, n}
	views, ext := c.lentViews(s)
	if !c.structured {
		c.pushHeader(s, SimpleReplySize)
		rep := SimpleReply{Cookie: r.Cookie}
		rep.Put((*[SimpleReplySize]byte)(s.small[:SimpleReplySize]))
		for _, v := range views {
			s.reply.AppendBytes(v)
		}
		c.send(ts, s)
		return
	}
	runs := serverSplitRuns(s.runs[:0], r, ext)
	hdrs := s.chunkHeaders(len(runs))
	i := 0 // in views
	for k, run := range runs {
		var flags ReplyFlags
		if k == len(runs)-1 {
			flags = ReplyFlagDone
		}
		if run.hole {
			b := hdrs[:serverHoleChunkSize]
			putHoleChunk(b, flags, r.Cookie, run)
			s.reply.AppendBytes(b)
			hdrs = hdrs[serverHoleChunkSize:]
			for left := int(run.n); left > 0; i++ {
				left -= int(ext[i].Length)
			}
			continue
		}
		b := hdrs[:serverHeadroom]
		putDataChunkHeader(b, flags, r.Cookie, run)
		s.reply.AppendBytes(b)
		hdrs = hdrs[serverHeadroom:]
		for left := int(run.n); left > 0; i++ {
			s.reply.AppendBytes(views[i])
			left -= len(views[i])
		}
	}
	c.send(ts, s)
}

// lentViews turns the pieces lent to s into the reply's data views (a
// hole becomes zeroes of its length, in pieces of at most
// len(serverZeroes)) and extents, a view each, so a structured reply
// splits into runs as readRuns splits a backend's block status.
func (c *serverConn) lentViews(s *serverSlot) ([][]byte, []Extent) {
	views, ext := s.views[:0], s.ext[:0]
	for _, p := range s.pieces {
		if p.Data != nil {
			views = append(views, p.Data)
			ext = append(ext, Extent{Length: uint32(len(p.Data))})
			continue
		}
		for left := p.Len; left > 0; {
			k := min(left, len(serverZeroes))
			views = append(views, serverZeroes[:k])
			ext = append(ext, Extent{Length: uint32(k), Flags: ExtentHole | ExtentZero})
			left -= k
		}
	}
	s.views = views
	if cap(ext) <= serverMaxExtents {
		s.ext = ext[:0]
	}
	return views, ext
}

// readRuns splits a read into data and hole runs from the backend's
// block status; without one (or under Export.NoReadHoles) the whole read
// is one data run.
func (c *serverConn) readRuns(s *serverSlot) []serverRun {
	r := &s.req
	runs := s.runs[:0]
	x := c.export
	if x.status == nil || x.NoReadHoles {
		return append(runs, serverRun{off: r.Offset, n: r.Length})
	}
	ext, err := x.status.BlockStatus(c.ctx, int64(r.Offset), int64(r.Length), s.ext[:0])
	if cap(ext) <= serverMaxExtents {
		s.ext = ext[:0]
	}
	if err != nil {
		return append(runs, serverRun{off: r.Offset, n: r.Length})
	}
	return serverSplitRuns(runs, r, ext)
}

// serverSplitRuns appends to runs the data and hole runs of read r that
// extents ext describe (ExtentZero: a hole), at most serverMaxReadRuns:
// past that, and past the extents, the rest is data. Under FlagDF a read
// with any data is one data run.
func serverSplitRuns(runs []serverRun, r *Request, ext []Extent) []serverRun {
	start := len(runs)
	off, end := r.Offset, r.Offset+uint64(r.Length)
	for _, e := range ext {
		if e.Length == 0 || off >= end {
			break
		}
		n := min(uint64(e.Length), end-off)
		hole := e.Flags.Has(ExtentZero)
		if k := len(runs); k > start && runs[k-1].hole == hole {
			runs[k-1].n += uint32(n)
		} else {
			if len(runs)-start == serverMaxReadRuns-1 {
				break
			}
			runs = append(runs, serverRun{off: off, n: uint32(n), hole: hole})
		}
		off += n
	}
	if off < end {
		if k := len(runs); k > start && !runs[k-1].hole {
			runs[k-1].n += uint32(end - off)
		} else {
			runs = append(runs, serverRun{off: off, n: uint32(end - off)})
		}
	}
	// proto.md: under DF at most one content chunk, and a range with both
	// data and holes MUST go as data.
	if r.Flags.Has(FlagDF) && len(runs)-start > 1 {
		return append(runs[:start], serverRun{off: r.Offset, n: r.Length})
	}
	return runs
}

// blockStatus answers NBD_CMD_BLOCK_STATUS with one BLOCK_STATUS chunk for
// base:allocation, describing at most serverBlockStatusWindow bytes in at
// most serverMaxExtents descriptors, none past the request, and no larger
// than the maximum payload (proto.md: a reply whose length the server
// controls MUST NOT be larger than the maximum block size).
func (c *serverConn) blockStatus(ts *serverTransmitState, s *serverSlot) {
	r := &s.req
	x := c.export
	maxExt := min(serverMaxExtents, int((x.maxPayload-BlockStatusHeaderSize)/ExtentSize))
	want := uint64(min(r.Length, serverBlockStatusWindow))
	var ext []Extent
	if x.status != nil {
		var err error
		ext, err = x.status.BlockStatus(c.ctx, int64(r.Offset), int64(want), s.ext[:0])
		if cap(ext) <= serverMaxExtents {
			s.ext = ext[:0]
		}
		if err != nil {
			c.sendError(ts, s, ErrnoOf(err), "")
			return
		}
	}
	// Clean what the backend gave: no empty extents, nothing past the
	// request, neighbours with equal flags merged, bounded count.
	out := ext[:0]
	var sum uint64
	for _, e := range ext {
		if e.Length == 0 || sum >= want {
			continue
		}
		if n := uint64(e.Length); n > want-sum {
			e.Length = uint32(want - sum)
		}
		sum += uint64(e.Length)
		if k := len(out); k > 0 && out[k-1].Flags == e.Flags {
			out[k-1].Length += e.Length
			continue
		}
		if len(out) == maxExt {
			break
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		out = append(s.ext[:0], Extent{Length: uint32(want)})
	}
	if r.Flags.Has(FlagReqOne) {
		out = out[:1]
	}
	// The reply, at most serverMaxExtents descriptors, fits one small
	// buffer.
	n := ChunkHeaderSize + BlockStatusHeaderSize + ExtentSize*len(out)
	buf := c.srv.bufs.small.Get()
	b := buf.Writable()[:ChunkHeaderSize]
	h := ChunkHeader{Flags: ReplyFlagDone, Type: ChunkBlockStatus, Cookie: r.Cookie, Length: uint32(n - ChunkHeaderSize)}
	h.Put((*[ChunkHeaderSize]byte)(b))
	AppendBlockStatus(b, serverMetaContextID, out)
	s.reply.Append(buf, 0, n)
	c.send(ts, s)
}
