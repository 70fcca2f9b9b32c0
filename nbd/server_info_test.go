package nbd

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// An INFO or GO that repeats its info requests gets one reply per distinct
// info type (issue 17: 32,000 repeats used to get 32,003 replies), so what
// one option can make the server send is bounded whatever its data.
func TestServerInfoRepeatsAnsweredOnce(t *testing.T) {
	desc := strings.Repeat("d", MaxStringLength)
	name := strings.Repeat("n", MaxStringLength)
	path := serverTestStart(t, &Server{Exports: []Export{{Name: name, Description: desc, Backend: NewMemDisk(1 << 20)}}})
	c := serverTestDial(t, path)
	c.hello(ClientFixedNewstyle | ClientNoZeroes)

	// As many requests as fit the server's option limit: every known type
	// and an unknown one, over and over.
	var reqs []InfoType
	room := (serverMaxOptionData - 6 - len(name)) / 2
	cycle := []InfoType{InfoName, InfoDescription, InfoName, InfoExport, InfoBlockSize, 777}
	for len(reqs) < room {
		reqs = append(reqs, cycle[len(reqs)%len(cycle)])
	}
	data := AppendInfoRequest(nil, &InfoRequest{Name: name, Requests: reqs})
	if len(data) > serverMaxOptionData {
		t.Fatalf("test option of %d bytes is past the server's limit", len(data))
	}
	for _, opt := range []OptionCode{OptInfo, OptGo} {
		rs := c.opt(opt, data)
		var types []InfoType
		total := 0
		for _, r := range rs {
			total += OptionReplySize + len(r.data)
			if r.typ == RepInfo {
				types = append(types, InfoType(binary.BigEndian.Uint16(r.data)))
			}
		}
		if want := []InfoType{InfoExport, InfoName, InfoDescription, InfoBlockSize}; !cmp.Equal(types, want) {
			t.Errorf("%v with %d repeated requests: info replies %v, want %v", opt, len(reqs), types, want)
		}
		if last := rs[len(rs)-1].typ; last != RepAck {
			t.Errorf("%v ended with %v, want ACK", opt, last)
		}
		// EXPORT, NAME, DESCRIPTION, BLOCK_SIZE and ACK: their headers,
		// two strings of at most 4096 bytes and a few fixed fields.
		if bound := 5*OptionReplySize + 2*(2+MaxStringLength) + 12 + 14; total > bound {
			t.Errorf("%v sent %d bytes, more than the %d its replies can hold", opt, total, bound)
		}
	}
	// GO took effect: the session is in transmission.
	c.request(CmdRead, 0, 1, 0, 512, nil)
	if r, _ := c.simple(512); r.Error != 0 || r.Cookie != 1 {
		t.Fatalf("read after GO: %+v", r)
	}
}

// A description asked for on an export without one gets no reply, and
// a name asked for once still gets its reply.
func TestServerInfoOnlyWhatExists(t *testing.T) {
	path := serverTestStart(t, &Server{Exports: []Export{{Name: "plain", Backend: NewMemDisk(4096)}}})
	c := serverTestDial(t, path)
	c.hello(ClientFixedNewstyle)
	rs := c.opt(OptInfo, AppendInfoRequest(nil, &InfoRequest{Name: "plain", Requests: []InfoType{InfoDescription, InfoDescription, InfoName}}))
	var types []InfoType
	for _, r := range rs[:len(rs)-1] {
		types = append(types, InfoType(binary.BigEndian.Uint16(r.data)))
	}
	if want := []InfoType{InfoExport, InfoName, InfoBlockSize}; !cmp.Equal(types, want) {
		t.Fatalf("info replies %v, want %v", types, want)
	}
}
