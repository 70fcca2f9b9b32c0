package nbd

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// Round-trip properties for every codec of wire.go and payload.go: encode
// a random value, decode it, and get the value back.

func clientGenName(maxLen int) *rapid.Generator[string] {
	return rapid.StringN(0, maxLen, maxLen)
}

func TestClientRapidHeaders(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := Request{
			Flags:  CmdFlags(rapid.Uint16().Draw(t, "flags")),
			Type:   Command(rapid.Uint16().Draw(t, "type")),
			Cookie: rapid.Uint64().Draw(t, "cookie"),
			Offset: rapid.Uint64().Draw(t, "offset"),
			Length: rapid.Uint32().Draw(t, "length"),
		}
		var rb [RequestSize]byte
		r.Put(&rb)
		var r2 Request
		if err := r2.Parse(&rb); err != nil || r2 != r {
			t.Fatalf("Request %+v -> %+v %v", r, r2, err)
		}
		s := SimpleReply{Error: Errno(rapid.Uint32().Draw(t, "errno")), Cookie: rapid.Uint64().Draw(t, "cookie2")}
		var sb [SimpleReplySize]byte
		s.Put(&sb)
		var s2 SimpleReply
		if err := s2.Parse(&sb); err != nil || s2 != s {
			t.Fatalf("SimpleReply %+v -> %+v %v", s, s2, err)
		}
		h := ChunkHeader{
			Flags:  ReplyFlags(rapid.Uint16().Draw(t, "cflags")),
			Type:   ChunkType(rapid.Uint16().Draw(t, "ctype")),
			Cookie: rapid.Uint64().Draw(t, "ccookie"),
			Length: rapid.Uint32().Draw(t, "clength"),
		}
		var hb [ChunkHeaderSize]byte
		h.Put(&hb)
		var h2 ChunkHeader
		if err := h2.Parse(&hb); err != nil || h2 != h {
			t.Fatalf("ChunkHeader %+v -> %+v %v", h, h2, err)
		}
		o := OptionHeader{Option: OptionCode(rapid.Uint32().Draw(t, "opt")), Length: rapid.Uint32().Draw(t, "olen")}
		var ob [OptionHeaderSize]byte
		o.Put(&ob)
		var o2 OptionHeader
		if err := o2.Parse(&ob); err != nil || o2 != o {
			t.Fatalf("OptionHeader %+v -> %+v %v", o, o2, err)
		}
		or := OptionReply{
			Option: OptionCode(rapid.Uint32().Draw(t, "ropt")),
			Type:   OptionReplyType(rapid.Uint32().Draw(t, "rtype")),
			Length: rapid.Uint32().Draw(t, "rlen"),
		}
		var orb [OptionReplySize]byte
		or.Put(&orb)
		var or2 OptionReply
		if err := or2.Parse(&orb); err != nil || or2 != or {
			t.Fatalf("OptionReply %+v -> %+v %v", or, or2, err)
		}
	})
}

func TestClientRapidInfoRequest(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := InfoRequest{Name: clientGenName(MaxStringLength).Draw(t, "name")}
		r.Requests = rapid.SliceOfN(rapid.Custom(func(t *rapid.T) InfoType {
			return InfoType(rapid.Uint16().Draw(t, "it"))
		}), 0, 50).Draw(t, "requests")
		if len(r.Requests) == 0 {
			r.Requests = nil
		}
		got, err := ParseInfoRequest(AppendInfoRequest(nil, &r))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(r, got); diff != "" {
			t.Fatal(diff)
		}
	})
}

func TestClientRapidInfo(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		want := ExportInfo{
			Size:           rapid.Uint64().Draw(t, "size"),
			Flags:          ExportFlags(rapid.Uint16().Draw(t, "flags")) | ExportHasFlags,
			Name:           clientGenName(MaxStringLength).Draw(t, "name"),
			Description:    clientGenName(MaxStringLength).Draw(t, "desc"),
			MinBlock:       rapid.Uint32().Draw(t, "min"),
			PreferredBlock: rapid.Uint32().Draw(t, "pref"),
			MaxPayload:     rapid.Uint32().Draw(t, "max"),
		}
		var got ExportInfo
		for _, b := range [][]byte{
			AppendInfoExport(nil, want.Size, want.Flags),
			AppendInfoString(nil, InfoName, want.Name),
			AppendInfoString(nil, InfoDescription, want.Description),
			AppendInfoBlockSize(nil, want.MinBlock, want.PreferredBlock, want.MaxPayload),
		} {
			if _, err := ParseInfo(b, &got); err != nil {
				t.Fatal(err)
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatal(diff)
		}
	})
}

func TestClientRapidMetaContext(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := MetaContextRequest{
			Export:  clientGenName(300).Draw(t, "export"),
			Queries: rapid.SliceOfN(clientGenName(300), 0, 20).Draw(t, "queries"),
		}
		if len(r.Queries) == 0 {
			r.Queries = nil
		}
		got, err := ParseMetaContextRequest(AppendMetaContextRequest(nil, &r))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(r, got); diff != "" {
			t.Fatal(diff)
		}
		id := rapid.Uint32().Draw(t, "id")
		name := clientGenName(MaxStringLength).Draw(t, "name")
		id2, name2, err := ParseMetaContextReply(AppendMetaContextReply(nil, id, name))
		if err != nil || id2 != id || name2 != name {
			t.Fatalf("meta context reply %d %q -> %d %q %v", id, name, id2, name2, err)
		}
	})
}

func TestClientRapidServerReply(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		name := clientGenName(MaxStringLength).Draw(t, "name")
		desc := clientGenName(MaxStringLength).Draw(t, "desc")
		n, d, err := ParseServerReply(AppendServerReply(nil, name, desc))
		if err != nil || n != name || d != desc {
			t.Fatalf("%q %q -> %q %q %v", name, desc, n, d, err)
		}
	})
}

func TestClientRapidChunkPayloads(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		off, size := rapid.Uint64().Draw(t, "off"), rapid.Uint32().Draw(t, "size")
		var hb [OffsetHoleSize]byte
		PutOffsetHole(&hb, off, size)
		if o2, s2 := ParseOffsetHole(&hb); o2 != off || s2 != size {
			t.Fatalf("hole %d %d -> %d %d", off, size, o2, s2)
		}
		e := ErrorChunk{
			Error:     Errno(rapid.Uint32Range(1, 1<<32-1).Draw(t, "errno")),
			Message:   clientGenName(MaxStringLength).Draw(t, "msg"),
			HasOffset: rapid.Bool().Draw(t, "hasoff"),
		}
		if e.HasOffset {
			e.Offset = rapid.Uint64().Draw(t, "eoff")
		}
		typ := ChunkError
		if e.HasOffset {
			typ = ChunkErrorOffset
		}
		e2, err := ParseErrorChunk(typ, AppendErrorChunk(nil, &e))
		if err != nil || e2 != e {
			t.Fatalf("error chunk %+v -> %+v %v", e, e2, err)
		}
		id := rapid.Uint32().Draw(t, "ctx")
		ext := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) Extent {
			return Extent{Length: rapid.Uint32Range(1, 1<<32-1).Draw(t, "len"), Flags: ExtentFlags(rapid.Uint32().Draw(t, "fl"))}
		}), 1, 100).Draw(t, "extents")
		id2, ext2, err := ParseBlockStatus(AppendBlockStatus(nil, id, ext), nil)
		if err != nil || id2 != id {
			t.Fatal(id2, err)
		}
		if diff := cmp.Diff(ext, ext2); diff != "" {
			t.Fatal(diff)
		}
	})
}

func TestClientRapidURI(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		u := URI{TLSVerifyPeer: true}
		u.TLS = rapid.Bool().Draw(t, "tls")
		if rapid.Bool().Draw(t, "unix") {
			u.Network = "unix"
			u.Address = "/" + rapid.StringMatching(`[a-z0-9 ./%&=?#-]{1,40}`).Draw(t, "sock")
		} else {
			u.Network = "tcp"
			host := rapid.SampledFrom([]string{"localhost", "127.0.0.1", "::1", "example.com", "h-1.example"}).Draw(t, "host")
			port := rapid.IntRange(1, 65535).Draw(t, "port")
			u.Address = clientJoin(host, port)
		}
		u.Export = strings.ReplaceAll(rapid.StringN(0, 30, 200).Draw(t, "export"), "\x00", "")
		if u.TLS {
			if rapid.Bool().Draw(t, "x509") {
				u.TLSType = "x509"
			}
			u.TLSVerifyPeer = rapid.Bool().Draw(t, "verify")
			if rapid.Bool().Draw(t, "hostname") {
				u.TLSHostname = rapid.StringMatching(`[a-z]{1,10}(\.[a-z]{1,5})?`).Draw(t, "tlshost")
			}
			if rapid.Bool().Draw(t, "certs") {
				u.TLSCertificates = "/" + rapid.StringMatching(`[a-z/]{1,20}`).Draw(t, "certdir")
			}
		}
		s := u.String()
		got, err := ParseURI(s)
		if err != nil {
			t.Fatalf("ParseURI(%q): %v", s, err)
		}
		if diff := cmp.Diff(&u, got); diff != "" {
			t.Fatalf("%q (-want +got):\n%s", s, diff)
		}
	})
}

func clientJoin(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }
