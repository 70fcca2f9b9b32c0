package nbd

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestClientParseURI(t *testing.T) {
	ok := map[string]URI{
		"nbd://example.com/disk":           {Network: "tcp", Address: "example.com:10809", Export: "disk", TLSVerifyPeer: true},
		"nbd://example.com":                {Network: "tcp", Address: "example.com:10809", TLSVerifyPeer: true},
		"nbd://example.com/":               {Network: "tcp", Address: "example.com:10809", TLSVerifyPeer: true},
		"nbd://example.com//disk":          {Network: "tcp", Address: "example.com:10809", Export: "/disk", TLSVerifyPeer: true},
		"nbd://example.com/hello%20world":  {Network: "tcp", Address: "example.com:10809", Export: "hello world", TLSVerifyPeer: true},
		"nbd://[::1]:1234/x":               {Network: "tcp", Address: "[::1]:1234", Export: "x", TLSVerifyPeer: true},
		"nbd:///x":                         {Network: "tcp", Address: "localhost:10809", Export: "x", TLSVerifyPeer: true},
		"nbd+unix:///disk?socket=sock":     {Network: "unix", Address: "sock", Export: "disk", TLSVerifyPeer: true},
		"nbd+unix:///?socket=%00/abstract": {Network: "unix", Address: "@/abstract", TLSVerifyPeer: true},
		"nbds://alice@h:1/e?tls-type=x509": {TLS: true, Network: "tcp", Address: "h:1", Export: "e", User: "alice", TLSType: "x509", TLSVerifyPeer: true},
		"nbds+unix:///e?socket=/s&tls-verify-peer=0&tls-hostname=n&tls-certificates=/c": {
			TLS: true, Network: "unix", Address: "/s", Export: "e", TLSHostname: "n", TLSCertificates: "/c"},
		"nbd://h/?x-foo=bar": {Network: "tcp", Address: "h:10809", TLSVerifyPeer: true, Extra: map[string][]string{"x-foo": {"bar"}}},
	}
	for s, want := range ok {
		got, err := ParseURI(s)
		if err != nil {
			t.Errorf("ParseURI(%q): %v", s, err)
			continue
		}
		if diff := cmp.Diff(&want, got); diff != "" {
			t.Errorf("ParseURI(%q) (-want +got):\n%s", s, diff)
		}
	}
	bad := map[string]string{
		"":                                     "no scheme",
		"http://h/":                            "unknown scheme",
		"nbd:h":                                "needs //",
		"nbd+unix:///disk":                     "needs ?socket=",
		"nbd+unix://host/disk?socket=s":        "takes no host",
		"nbd://h/?socket=s":                    "only for nbd+unix",
		"nbd://h/?tls-type=x509":               "does not use TLS",
		"nbds://h/?tls-type=psk":               "pre-shared keys",
		"nbds://h/?tls-type=anon":              "anonymous",
		"nbds://h/?tls-type=foo":               "want x509",
		"nbds://h/?tls-verify-peer=2":          "want 0 or 1",
		"nbd://h/?bogus=1":                     "unknown query parameter",
		"nbd://h/?x-a=1&x-a=2":                 "given 2 times",
		"nbd://h:0/":                           "out of range",
		"nbd://h:99999/":                       "out of range",
		"nbd://h:/":                            "empty port",
		"nbd://::1/":                           "brackets",
		"nbd://u:pw@h/":                        "password",
		"nbd://h/x#frag":                       "fragments",
		"nbd://h/" + strings.Repeat("a", 5000): "longer than 4096",
		"nbd://h/a%00b":                        "NUL",
		"nbd://h/%zz":                          "invalid URL escape",
	}
	for s, want := range bad {
		_, err := ParseURI(s)
		if err == nil || !errors.Is(err, ErrBadURI) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseURI(%q) = %v, want an error saying %q", s, err, want)
		}
	}
}
