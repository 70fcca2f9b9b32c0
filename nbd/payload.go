package nbd

import (
	"encoding/binary"
	"strconv"
)

// Codecs for the variable-length payloads of options, option replies and
// structured reply chunks. Append* functions append the encoding to b and
// return the extended slice; Parse* functions validate every length against
// the input before using it and fail with a *ProtocolError (or, for a
// request a server received, ErrOptInvalid wrapped in one) on malformed input.
// Strings returned by Parse* are copies; nothing retains the input.

// InfoRequest is the data of NBD_OPT_INFO and NBD_OPT_GO:
//
//	C: 32 bits, length of name (unsigned); MUST be no larger than the option data length - 6
//	C: String: name of the export
//	C: 16 bits, number of information requests
//	C: 16 bits x n - list of NBD_INFO information requests
type InfoRequest struct {
	Name     string
	Requests []InfoType
}

// AppendInfoRequest appends the encoding of r to b.
func AppendInfoRequest(b []byte, r *InfoRequest) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.Name)))
	b = append(b, r.Name...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(r.Requests)))
	for _, t := range r.Requests {
		b = binary.BigEndian.AppendUint16(b, uint16(t))
	}
	return b
}

// ParseInfoRequest decodes the data of an NBD_OPT_INFO or NBD_OPT_GO.
func ParseInfoRequest(b []byte) (InfoRequest, error) {
	var r InfoRequest
	if len(b) < 6 {
		return r, protoErr("info request of " + strconv.Itoa(len(b)) + " bytes, want at least 6")
	}
	n := binary.BigEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-6) {
		return r, protoErr("info request name length " + strconv.FormatUint(uint64(n), 10) + " past the option data")
	}
	if n > MaxStringLength {
		return r, protoErr("info request name longer than 4096 bytes")
	}
	r.Name = string(b[4 : 4+n])
	rest := b[4+n:]
	count := int(binary.BigEndian.Uint16(rest))
	rest = rest[2:]
	if len(rest) != 2*count {
		return r, protoErr("info request lists " + strconv.Itoa(count) + " items in " + strconv.Itoa(len(rest)) + " bytes")
	}
	if count > 0 {
		r.Requests = make([]InfoType, count)
		for i := range r.Requests {
			r.Requests[i] = InfoType(binary.BigEndian.Uint16(rest[2*i:]))
		}
	}
	return r, nil
}

// ExportInfo gathers what NBD_REP_INFO replies say of an export.
type ExportInfo struct {
	Size        uint64
	Flags       ExportFlags
	Name        string // canonical name, if the server sent NBD_INFO_NAME
	Description string // if the server sent NBD_INFO_DESCRIPTION
	// Block size constraints (NBD_INFO_BLOCK_SIZE); zero when not sent.
	MinBlock, PreferredBlock, MaxPayload uint32
}

// AppendInfoExport appends an NBD_INFO_EXPORT item (the data of an
// NBD_REP_INFO reply): u16 type, u64 size, u16 transmission flags.
func AppendInfoExport(b []byte, size uint64, flags ExportFlags) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(InfoExport))
	b = binary.BigEndian.AppendUint64(b, size)
	return binary.BigEndian.AppendUint16(b, uint16(flags))
}

// AppendInfoString appends an NBD_INFO_NAME or NBD_INFO_DESCRIPTION item.
func AppendInfoString(b []byte, t InfoType, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(t))
	return append(b, s...)
}

// AppendInfoBlockSize appends an NBD_INFO_BLOCK_SIZE item.
func AppendInfoBlockSize(b []byte, minimum, preferred, maximum uint32) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(InfoBlockSize))
	b = binary.BigEndian.AppendUint32(b, minimum)
	b = binary.BigEndian.AppendUint32(b, preferred)
	return binary.BigEndian.AppendUint32(b, maximum)
}

// ParseInfo decodes the data of one NBD_REP_INFO reply into e and returns
// its type. Items of an unknown type are returned without error and leave e
// unchanged (proto.md: the client MUST ignore them); items of a known type
// with the wrong length are a protocol error, as are export flags without
// ExportHasFlags.
func ParseInfo(b []byte, e *ExportInfo) (InfoType, error) {
	if len(b) < 2 {
		return 0, protoErr("info reply shorter than its type")
	}
	t := InfoType(binary.BigEndian.Uint16(b))
	d := b[2:]
	switch t {
	case InfoExport:
		if len(d) != 10 {
			return t, protoErr("NBD_INFO_EXPORT of " + strconv.Itoa(len(b)) + " bytes, want 12")
		}
		f := ExportFlags(binary.BigEndian.Uint16(d[8:]))
		if !f.Has(ExportHasFlags) {
			return t, protoErr("export flags " + f.String() + " without HAS_FLAGS")
		}
		e.Size = binary.BigEndian.Uint64(d)
		e.Flags = f
	case InfoName, InfoDescription:
		if len(d) > MaxStringLength {
			return t, protoErr(t.String() + " longer than 4096 bytes")
		}
		if t == InfoName {
			e.Name = string(d)
		} else {
			e.Description = string(d)
		}
	case InfoBlockSize:
		if len(d) != 12 {
			return t, protoErr("NBD_INFO_BLOCK_SIZE of " + strconv.Itoa(len(b)) + " bytes, want 14")
		}
		e.MinBlock = binary.BigEndian.Uint32(d)
		e.PreferredBlock = binary.BigEndian.Uint32(d[4:])
		e.MaxPayload = binary.BigEndian.Uint32(d[8:])
	}
	return t, nil
}

// ExportNameReplySize is the size of the reply to NBD_OPT_EXPORT_NAME
// without its 124 trailing zeroes (sent unless both sides chose NO_ZEROES).
const ExportNameReplySize = 10

// ExportNameZeroes is the number of zero bytes that may follow.
const ExportNameZeroes = 124

// MetaContextRequest is the data of NBD_OPT_LIST_META_CONTEXT and
// NBD_OPT_SET_META_CONTEXT:
//
//	C: 32 bits, length of export name
//	C: String, name of export for which we wish to list metadata contexts
//	C: 32 bits, number of queries
//	Zero or more queries, each: 32 bits, length of query; String, query
type MetaContextRequest struct {
	Export  string
	Queries []string
}

// AppendMetaContextRequest appends the encoding of r to b.
func AppendMetaContextRequest(b []byte, r *MetaContextRequest) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.Export)))
	b = append(b, r.Export...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.Queries)))
	for _, q := range r.Queries {
		b = binary.BigEndian.AppendUint32(b, uint32(len(q)))
		b = append(b, q...)
	}
	return b
}

// ParseMetaContextRequest decodes the data of a meta context option.
func ParseMetaContextRequest(b []byte) (MetaContextRequest, error) {
	var r MetaContextRequest
	s, rest, err := parseString32(b, "meta context export name")
	if err != nil {
		return r, err
	}
	r.Export = s
	if len(rest) < 4 {
		return r, protoErr("meta context request without a query count")
	}
	n := binary.BigEndian.Uint32(rest)
	rest = rest[4:]
	// Each query takes at least 4 bytes: bound the count before allocating.
	if uint64(n)*4 > uint64(len(rest)) {
		return r, protoErr("meta context request counts " + strconv.FormatUint(uint64(n), 10) + " queries in " + strconv.Itoa(len(rest)) + " bytes")
	}
	if n > 0 {
		r.Queries = make([]string, 0, n)
	}
	for range n {
		s, rest, err = parseString32(rest, "meta context query")
		if err != nil {
			return r, err
		}
		r.Queries = append(r.Queries, s)
	}
	if len(rest) != 0 {
		return r, protoErr("meta context request has " + strconv.Itoa(len(rest)) + " trailing bytes")
	}
	return r, nil
}

// AppendMetaContextReply appends the data of an NBD_REP_META_CONTEXT reply:
// u32 context id, then the context name.
func AppendMetaContextReply(b []byte, id uint32, name string) []byte {
	b = binary.BigEndian.AppendUint32(b, id)
	return append(b, name...)
}

// ParseMetaContextReply decodes the data of an NBD_REP_META_CONTEXT reply.
func ParseMetaContextReply(b []byte) (id uint32, name string, err error) {
	if len(b) < 4 {
		return 0, "", protoErr("meta context reply shorter than its id")
	}
	if len(b)-4 > MaxStringLength {
		return 0, "", protoErr("meta context name longer than 4096 bytes")
	}
	return binary.BigEndian.Uint32(b), string(b[4:]), nil
}

// AppendServerReply appends the data of an NBD_REP_SERVER reply (an answer
// to NBD_OPT_LIST): u32 name length, name, then the description.
func AppendServerReply(b []byte, name, description string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(name)))
	b = append(b, name...)
	return append(b, description...)
}

// ParseServerReply decodes the data of an NBD_REP_SERVER reply.
func ParseServerReply(b []byte) (name, description string, err error) {
	name, rest, err := parseString32(b, "export name in NBD_REP_SERVER")
	if err != nil {
		return "", "", err
	}
	if len(rest) > MaxStringLength {
		return "", "", protoErr("export description longer than 4096 bytes")
	}
	return name, string(rest), nil
}

// Structured reply chunk payloads.

// OffsetDataHeaderSize is the size of an NBD_REPLY_TYPE_OFFSET_DATA payload
// before its data: the u64 offset.
const OffsetDataHeaderSize = 8

// OffsetHoleSize is the size of an NBD_REPLY_TYPE_OFFSET_HOLE payload.
const OffsetHoleSize = 12

// PutOffsetHole encodes an OFFSET_HOLE payload.
func PutOffsetHole(b *[OffsetHoleSize]byte, offset uint64, size uint32) {
	binary.BigEndian.PutUint64(b[0:], offset)
	binary.BigEndian.PutUint32(b[8:], size)
}

// ParseOffsetHole decodes an OFFSET_HOLE payload.
func ParseOffsetHole(b *[OffsetHoleSize]byte) (offset uint64, size uint32) {
	return binary.BigEndian.Uint64(b[0:]), binary.BigEndian.Uint32(b[8:])
}

// ErrorChunk is the payload of an NBD_REPLY_TYPE_ERROR or ERROR_OFFSET chunk:
//
//	32 bits: error (MUST be nonzero)
//	16 bits: message length (no more than header length - 6)
//	String: optional error message
//	(ERROR_OFFSET only) 64 bits: offset of the first byte the error applies to
type ErrorChunk struct {
	Error     Errno
	Message   string
	Offset    uint64
	HasOffset bool // the chunk was ERROR_OFFSET
}

// AppendErrorChunk appends the payload of e (ERROR_OFFSET if e.HasOffset).
func AppendErrorChunk(b []byte, e *ErrorChunk) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(e.Error))
	b = binary.BigEndian.AppendUint16(b, uint16(len(e.Message)))
	b = append(b, e.Message...)
	if e.HasOffset {
		b = binary.BigEndian.AppendUint64(b, e.Offset)
	}
	return b
}

// ParseErrorChunk decodes the payload of an error chunk of type t.
func ParseErrorChunk(t ChunkType, b []byte) (ErrorChunk, error) {
	var e ErrorChunk
	if len(b) < 6 {
		return e, protoErr("error chunk of " + strconv.Itoa(len(b)) + " bytes, want at least 6")
	}
	e.Error = Errno(binary.BigEndian.Uint32(b))
	if e.Error == 0 {
		return e, protoErr("error chunk with error value 0")
	}
	n := int(binary.BigEndian.Uint16(b[4:]))
	rest := b[6:]
	if n > len(rest) {
		return e, protoErr("error message length " + strconv.Itoa(n) + " past the chunk")
	}
	e.Message = string(rest[:n])
	rest = rest[n:]
	switch t {
	case ChunkErrorOffset:
		if len(rest) != 8 {
			return e, protoErr("ERROR_OFFSET chunk with " + strconv.Itoa(len(rest)) + " bytes after the message, want 8")
		}
		e.Offset = binary.BigEndian.Uint64(rest)
		e.HasOffset = true
	case ChunkError:
		if len(rest) != 0 {
			return e, protoErr("ERROR chunk with " + strconv.Itoa(len(rest)) + " bytes after the message")
		}
	}
	return e, nil
}

// Extent is one run of a block status reply. In the base:allocation
// context, Flags holds ExtentHole and ExtentZero.
type Extent struct {
	Length uint32
	Flags  ExtentFlags
}

// BlockStatusHeaderSize is the size of a BLOCK_STATUS payload before its
// descriptors: the u32 context id.
const BlockStatusHeaderSize = 4

// ExtentSize is the size of one block status descriptor.
const ExtentSize = 8

// AppendBlockStatus appends a BLOCK_STATUS payload: context id, then each
// extent as u32 length and u32 flags.
func AppendBlockStatus(b []byte, contextID uint32, extents []Extent) []byte {
	b = binary.BigEndian.AppendUint32(b, contextID)
	for _, e := range extents {
		b = binary.BigEndian.AppendUint32(b, e.Length)
		b = binary.BigEndian.AppendUint32(b, uint32(e.Flags))
	}
	return b
}

// ParseBlockStatus decodes a BLOCK_STATUS payload, appending its extents to
// dst. A payload without a whole number of descriptors, with none, or with
// an extent of length zero is a protocol error.
func ParseBlockStatus(b []byte, dst []Extent) (contextID uint32, extents []Extent, err error) {
	if len(b) < BlockStatusHeaderSize+ExtentSize || (len(b)-BlockStatusHeaderSize)%ExtentSize != 0 {
		return 0, dst, protoErr("block status chunk of " + strconv.Itoa(len(b)) + " bytes is not a context id and whole descriptors")
	}
	contextID = binary.BigEndian.Uint32(b)
	for d := b[BlockStatusHeaderSize:]; len(d) > 0; d = d[ExtentSize:] {
		e := Extent{Length: binary.BigEndian.Uint32(d), Flags: ExtentFlags(binary.BigEndian.Uint32(d[4:]))}
		if e.Length == 0 {
			return contextID, dst, protoErr("block status extent of length 0")
		}
		dst = append(dst, e)
	}
	return contextID, dst, nil
}

func parseString32(b []byte, what string) (s string, rest []byte, err error) {
	if len(b) < 4 {
		return "", b, protoErr(what + ": no room for its length")
	}
	n := binary.BigEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-4) {
		return "", b, protoErr(what + ": length " + strconv.FormatUint(uint64(n), 10) + " past the data")
	}
	if n > MaxStringLength {
		return "", b, protoErr(what + " longer than 4096 bytes")
	}
	return string(b[4 : 4+n]), b[4+n:], nil
}

func protoErr(msg string) error { return &ProtocolError{Msg: msg} }
