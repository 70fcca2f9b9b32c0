package tcp

import (
	"bufio"
	"encoding/binary"
	"hash/crc32"
	"io"
	"strconv"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Digest returns the CRC32C of b, the header and data digest of NVMe/TCP
// (NVMe/TCP 1.0, 3.6.1): initial value and final XOR all ones, as
// hash/crc32 computes it. It is stored little-endian.
func Digest(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// digested reports whether PDUs of type t carry digests when enabled
// (every PDU but ICReq, ICResp and the TermReqs).
func digested(t PDUType) bool {
	return t != TypeICReq && t != TypeICResp && t != TypeH2CTermReq && t != TypeC2HTermReq
}

// framing is what both ends agreed in ICReq/ICResp.
type framing struct {
	hdgst, ddgst bool
}

// layout returns the common header of a PDU of type t carrying dataLen
// bytes of data, with PDO right after the header (and its digest).
func (f framing) layout(t PDUType, dataLen int) Header {
	h := Header{Type: t, HLen: uint8(t.hlen())}
	off := t.hlen()
	if f.hdgst && digested(t) {
		h.Flags |= FlagHDGST
		off += DigestSize
	}
	if dataLen > 0 {
		h.PDO = uint8(off)
		off += dataLen
		if f.ddgst && digested(t) {
			h.Flags |= FlagDDGST
			off += DigestSize
		}
	}
	h.PLen = uint32(off)
	return h
}

// sealHeader writes the header digest after the hlen bytes of b when
// header digests are on, and returns the bytes to send.
func (f framing) sealHeader(b []byte, hlen int) []byte {
	if !f.hdgst {
		return b[:hlen]
	}
	binary.LittleEndian.PutUint32(b[hlen:], Digest(b[:hlen]))
	return b[:hlen+DigestSize]
}

// pduReader reads PDUs from a connection: next reads and checks a header,
// readData the data that follows into the caller's buffer (through the
// reader's own), readPayload likewise but, given a directSource, a large
// payload straight from the connection. The header bytes stay in hdr
// until the next call to next.
type pduReader struct {
	framing
	br      *bufio.Reader
	maxData int // most data bytes in one PDU
	hdr     [ICSize + DigestSize]byte
	got     int // bytes of hdr read for this PDU (the rest is an earlier one's)
	h       Header
	data    int    // data bytes of this PDU not read yet
	crc     uint32 // running data digest
	dgst    bool   // this PDU's data has a digest
	pad     [256]byte
	dg      [DigestSize]byte
	direct  directSource // nil: every payload goes through br
	grace   bool         // a direct payload was read, and no PDU without data since
}

// A directSource is the connection under a pduReader's buffer when it can
// also read a large payload straight into its destination (readPayload).
// It is used by the pduReader's goroutine only.
type directSource interface {
	// Read is what the buffer fills from.
	io.Reader
	// readDirect reads into p from the connection, past the buffer. It
	// may read a few headers' worth beyond p, which the next Read returns
	// first; from then on Read reads no more than a few headers at once,
	// so that the next large payload is not pulled into the buffer with
	// them, until bulk is called.
	readDirect(p []byte) (int, error)
	// bulk lets Read fill the whole buffer again.
	bulk()
}

func newPDUReader(r io.Reader, maxData int) *pduReader {
	return &pduReader{br: bufio.NewReaderSize(r, 64<<10), maxData: maxData}
}

// next reads the next PDU header, checks its framing and its header
// digest, and skips any padding before its data. Framing errors are
// *FatalError values; others come from the connection.
func (r *pduReader) next() error {
	if r.data > 0 {
		if err := r.discard(); err != nil {
			return err
		}
	}
	r.got = 0
	if _, err := io.ReadFull(r.br, r.hdr[:CommonSize]); err != nil {
		return err
	}
	r.got = CommonSize
	h := &r.h
	h.Parse((*[CommonSize]byte)(r.hdr[:CommonSize]))
	hl := h.Type.hlen()
	if hl == 0 {
		return fatal(FESInvalidField, 0, "unknown PDU type "+h.Type.String())
	}
	if int(h.HLen) != hl {
		return fatal(FESInvalidField, 2, "bad HLEN "+strconv.Itoa(int(h.HLen))+" for "+h.Type.String())
	}
	hd := r.hdgst && digested(h.Type)
	if h.Flags.Has(FlagHDGST) != hd {
		return fatal(FESInvalidField, 1, "header digest flag does not match what was negotiated")
	}
	off := hl
	if hd {
		off += DigestSize
	}
	if h.PLen < uint32(off) {
		return fatal(FESInvalidField, 4, "PLEN shorter than the header")
	}
	if _, err := io.ReadFull(r.br, r.hdr[CommonSize:off]); err != nil {
		return noEOF(err)
	}
	r.got = off
	if hd && binary.LittleEndian.Uint32(r.hdr[hl:]) != Digest(r.hdr[:hl]) {
		return fatal(FESHeaderDigest, 0, "header digest mismatch")
	}
	if err := r.dataLayout(off); err != nil {
		return err
	}
	r.pace()
	return nil
}

// dataLayout finds where this PDU's data starts and how long it is.
func (r *pduReader) dataLayout(off int) error {
	h := &r.h
	rest := int64(h.PLen) - int64(off)
	r.data, r.crc, r.dgst = 0, 0, false
	if h.Type == TypeH2CTermReq || h.Type == TypeC2HTermReq {
		if rest > MaxTermData {
			return fatal(FESInvalidField, 4, "TermReq too long")
		}
		r.data = int(rest)
		return nil
	}
	if h.PDO == 0 {
		if rest != 0 {
			return fatal(FESInvalidField, 4, "PLEN past the header of a PDU without data")
		}
		return nil
	}
	if h.Type != TypeCapsuleCmd && h.Type != TypeH2CData && h.Type != TypeC2HData {
		return fatal(FESInvalidField, 3, "data in a "+h.Type.String())
	}
	if int(h.PDO) < off {
		return fatal(FESInvalidField, 3, "PDO inside the header")
	}
	pad := int(h.PDO) - off
	dd := r.ddgst
	if h.Flags.Has(FlagDDGST) != dd {
		return fatal(FESInvalidField, 1, "data digest flag does not match what was negotiated")
	}
	n := rest - int64(pad)
	if dd {
		n -= DigestSize
	}
	if n <= 0 {
		return fatal(FESInvalidField, 4, "PLEN leaves no data")
	}
	if n > int64(r.maxData) {
		return fatal(FESDataLimit, 4, "PDU data longer than "+strconv.Itoa(r.maxData))
	}
	if _, err := io.ReadFull(r.br, r.pad[:pad]); err != nil {
		return noEOF(err)
	}
	r.data, r.dgst = int(n), dd
	return nil
}

// readData reads the next len(p) bytes of the PDU's data into p.
func (r *pduReader) readData(p []byte) error {
	if len(p) > r.data {
		panic("nvme/tcp: readData past the PDU's data")
	}
	if _, err := io.ReadFull(r.br, p); err != nil {
		return noEOF(err)
	}
	r.data -= len(p)
	if r.dgst {
		r.crc = crc32.Update(r.crc, castagnoli, p)
	}
	return nil
}

// readPayload reads the next len(p) bytes of the PDU's data into p, as
// readData does, except that with a directSource a payload of directMin
// bytes or more that is not buffered whole goes from the connection
// straight into p: what is buffered is copied, the rest is read into p
// (and digested there), not through the buffer.
func (r *pduReader) readPayload(p []byte) error {
	n := r.br.Buffered()
	if r.direct == nil || len(p) < directMin || n >= len(p) {
		if r.direct != nil && len(p) < directMin {
			r.grace = false
			r.direct.bulk()
		}
		return r.readData(p)
	}
	if len(p) > r.data {
		panic("nvme/tcp: readPayload past the PDU's data")
	}
	if n > 0 {
		r.br.Read(p[:n]) // cannot fail: n bytes are buffered
	}
	for n < len(p) {
		m, err := r.direct.readDirect(p[n:])
		n += m
		if err != nil && n < len(p) {
			return noEOF(err)
		}
	}
	r.data -= len(p)
	if r.dgst {
		r.crc = crc32.Update(r.crc, castagnoli, p)
	}
	r.grace = true
	return nil
}

// pace ends the direct source's cut reads once a header shows they no
// longer help: a PDU without data other than the first after a direct
// payload (that one is likely the same command's CapsuleResp, with the
// next large payload's header behind it). A PDU with data ends them in
// readPayload if its data is small.
func (r *pduReader) pace() {
	if r.direct == nil || r.data > 0 {
		return
	}
	if r.grace {
		r.grace = false
		return
	}
	r.direct.bulk()
}

// endData reads the data digest, once all data was read, and checks it:
// ErrDataDigest if it does not match.
func (r *pduReader) endData() error {
	if !r.dgst {
		return nil
	}
	r.dgst = false
	if _, err := io.ReadFull(r.br, r.dg[:]); err != nil {
		return noEOF(err)
	}
	if binary.LittleEndian.Uint32(r.dg[:]) != r.crc {
		return ErrDataDigest
	}
	return nil
}

// discard skips the rest of the PDU's data and its digest.
func (r *pduReader) discard() error {
	for r.data > 0 {
		n := min(r.data, len(r.pad))
		if err := r.readData(r.pad[:n]); err != nil {
			return err
		}
	}
	if err := r.endData(); err != nil && err != ErrDataDigest {
		return err
	}
	return nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// maxIOV is how many pieces one writev of the target carries.
const maxIOV = 64
