package nbd

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Fuzz targets for the codecs: no input panics, and whatever parses
// encodes back to an equal value (and, where the encoding is unique, to the
// same bytes). Seeds live in testdata/fuzz/<FuzzName>/.

func FuzzClientHeaders(f *testing.F) {
	var rb [RequestSize]byte
	(&Request{Type: CmdWrite, Flags: FlagFUA, Cookie: 9, Offset: 4096, Length: 512}).Put(&rb)
	f.Add(rb[:])
	var cb [ChunkHeaderSize]byte
	(&ChunkHeader{Flags: ReplyFlagDone, Type: ChunkOffsetData, Cookie: 9, Length: 520}).Put(&cb)
	f.Add(cb[:])
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) >= RequestSize {
			in := (*[RequestSize]byte)(b)
			var r Request
			if r.Parse(in) == nil {
				var out [RequestSize]byte
				r.Put(&out)
				if out != *in {
					t.Fatalf("Request % x -> % x", in[:], out[:])
				}
			}
		}
		if len(b) >= ChunkHeaderSize {
			in := (*[ChunkHeaderSize]byte)(b)
			var h ChunkHeader
			if h.Parse(in) == nil {
				var out [ChunkHeaderSize]byte
				h.Put(&out)
				if out != *in {
					t.Fatalf("ChunkHeader % x -> % x", in[:], out[:])
				}
			}
		}
		if len(b) >= OptionReplySize {
			in := (*[OptionReplySize]byte)(b)
			var r OptionReply
			if r.Parse(in) == nil {
				var out [OptionReplySize]byte
				r.Put(&out)
				if out != *in {
					t.Fatalf("OptionReply % x -> % x", in[:], out[:])
				}
			}
		}
		if len(b) >= OptionHeaderSize {
			in := (*[OptionHeaderSize]byte)(b)
			var h OptionHeader
			if h.Parse(in) == nil {
				var out [OptionHeaderSize]byte
				h.Put(&out)
				if out != *in {
					t.Fatalf("OptionHeader % x -> % x", in[:], out[:])
				}
			}
		}
		if len(b) >= SimpleReplySize {
			in := (*[SimpleReplySize]byte)(b)
			var r SimpleReply
			if r.Parse(in) == nil {
				var out [SimpleReplySize]byte
				r.Put(&out)
				if out != *in {
					t.Fatalf("SimpleReply % x -> % x", in[:], out[:])
				}
			}
		}
	})
}

// FuzzClientOptionPayloads feeds b to the option payload parser kind%5
// selects.
func FuzzClientOptionPayloads(f *testing.F) {
	f.Add(byte(0), AppendInfoRequest(nil, &InfoRequest{Name: "x", Requests: []InfoType{InfoBlockSize}}))
	f.Add(byte(1), AppendInfoBlockSize(nil, 512, 4096, 1<<20))
	f.Add(byte(2), AppendMetaContextRequest(nil, &MetaContextRequest{Export: "e", Queries: []string{"base:"}}))
	f.Add(byte(3), AppendMetaContextReply(nil, 1, MetaContextBaseAllocation))
	f.Add(byte(4), AppendServerReply(nil, "name", "desc"))
	f.Fuzz(func(t *testing.T, kind byte, b []byte) {
		switch kind % 5 {
		case 0:
			r, err := ParseInfoRequest(b)
			if err == nil {
				if out := AppendInfoRequest(nil, &r); !bytes.Equal(out, b) {
					t.Fatalf("InfoRequest % x -> % x", b, out)
				}
			}
		case 1:
			var e ExportInfo
			it, err := ParseInfo(b, &e)
			if err == nil {
				var out []byte
				switch it {
				case InfoExport:
					out = AppendInfoExport(nil, e.Size, e.Flags)
				case InfoName:
					out = AppendInfoString(nil, it, e.Name)
				case InfoDescription:
					out = AppendInfoString(nil, it, e.Description)
				case InfoBlockSize:
					out = AppendInfoBlockSize(nil, e.MinBlock, e.PreferredBlock, e.MaxPayload)
				default:
					if e != (ExportInfo{}) {
						t.Fatalf("unknown info type %v changed the info: %+v", it, e)
					}
					return
				}
				if !bytes.Equal(out, b) {
					t.Fatalf("info % x -> % x", b, out)
				}
			}
		case 2:
			r, err := ParseMetaContextRequest(b)
			if err == nil {
				if out := AppendMetaContextRequest(nil, &r); !bytes.Equal(out, b) {
					t.Fatalf("MetaContextRequest % x -> % x", b, out)
				}
			}
		case 3:
			id, name, err := ParseMetaContextReply(b)
			if err == nil {
				if out := AppendMetaContextReply(nil, id, name); !bytes.Equal(out, b) {
					t.Fatalf("meta context reply % x -> % x", b, out)
				}
			}
		case 4:
			n, d, err := ParseServerReply(b)
			if err == nil {
				if out := AppendServerReply(nil, n, d); !bytes.Equal(out, b) {
					t.Fatalf("server reply % x -> % x", b, out)
				}
			}
		}
	})
}

// FuzzClientChunkPayloads feeds b to the chunk payload parser kind%3
// selects.
func FuzzClientChunkPayloads(f *testing.F) {
	f.Add(byte(0), AppendErrorChunk(nil, &ErrorChunk{Error: EIO, Message: "m"}))
	f.Add(byte(1), AppendErrorChunk(nil, &ErrorChunk{Error: EIO, Message: "m", Offset: 7, HasOffset: true}))
	f.Add(byte(2), AppendBlockStatus(nil, 1, []Extent{{4096, 3}, {512, 0}}))
	f.Fuzz(func(t *testing.T, kind byte, b []byte) {
		switch kind % 3 {
		case 0, 1:
			typ := ChunkError
			if kind%3 == 1 {
				typ = ChunkErrorOffset
			}
			e, err := ParseErrorChunk(typ, b)
			if err == nil {
				if e.Error == 0 || e.HasOffset != (typ == ChunkErrorOffset) {
					t.Fatalf("accepted %+v", e)
				}
				if out := AppendErrorChunk(nil, &e); !bytes.Equal(out, b) {
					t.Fatalf("error chunk % x -> % x", b, out)
				}
			}
		case 2:
			id, ext, err := ParseBlockStatus(b, nil)
			if err == nil {
				for _, e := range ext {
					if e.Length == 0 {
						t.Fatal("accepted a zero-length extent")
					}
				}
				if out := AppendBlockStatus(nil, id, ext); !bytes.Equal(out, b) {
					t.Fatalf("block status % x -> % x", b, out)
				}
			}
		}
	})
}

func FuzzClientParseURI(f *testing.F) {
	for _, s := range []string{
		"nbd://example.com/disk", "nbd+unix:///disk?socket=/tmp/s", "nbds://[::1]:10810//x?tls-verify-peer=0",
		"nbds+unix:///?socket=%00abs&tls-hostname=h", "nbd://h/hello%20world?x-foo=1", "nbd:opaque", "nbd://h:99999/",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseURI(s)
		if err != nil {
			return
		}
		again, err := ParseURI(u.String())
		if err != nil {
			t.Fatalf("%q parsed, but its String %q does not: %v", s, u.String(), err)
		}
		if diff := cmp.Diff(u, again); diff != "" {
			t.Fatalf("%q -> %q (-first +second):\n%s", s, u.String(), diff)
		}
	})
}
