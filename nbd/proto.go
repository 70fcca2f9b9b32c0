package nbd

import "strconv"

// Magic numbers of the protocol (proto.md, "Protocol phases").
const (
	// MagicNBD opens every handshake: ASCII "NBDMAGIC".
	MagicNBD uint64 = 0x4e42444d41474943
	// MagicOldstyle follows MagicNBD from an oldstyle server.
	MagicOldstyle uint64 = 0x00420281861253
	// MagicIHaveOpt follows MagicNBD from a newstyle server and starts every
	// option a client sends: ASCII "IHAVEOPT".
	MagicIHaveOpt uint64 = 0x49484156454F5054
	// MagicOptionReply starts every fixed-newstyle option reply.
	MagicOptionReply uint64 = 0x3e889045565a9
	// MagicRequest starts every transmission request.
	MagicRequest uint32 = 0x25609513
	// MagicSimpleReply starts a simple reply.
	MagicSimpleReply uint32 = 0x67446698
	// MagicStructuredReply starts a structured reply chunk.
	MagicStructuredReply uint32 = 0x668e33ef
)

// HandshakeFlags are the 16 bits a newstyle server sends after MagicIHaveOpt.
type HandshakeFlags uint16

const (
	HandshakeFixedNewstyle HandshakeFlags = 1 << 0 // NBD_FLAG_FIXED_NEWSTYLE
	HandshakeNoZeroes      HandshakeFlags = 1 << 1 // NBD_FLAG_NO_ZEROES
)

// Has reports whether every bit of x is set in f.
func (f HandshakeFlags) Has(x HandshakeFlags) bool { return f&x == x }

// ClientFlags are the 32 bits a newstyle client answers with. A server that
// sees an unknown bit must hang up.
type ClientFlags uint32

const (
	ClientFixedNewstyle ClientFlags = 1 << 0 // NBD_FLAG_C_FIXED_NEWSTYLE
	ClientNoZeroes      ClientFlags = 1 << 1 // NBD_FLAG_C_NO_ZEROES
)

// Has reports whether every bit of x is set in f.
func (f ClientFlags) Has(x ClientFlags) bool { return f&x == x }

// ExportFlags are the transmission flags of an export (16 bits on the wire).
// A client must not use a feature whose flag is clear.
type ExportFlags uint16

const (
	ExportHasFlags        ExportFlags = 1 << 0  // always set
	ExportReadOnly        ExportFlags = 1 << 1  // writes, trims and zeroes fail with EPERM
	ExportSendFlush       ExportFlags = 1 << 2  // CmdFlush is understood
	ExportSendFUA         ExportFlags = 1 << 3  // FlagFUA is understood
	ExportRotational      ExportFlags = 1 << 4  // elevator scheduling helps
	ExportSendTrim        ExportFlags = 1 << 5  // CmdTrim is understood
	ExportSendWriteZeroes ExportFlags = 1 << 6  // CmdWriteZeroes is understood
	ExportSendDF          ExportFlags = 1 << 7  // FlagDF is understood
	ExportCanMultiConn    ExportFlags = 1 << 8  // flush on one connection covers all
	ExportSendResize      ExportFlags = 1 << 9  // CmdResize (extension)
	ExportSendCache       ExportFlags = 1 << 10 // CmdCache is understood
	ExportSendFastZero    ExportFlags = 1 << 11 // FlagFastZero is understood
)

var exportFlagNames = [...]string{
	"HAS_FLAGS", "READ_ONLY", "SEND_FLUSH", "SEND_FUA", "ROTATIONAL", "SEND_TRIM",
	"SEND_WRITE_ZEROES", "SEND_DF", "CAN_MULTI_CONN", "SEND_RESIZE", "SEND_CACHE",
	"SEND_FAST_ZERO",
}

// Has reports whether every bit of x is set in f.
func (f ExportFlags) Has(x ExportFlags) bool { return f&x == x }

func (f ExportFlags) String() string { return flagString(uint64(f), exportFlagNames[:]) }

// OptionCode is the type of a handshake option (proto.md, "Option types").
type OptionCode uint32

const (
	OptExportName      OptionCode = 1
	OptAbort           OptionCode = 2
	OptList            OptionCode = 3
	OptPeekExport      OptionCode = 4 // withdrawn; never sent
	OptStartTLS        OptionCode = 5
	OptInfo            OptionCode = 6
	OptGo              OptionCode = 7
	OptStructuredReply OptionCode = 8
	OptListMetaContext OptionCode = 9
	OptSetMetaContext  OptionCode = 10
	OptExtendedHeaders OptionCode = 11 // extension; not negotiated by this package
)

var optionNames = map[OptionCode]string{
	OptExportName: "EXPORT_NAME", OptAbort: "ABORT", OptList: "LIST", OptPeekExport: "PEEK_EXPORT",
	OptStartTLS: "STARTTLS", OptInfo: "INFO", OptGo: "GO", OptStructuredReply: "STRUCTURED_REPLY",
	OptListMetaContext: "LIST_META_CONTEXT", OptSetMetaContext: "SET_META_CONTEXT",
	OptExtendedHeaders: "EXTENDED_HEADERS",
}

func (o OptionCode) String() string {
	if s, ok := optionNames[o]; ok {
		return s
	}
	return "OPT(" + strconv.FormatUint(uint64(o), 10) + ")"
}

// OptionReplyType is the type of a fixed-newstyle option reply. Error types
// have bit 31 set.
type OptionReplyType uint32

const optReplyError OptionReplyType = 1 << 31

const (
	RepAck              OptionReplyType = 1
	RepServer           OptionReplyType = 2
	RepInfo             OptionReplyType = 3
	RepMetaContext      OptionReplyType = 4
	RepErrUnsup         OptionReplyType = optReplyError + 1
	RepErrPolicy        OptionReplyType = optReplyError + 2
	RepErrInvalid       OptionReplyType = optReplyError + 3
	RepErrPlatform      OptionReplyType = optReplyError + 4
	RepErrTLSReqd       OptionReplyType = optReplyError + 5
	RepErrUnknown       OptionReplyType = optReplyError + 6
	RepErrShutdown      OptionReplyType = optReplyError + 7
	RepErrBlockSizeReqd OptionReplyType = optReplyError + 8
	RepErrTooBig        OptionReplyType = optReplyError + 9
	RepErrExtHeaderReqd OptionReplyType = optReplyError + 10
)

var optionReplyNames = map[OptionReplyType]string{
	RepAck: "ACK", RepServer: "SERVER", RepInfo: "INFO", RepMetaContext: "META_CONTEXT",
	RepErrUnsup: "ERR_UNSUP", RepErrPolicy: "ERR_POLICY", RepErrInvalid: "ERR_INVALID",
	RepErrPlatform: "ERR_PLATFORM", RepErrTLSReqd: "ERR_TLS_REQD", RepErrUnknown: "ERR_UNKNOWN",
	RepErrShutdown: "ERR_SHUTDOWN", RepErrBlockSizeReqd: "ERR_BLOCK_SIZE_REQD",
	RepErrTooBig: "ERR_TOO_BIG", RepErrExtHeaderReqd: "ERR_EXT_HEADER_REQD",
}

// IsError reports whether t is an error reply (bit 31 set).
func (t OptionReplyType) IsError() bool { return t&optReplyError != 0 }

func (t OptionReplyType) String() string {
	if s, ok := optionReplyNames[t]; ok {
		return s
	}
	if t.IsError() {
		return "ERR(" + strconv.FormatUint(uint64(t&^optReplyError), 10) + ")"
	}
	return "REP(" + strconv.FormatUint(uint64(t), 10) + ")"
}

// InfoType is the type of an information item in NBD_OPT_INFO/GO.
type InfoType uint16

const (
	InfoExport      InfoType = 0 // u64 size, u16 transmission flags
	InfoName        InfoType = 1 // the export's canonical name
	InfoDescription InfoType = 2 // a human-readable description
	InfoBlockSize   InfoType = 3 // u32 minimum, preferred, maximum payload
)

var infoNames = [...]string{"EXPORT", "NAME", "DESCRIPTION", "BLOCK_SIZE"}

func (t InfoType) String() string {
	if int(t) < len(infoNames) {
		return infoNames[t]
	}
	return "INFO(" + strconv.FormatUint(uint64(t), 10) + ")"
}

// Command is the type of a transmission request.
type Command uint16

const (
	CmdRead        Command = 0
	CmdWrite       Command = 1
	CmdDisc        Command = 2 // no reply; nothing may follow
	CmdFlush       Command = 3
	CmdTrim        Command = 4
	CmdCache       Command = 5
	CmdWriteZeroes Command = 6
	CmdBlockStatus Command = 7
	CmdResize      Command = 8 // extension; never sent by this package
)

var commandNames = [...]string{"READ", "WRITE", "DISC", "FLUSH", "TRIM", "CACHE", "WRITE_ZEROES", "BLOCK_STATUS", "RESIZE"}

func (c Command) String() string {
	if int(c) < len(commandNames) {
		return commandNames[c]
	}
	return "CMD(" + strconv.FormatUint(uint64(c), 10) + ")"
}

// CmdFlags are the flags of a transmission request.
type CmdFlags uint16

const (
	FlagFUA      CmdFlags = 1 << 0 // force unit access (WRITE, TRIM, WRITE_ZEROES)
	FlagNoHole   CmdFlags = 1 << 1 // WRITE_ZEROES must allocate
	FlagDF       CmdFlags = 1 << 2 // READ: do not fragment the reply
	FlagReqOne   CmdFlags = 1 << 3 // BLOCK_STATUS: one extent is enough
	FlagFastZero CmdFlags = 1 << 4 // WRITE_ZEROES: fail with ENOTSUP unless fast
)

var cmdFlagNames = [...]string{"FUA", "NO_HOLE", "DF", "REQ_ONE", "FAST_ZERO"}

// Has reports whether every bit of x is set in f.
func (f CmdFlags) Has(x CmdFlags) bool { return f&x == x }

func (f CmdFlags) String() string { return flagString(uint64(f), cmdFlagNames[:]) }

// ChunkType is the type of a structured reply chunk.
type ChunkType uint16

const (
	ChunkNone        ChunkType = 0     // length 0, with ReplyFlagDone
	ChunkOffsetData  ChunkType = 1     // u64 offset, data
	ChunkOffsetHole  ChunkType = 2     // u64 offset, u32 hole size
	ChunkBlockStatus ChunkType = 5     // u32 context id, n x (u32 length, u32 flags)
	ChunkError       ChunkType = 32769 // u32 error, u16 message length, message
	ChunkErrorOffset ChunkType = 32770 // as ChunkError, then u64 offset
)

// IsError reports whether t is an error chunk type (bit 15 set).
func (t ChunkType) IsError() bool { return t&(1<<15) != 0 }

func (t ChunkType) String() string {
	switch t {
	case ChunkNone:
		return "NONE"
	case ChunkOffsetData:
		return "OFFSET_DATA"
	case ChunkOffsetHole:
		return "OFFSET_HOLE"
	case ChunkBlockStatus:
		return "BLOCK_STATUS"
	case ChunkError:
		return "ERROR"
	case ChunkErrorOffset:
		return "ERROR_OFFSET"
	}
	return "CHUNK(" + strconv.FormatUint(uint64(t), 10) + ")"
}

// ReplyFlags are the flags of a structured reply chunk.
type ReplyFlags uint16

// ReplyFlagDone marks the last chunk of a reply.
const ReplyFlagDone ReplyFlags = 1 << 0

// Has reports whether every bit of x is set in f.
func (f ReplyFlags) Has(x ReplyFlags) bool { return f&x == x }

// ExtentFlags describe an extent of the base:allocation context.
type ExtentFlags uint32

const (
	ExtentHole ExtentFlags = 1 << 0 // NBD_STATE_HOLE: not allocated
	ExtentZero ExtentFlags = 1 << 1 // NBD_STATE_ZERO: reads as zeroes
)

// Has reports whether every bit of x is set in f.
func (f ExtentFlags) Has(x ExtentFlags) bool { return f&x == x }

func (f ExtentFlags) String() string { return flagString(uint64(f), []string{"HOLE", "ZERO"}) }

// MetaContextBaseAllocation is the name of the allocation metadata context.
const MetaContextBaseAllocation = "base:allocation"

// Limits of the protocol and of this package.
const (
	// DefaultMaxPayload is the largest READ or WRITE payload used when the
	// server advertises no maximum (proto.md: 32 MiB is safe).
	DefaultMaxPayload = 32 << 20
	// MaxStringLength bounds names and descriptions (proto.md: 4096 bytes).
	MaxStringLength = 4096
)

func flagString(v uint64, names []string) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for i, n := range names {
		if v&(1<<uint(i)) != 0 {
			if b != nil {
				b = append(b, '|')
			}
			b = append(b, n...)
			v &^= 1 << uint(i)
		}
	}
	if v != 0 {
		if b != nil {
			b = append(b, '|')
		}
		b = append(b, "0x"...)
		b = strconv.AppendUint(b, v, 16)
	}
	return string(b)
}
