package nbd

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Golden byte vectors for every message of the protocol, written out by
// hand from the layouts in proto.md, checked in both directions.

func clientHex(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Errorf("%s:\n got % x\nwant % x", what, got, want)
	}
}

func TestClientGoldenHeaders(t *testing.T) {
	t.Run("simple reply", func(t *testing.T) {
		r := SimpleReply{Error: EIO, Cookie: 0x1122334455667788}
		want := []byte{0x67, 0x44, 0x66, 0x98, 0, 0, 0, 5, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88}
		var b [SimpleReplySize]byte
		r.Put(&b)
		clientHex(t, "Put", b[:], want)
		var got SimpleReply
		if err := got.Parse(&b); err != nil || got != r {
			t.Fatalf("Parse = %+v, %v", got, err)
		}
		b[3] ^= 1
		if err := got.Parse(&b); !errors.Is(err, ErrProtocol) {
			t.Fatalf("bad magic: %v", err)
		}
	})
	t.Run("chunk header", func(t *testing.T) {
		h := ChunkHeader{Flags: 0, Type: ChunkErrorOffset, Cookie: 0xfedcba9876543210, Length: 0x01020304}
		want := []byte{0x66, 0x8e, 0x33, 0xef, 0, 0, 0x80, 0x02, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10, 1, 2, 3, 4}
		var b [ChunkHeaderSize]byte
		h.Put(&b)
		clientHex(t, "Put", b[:], want)
		var got ChunkHeader
		if err := got.Parse(&b); err != nil || got != h {
			t.Fatalf("Parse = %+v, %v", got, err)
		}
		b[0] = 0x67
		if err := got.Parse(&b); !errors.Is(err, ErrProtocol) {
			t.Fatalf("bad magic: %v", err)
		}
	})
	t.Run("option header", func(t *testing.T) {
		h := OptionHeader{Option: OptGo, Length: 16}
		want := []byte{'I', 'H', 'A', 'V', 'E', 'O', 'P', 'T', 0, 0, 0, 7, 0, 0, 0, 16}
		var b [OptionHeaderSize]byte
		h.Put(&b)
		clientHex(t, "Put", b[:], want)
		var got OptionHeader
		if err := got.Parse(&b); err != nil || got != h {
			t.Fatalf("Parse = %+v, %v", got, err)
		}
		b[7] = 'X'
		if err := got.Parse(&b); !errors.Is(err, ErrProtocol) {
			t.Fatalf("bad magic: %v", err)
		}
	})
	t.Run("option reply", func(t *testing.T) {
		r := OptionReply{Option: OptSetMetaContext, Type: RepMetaContext, Length: 19}
		want := []byte{0, 0x03, 0xe8, 0x89, 0x04, 0x55, 0x65, 0xa9, 0, 0, 0, 10, 0, 0, 0, 4, 0, 0, 0, 19}
		var b [OptionReplySize]byte
		r.Put(&b)
		clientHex(t, "Put", b[:], want)
		var got OptionReply
		if err := got.Parse(&b); err != nil || got != r {
			t.Fatalf("Parse = %+v, %v", got, err)
		}
		b[1] = 0
		if err := got.Parse(&b); !errors.Is(err, ErrProtocol) {
			t.Fatalf("bad magic: %v", err)
		}
	})
	t.Run("read request", func(t *testing.T) {
		r := Request{Flags: FlagDF, Type: CmdRead, Cookie: 1, Offset: 1 << 40, Length: 1 << 25}
		want := []byte{0x25, 0x60, 0x95, 0x13, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 2, 0, 0, 0}
		var b [RequestSize]byte
		r.Put(&b)
		clientHex(t, "Put", b[:], want)
	})
	t.Run("disconnect", func(t *testing.T) {
		r := Request{Type: CmdDisc}
		want := []byte{0x25, 0x60, 0x95, 0x13, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
		var b [RequestSize]byte
		r.Put(&b)
		clientHex(t, "Put", b[:], want)
	})
}

func TestClientGoldenOptionPayloads(t *testing.T) {
	t.Run("GO/INFO request", func(t *testing.T) {
		r := InfoRequest{Name: "exp", Requests: []InfoType{InfoBlockSize, InfoName}}
		want := []byte{0, 0, 0, 3, 'e', 'x', 'p', 0, 2, 0, 3, 0, 1}
		clientHex(t, "Append", AppendInfoRequest(nil, &r), want)
		got, err := ParseInfoRequest(want)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(r, got); diff != "" {
			t.Fatal(diff)
		}
		// Length 0 with data after it (a real bug of a Go client): the
		// name length must fit the option data.
		if _, err := ParseInfoRequest([]byte{0, 0, 0, 9, 'e', 'x', 'p', 0, 0}); !errors.Is(err, ErrProtocol) {
			t.Fatalf("name past the data: %v", err)
		}
	})
	t.Run("INFO replies", func(t *testing.T) {
		var e ExportInfo
		exp := []byte{0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0x01, 0x0d}
		clientHex(t, "export", AppendInfoExport(nil, 4096, ExportHasFlags|ExportSendFlush|ExportSendFUA|ExportCanMultiConn), exp)
		if it, err := ParseInfo(exp, &e); err != nil || it != InfoExport || e.Size != 4096 || e.Flags != ExportHasFlags|ExportSendFlush|ExportSendFUA|ExportCanMultiConn {
			t.Fatalf("export: %v %v %+v", it, err, e)
		}
		name := []byte{0, 1, 'd', 'i', 's', 'k'}
		clientHex(t, "name", AppendInfoString(nil, InfoName, "disk"), name)
		desc := []byte{0, 2, 'h', 'i'}
		clientHex(t, "description", AppendInfoString(nil, InfoDescription, "hi"), desc)
		bs := []byte{0, 3, 0, 0, 2, 0, 0, 0, 0x10, 0, 0, 0x20, 0, 0}
		clientHex(t, "block size", AppendInfoBlockSize(nil, 512, 4096, 2<<20), bs)
		for _, b := range [][]byte{name, desc, bs} {
			if _, err := ParseInfo(b, &e); err != nil {
				t.Fatal(err)
			}
		}
		want := ExportInfo{Size: 4096, Flags: e.Flags, Name: "disk", Description: "hi", MinBlock: 512, PreferredBlock: 4096, MaxPayload: 2 << 20}
		if diff := cmp.Diff(want, e); diff != "" {
			t.Fatal(diff)
		}
		for name, bad := range map[string][]byte{
			"short export":      exp[:11],
			"long block size":   append(bs, 0),
			"no flags bit":      {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
			"shorter than type": {0},
		} {
			if _, err := ParseInfo(bad, &e); !errors.Is(err, ErrProtocol) {
				t.Errorf("%s: %v", name, err)
			}
		}
		if it, err := ParseInfo([]byte{0x12, 0x34, 1, 2, 3}, &e); err != nil || it != 0x1234 {
			t.Errorf("unknown info type: %v %v", it, err)
		}
	})
	t.Run("meta context request", func(t *testing.T) {
		r := MetaContextRequest{Export: "e", Queries: []string{"base:", "x"}}
		want := []byte{0, 0, 0, 1, 'e', 0, 0, 0, 2, 0, 0, 0, 5, 'b', 'a', 's', 'e', ':', 0, 0, 0, 1, 'x'}
		clientHex(t, "Append", AppendMetaContextRequest(nil, &r), want)
		got, err := ParseMetaContextRequest(want)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(r, got); diff != "" {
			t.Fatal(diff)
		}
		if _, err := ParseMetaContextRequest([]byte{0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}); !errors.Is(err, ErrProtocol) {
			t.Fatalf("huge query count: %v", err)
		}
	})
	t.Run("meta context reply", func(t *testing.T) {
		want := []byte{0, 0, 0, 9, 'b', 'a', 's', 'e', ':', 'a', 'l', 'l', 'o', 'c', 'a', 't', 'i', 'o', 'n'}
		clientHex(t, "Append", AppendMetaContextReply(nil, 9, MetaContextBaseAllocation), want)
		id, name, err := ParseMetaContextReply(want)
		if err != nil || id != 9 || name != MetaContextBaseAllocation {
			t.Fatalf("Parse = %d %q %v", id, name, err)
		}
	})
	t.Run("server reply", func(t *testing.T) {
		want := []byte{0, 0, 0, 2, 'a', 'b', 'd', 'e', 's', 'c'}
		clientHex(t, "Append", AppendServerReply(nil, "ab", "desc"), want)
		n, d, err := ParseServerReply(want)
		if err != nil || n != "ab" || d != "desc" {
			t.Fatalf("Parse = %q %q %v", n, d, err)
		}
		if _, _, err := ParseServerReply([]byte{0, 0, 0, 3, 'a'}); !errors.Is(err, ErrProtocol) {
			t.Fatalf("name past the data: %v", err)
		}
	})
}

func TestClientGoldenChunkPayloads(t *testing.T) {
	t.Run("offset hole", func(t *testing.T) {
		want := []byte{0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 2, 0}
		var b [OffsetHoleSize]byte
		PutOffsetHole(&b, 4096, 512)
		clientHex(t, "Put", b[:], want)
		if off, n := ParseOffsetHole(&b); off != 4096 || n != 512 {
			t.Fatal(off, n)
		}
	})
	t.Run("error", func(t *testing.T) {
		e := ErrorChunk{Error: ENOSPC, Message: "full"}
		want := []byte{0, 0, 0, 28, 0, 4, 'f', 'u', 'l', 'l'}
		clientHex(t, "Append", AppendErrorChunk(nil, &e), want)
		got, err := ParseErrorChunk(ChunkError, want)
		if err != nil || got != e {
			t.Fatalf("Parse = %+v %v", got, err)
		}
	})
	t.Run("error offset", func(t *testing.T) {
		// The offset comes after the message (proto.md), not before it.
		e := ErrorChunk{Error: EIO, Message: "x", Offset: 513, HasOffset: true}
		want := []byte{0, 0, 0, 5, 0, 1, 'x', 0, 0, 0, 0, 0, 0, 2, 1}
		clientHex(t, "Append", AppendErrorChunk(nil, &e), want)
		got, err := ParseErrorChunk(ChunkErrorOffset, want)
		if err != nil || got != e {
			t.Fatalf("Parse = %+v %v", got, err)
		}
		if _, err := ParseErrorChunk(ChunkErrorOffset, want[:len(want)-1]); !errors.Is(err, ErrProtocol) {
			t.Fatalf("short offset: %v", err)
		}
	})
	t.Run("block status", func(t *testing.T) {
		ext := []Extent{{Length: 4096, Flags: ExtentHole | ExtentZero}, {Length: 512, Flags: 0}}
		want := []byte{0, 0, 0, 1, 0, 0, 0x10, 0, 0, 0, 0, 3, 0, 0, 2, 0, 0, 0, 0, 0}
		clientHex(t, "Append", AppendBlockStatus(nil, 1, ext), want)
		id, got, err := ParseBlockStatus(want, nil)
		if err != nil || id != 1 {
			t.Fatal(id, err)
		}
		if diff := cmp.Diff(ext, got); diff != "" {
			t.Fatal(diff)
		}
		for name, bad := range map[string][]byte{
			"no extents":      want[:4],
			"partial":         want[:15],
			"zero length":     {0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0},
			"shorter than id": {0, 0},
		} {
			if _, _, err := ParseBlockStatus(bad, nil); !errors.Is(err, ErrProtocol) {
				t.Errorf("%s: %v", name, err)
			}
		}
	})
}

// The handshake's fixed messages: the greeting a newstyle server sends and
// the EXPORT_NAME reply, as the client reads them.
func TestClientGoldenGreeting(t *testing.T) {
	greeting := []byte{'N', 'B', 'D', 'M', 'A', 'G', 'I', 'C', 'I', 'H', 'A', 'V', 'E', 'O', 'P', 'T', 0, 3}
	old := []byte{'N', 'B', 'D', 'M', 'A', 'G', 'I', 'C', 0, 0, 0x42, 0x02, 0x81, 0x86, 0x12, 0x53}
	var b [8]byte
	for _, c := range []struct {
		b []byte
		v uint64
	}{{greeting[:8], MagicNBD}, {greeting[8:16], MagicIHaveOpt}, {old[8:], MagicOldstyle}} {
		for i := range b {
			b[i] = byte(c.v >> (56 - 8*i))
		}
		clientHex(t, "magic", b[:], c.b)
	}
	if HandshakeFlags(3) != HandshakeFixedNewstyle|HandshakeNoZeroes {
		t.Fatal("handshake flag bits")
	}
}
