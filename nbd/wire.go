package nbd

import (
	"encoding/binary"
	"strconv"
)

// The fixed-size headers of the protocol, each with Put into a fixed array
// and Parse from one. They are the one wire codec the client and the server
// share. Put and Parse never allocate.

// RequestSize is the size of a transmission request header.
const RequestSize = 28

// Request is a transmission request header (proto.md, "Request message"):
//
//	C: 32 bits, 0x25609513, magic (NBD_REQUEST_MAGIC)
//	C: 16 bits, command flags
//	C: 16 bits, type
//	C: 64 bits, cookie
//	C: 64 bits, offset (unsigned)
//	C: 32 bits, length (unsigned)
//	C: (length bytes of data if the request is of type NBD_CMD_WRITE)
type Request struct {
	Flags  CmdFlags
	Type   Command
	Cookie uint64
	Offset uint64
	Length uint32
}

// Put encodes r into b.
func (r *Request) Put(b *[RequestSize]byte) {
	binary.BigEndian.PutUint32(b[0:], MagicRequest)
	binary.BigEndian.PutUint16(b[4:], uint16(r.Flags))
	binary.BigEndian.PutUint16(b[6:], uint16(r.Type))
	binary.BigEndian.PutUint64(b[8:], r.Cookie)
	binary.BigEndian.PutUint64(b[16:], r.Offset)
	binary.BigEndian.PutUint32(b[24:], r.Length)
}

// Parse decodes b into r. It fails with a *ProtocolError on a bad magic.
func (r *Request) Parse(b *[RequestSize]byte) error {
	if m := binary.BigEndian.Uint32(b[0:]); m != MagicRequest {
		return badMagic("request", uint64(m))
	}
	r.Flags = CmdFlags(binary.BigEndian.Uint16(b[4:]))
	r.Type = Command(binary.BigEndian.Uint16(b[6:]))
	r.Cookie = binary.BigEndian.Uint64(b[8:])
	r.Offset = binary.BigEndian.Uint64(b[16:])
	r.Length = binary.BigEndian.Uint32(b[24:])
	return nil
}

// SimpleReplySize is the size of a simple reply header.
const SimpleReplySize = 16

// SimpleReply is a simple reply header (proto.md, "Simple reply message"):
//
//	S: 32 bits, 0x67446698, magic (NBD_SIMPLE_REPLY_MAGIC)
//	S: 32 bits, error (MAY be zero)
//	S: 64 bits, cookie
//	S: (length bytes of data if the request is of type NBD_CMD_READ and error is zero)
type SimpleReply struct {
	Error  Errno
	Cookie uint64
}

// Put encodes r into b.
func (r *SimpleReply) Put(b *[SimpleReplySize]byte) {
	binary.BigEndian.PutUint32(b[0:], MagicSimpleReply)
	binary.BigEndian.PutUint32(b[4:], uint32(r.Error))
	binary.BigEndian.PutUint64(b[8:], r.Cookie)
}

// Parse decodes b into r. It fails with a *ProtocolError on a bad magic.
func (r *SimpleReply) Parse(b *[SimpleReplySize]byte) error {
	if m := binary.BigEndian.Uint32(b[0:]); m != MagicSimpleReply {
		return badMagic("simple reply", uint64(m))
	}
	r.Error = Errno(binary.BigEndian.Uint32(b[4:]))
	r.Cookie = binary.BigEndian.Uint64(b[8:])
	return nil
}

// ChunkHeaderSize is the size of a structured reply chunk header.
const ChunkHeaderSize = 20

// ChunkHeader is a structured reply chunk header (proto.md, "Structured
// reply chunk message"):
//
//	S: 32 bits, 0x668e33ef, magic (NBD_STRUCTURED_REPLY_MAGIC)
//	S: 16 bits, flags
//	S: 16 bits, type
//	S: 64 bits, cookie
//	S: 32 bits, length of payload (unsigned)
//	S: length bytes of payload data (if length is nonzero)
type ChunkHeader struct {
	Flags  ReplyFlags
	Type   ChunkType
	Cookie uint64
	Length uint32
}

// Put encodes h into b.
func (h *ChunkHeader) Put(b *[ChunkHeaderSize]byte) {
	binary.BigEndian.PutUint32(b[0:], MagicStructuredReply)
	binary.BigEndian.PutUint16(b[4:], uint16(h.Flags))
	binary.BigEndian.PutUint16(b[6:], uint16(h.Type))
	binary.BigEndian.PutUint64(b[8:], h.Cookie)
	binary.BigEndian.PutUint32(b[16:], h.Length)
}

// Parse decodes b into h. It fails with a *ProtocolError on a bad magic.
func (h *ChunkHeader) Parse(b *[ChunkHeaderSize]byte) error {
	if m := binary.BigEndian.Uint32(b[0:]); m != MagicStructuredReply {
		return badMagic("structured reply", uint64(m))
	}
	h.Flags = ReplyFlags(binary.BigEndian.Uint16(b[4:]))
	h.Type = ChunkType(binary.BigEndian.Uint16(b[6:]))
	h.Cookie = binary.BigEndian.Uint64(b[8:])
	h.Length = binary.BigEndian.Uint32(b[16:])
	return nil
}

// ReplyMagicSize is how many bytes tell a simple reply from a chunk.
const ReplyMagicSize = 4

// OptionHeaderSize is the size of an option request header.
const OptionHeaderSize = 16

// OptionHeader starts every option a client sends (proto.md, "Option
// haggling"):
//
//	C: 64 bits, 0x49484156454F5054 (ASCII 'IHAVEOPT')
//	C: 32 bits, option
//	C: 32 bits, length of option data (unsigned)
//	C: any data needed for the chosen option, of length as specified above.
type OptionHeader struct {
	Option OptionCode
	Length uint32
}

// Put encodes h into b.
func (h *OptionHeader) Put(b *[OptionHeaderSize]byte) {
	binary.BigEndian.PutUint64(b[0:], MagicIHaveOpt)
	binary.BigEndian.PutUint32(b[8:], uint32(h.Option))
	binary.BigEndian.PutUint32(b[12:], h.Length)
}

// Parse decodes b into h. It fails with a *ProtocolError on a bad magic.
func (h *OptionHeader) Parse(b *[OptionHeaderSize]byte) error {
	if m := binary.BigEndian.Uint64(b[0:]); m != MagicIHaveOpt {
		return badMagic("option", m)
	}
	h.Option = OptionCode(binary.BigEndian.Uint32(b[8:]))
	h.Length = binary.BigEndian.Uint32(b[12:])
	return nil
}

// OptionReplySize is the size of a fixed-newstyle option reply header.
const OptionReplySize = 20

// OptionReply is a fixed-newstyle option reply header:
//
//	S: 64 bits, 0x3e889045565a9 (magic number for replies)
//	S: 32 bits, the option as sent by the client to which this is a reply
//	S: 32 bits, reply type
//	S: 32 bits, length of the reply (may be zero)
//	S: any data as required by the reply
type OptionReply struct {
	Option OptionCode
	Type   OptionReplyType
	Length uint32
}

// Put encodes r into b.
func (r *OptionReply) Put(b *[OptionReplySize]byte) {
	binary.BigEndian.PutUint64(b[0:], MagicOptionReply)
	binary.BigEndian.PutUint32(b[8:], uint32(r.Option))
	binary.BigEndian.PutUint32(b[12:], uint32(r.Type))
	binary.BigEndian.PutUint32(b[16:], r.Length)
}

// Parse decodes b into r. It fails with a *ProtocolError on a bad magic.
func (r *OptionReply) Parse(b *[OptionReplySize]byte) error {
	if m := binary.BigEndian.Uint64(b[0:]); m != MagicOptionReply {
		return badMagic("option reply", m)
	}
	r.Option = OptionCode(binary.BigEndian.Uint32(b[8:]))
	r.Type = OptionReplyType(binary.BigEndian.Uint32(b[12:]))
	r.Length = binary.BigEndian.Uint32(b[16:])
	return nil
}

func badMagic(what string, got uint64) error {
	return &ProtocolError{Msg: "bad " + what + " magic 0x" + strconv.FormatUint(got, 16)}
}
