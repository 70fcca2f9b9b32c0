package nbd

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// DefaultPort is the NBD port assigned by IANA, used when a URI names none.
const DefaultPort = 10809

// URI is a parsed NBD URI (NetworkBlockDevice/nbd doc/uri.md):
//
//	nbd://[user@]host[:port][/export][?query]
//	nbds://...                              (TLS required)
//	nbd+unix:///[export]?socket=PATH[&...]
//	nbds+unix:///[export]?socket=PATH[&...] (TLS required)
type URI struct {
	// TLS is true for the nbds schemes: the connection must use TLS.
	TLS bool
	// Network is "tcp" or "unix".
	Network string
	// Address is host:port for tcp (port defaults to DefaultPort, host to
	// "localhost") or the socket path for unix; an abstract socket, given
	// in the URI as a leading %00, is written with a leading '@' as Go's
	// net package expects.
	Address string
	// Export is the path without its leading '/', percent-decoded.
	Export string
	// User is the userinfo of the authority (a TLS user name). It is kept
	// but unused: it matters only to PSK, which crypto/tls lacks.
	User string
	// TLSType is the tls-type parameter: "", "x509", "anon" or "psk".
	TLSType string
	// TLSHostname is the tls-hostname parameter.
	TLSHostname string
	// TLSVerifyPeer is false only when tls-verify-peer=0.
	TLSVerifyPeer bool
	// TLSCertificates is the tls-certificates parameter (a directory
	// holding ca-cert.pem and, optionally, client-cert.pem and
	// client-key.pem, as libnbd and nbdkit name them).
	TLSCertificates string
	// Extra holds the experimental x- parameters, which are accepted and
	// otherwise ignored.
	Extra url.Values
}

// URIError reports an NBD URI that cannot be used, and says why.
type URIError struct {
	URI    string
	Reason string
}

func (e *URIError) Error() string { return "nbd: bad URI " + strconv.Quote(e.URI) + ": " + e.Reason }

// Is makes errors.Is(err, ErrBadURI) true for every URIError.
func (e *URIError) Is(target error) bool { return target == ErrBadURI }

// ErrBadURI matches every *URIError.
var ErrBadURI = errors.New("nbd: bad URI")

// ParseURI parses an NBD URI as doc/uri.md describes it. Unknown query
// parameters are an error unless they start with "x-"; so are a repeated
// parameter, a unix scheme without socket= or with an authority, a TCP
// scheme with socket=, and TLS parameters on a plain nbd or nbd+unix URI.
// tls-type=psk and tls-type=anon are refused: Go's crypto/tls supports
// neither pre-shared keys nor anonymous TLS.
func ParseURI(s string) (*URI, error) {
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, &URIError{URI: s, Reason: err.Error()}
	}
	r := &URI{TLSVerifyPeer: true}
	err = r.parseScheme(u)
	if err == nil {
		err = r.parseAuthority(s, u)
	}
	if err == nil {
		err = r.parseQuery(u)
	}
	if err != nil {
		return nil, &URIError{URI: s, Reason: err.Error()}
	}
	return r, nil
}

// uriReason is why a URI is bad (URIError.Reason).
func uriReason(format string, args ...any) error { return fmt.Errorf(format, args...) }

func (r *URI) parseScheme(u *url.URL) error {
	switch u.Scheme {
	case "nbd":
		r.Network = "tcp"
	case "nbds":
		r.Network, r.TLS = "tcp", true
	case "nbd+unix":
		r.Network = "unix"
	case "nbds+unix":
		r.Network, r.TLS = "unix", true
	case "":
		return uriReason("no scheme: want nbd://, nbds://, nbd+unix:// or nbds+unix://")
	default:
		return uriReason("unknown scheme %s: want nbd, nbds, nbd+unix or nbds+unix", strconv.Quote(u.Scheme))
	}
	if u.Opaque != "" {
		return uriReason("%s: needs // after the scheme", u.Scheme)
	}
	return nil
}

// parseAuthority takes the user and the export, and refuses fragments.
func (r *URI) parseAuthority(s string, u *url.URL) error {
	if u.Fragment != "" || strings.Contains(s, "#") {
		return uriReason("fragments (#...) have no meaning in an NBD URI")
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			return uriReason("a password in the URI is not supported")
		}
		r.User = u.User.Username()
	}
	if len(u.Path) > 0 {
		if u.Path[0] != '/' {
			return uriReason("export path must start with /")
		}
		r.Export = u.Path[1:]
	}
	if len(r.Export) > MaxStringLength {
		return uriReason("export name longer than 4096 bytes")
	}
	if strings.IndexByte(r.Export, 0) >= 0 {
		return uriReason("export name contains NUL")
	}
	return nil
}

// parseQuery takes the query parameters, then the address.
func (r *URI) parseQuery(u *url.URL) error {
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return uriReason("query: %v", err)
	}
	socket := ""
	haveSocket := false
	for k, vs := range q {
		if len(vs) != 1 {
			return uriReason("query parameter %s given %d times", k, len(vs))
		}
		if k == "socket" {
			socket, haveSocket = vs[0], true
			continue
		}
		if err := r.parseParam(k, vs[0]); err != nil {
			return err
		}
		if strings.HasPrefix(k, "tls-") && !r.TLS {
			return uriReason("%s given, but the scheme %s does not use TLS (use nbds or nbds+unix)", k, u.Scheme)
		}
	}
	if r.Network == "unix" {
		return r.unixAddress(u, socket, haveSocket)
	}
	if haveSocket {
		return uriReason("socket= is only for nbd+unix and nbds+unix")
	}
	return r.tcpAddress(u)
}

// parseParam takes one query parameter other than socket.
func (r *URI) parseParam(k, v string) error {
	switch {
	case k == "tls-type":
		switch v {
		case "x509":
		case "psk":
			return uriReason("tls-type=psk: pre-shared keys are not supported by Go's crypto/tls (golang/go#6379); use X.509 certificates")
		case "anon":
			return uriReason("tls-type=anon: anonymous TLS is not supported by Go's crypto/tls; use X.509 certificates")
		default:
			return uriReason("tls-type=%s: want x509 (or psk/anon, which Go cannot do)", strconv.Quote(v))
		}
		r.TLSType = v
	case k == "tls-hostname":
		if v == "" {
			return uriReason("tls-hostname is empty")
		}
		r.TLSHostname = v
	case k == "tls-verify-peer":
		switch v {
		case "0", "false":
			r.TLSVerifyPeer = false
		case "1", "true":
			r.TLSVerifyPeer = true
		default:
			return uriReason("tls-verify-peer=%s: want 0 or 1", strconv.Quote(v))
		}
	case k == "tls-certificates":
		if v == "" {
			return uriReason("tls-certificates is empty")
		}
		r.TLSCertificates = v
	case strings.HasPrefix(k, "x-"):
		if r.Extra == nil {
			r.Extra = url.Values{}
		}
		r.Extra[k] = []string{v}
	default:
		return uriReason("unknown query parameter %s (experimental ones start with x-)", strconv.Quote(k))
	}
	return nil
}

func (r *URI) unixAddress(u *url.URL, socket string, haveSocket bool) error {
	if u.Host != "" {
		return uriReason("%s takes no host (%s): name the socket with ?socket=", u.Scheme, strconv.Quote(u.Host))
	}
	if !haveSocket || socket == "" {
		return uriReason("%s needs ?socket=PATH", u.Scheme)
	}
	if socket[0] == 0 {
		socket = "@" + socket[1:]
	}
	r.Address = socket
	return nil
}

func (r *URI) tcpAddress(u *url.URL) error {
	host, port := u.Hostname(), u.Port()
	if strings.Contains(host, ":") && !strings.HasPrefix(u.Host, "[") {
		return uriReason("IPv6 address %q must be in brackets (RFC 2732): nbd://[%s]/", u.Host, u.Host)
	}
	if host == "" {
		host = "localhost"
	}
	if port == "" {
		if strings.HasSuffix(u.Host, ":") {
			return uriReason("empty port")
		}
		port = strconv.Itoa(DefaultPort)
	} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return uriReason("port %s out of range 1-65535", port)
	}
	r.Address = net.JoinHostPort(host, port)
	return nil
}

// String formats u as an NBD URI that ParseURI reads back to u.
func (u *URI) String() string {
	scheme := "nbd"
	if u.TLS {
		scheme = "nbds"
	}
	v := url.URL{Scheme: scheme, Path: "/" + u.Export}
	q := url.Values{}
	if u.Network == "unix" {
		v.Scheme += "+unix"
		s := u.Address
		if strings.HasPrefix(s, "@") {
			s = "\x00" + s[1:]
		}
		q.Set("socket", s)
	} else {
		v.Host = u.Address
		if u.User != "" {
			v.User = url.User(u.User)
		}
	}
	if u.TLSType != "" {
		q.Set("tls-type", u.TLSType)
	}
	if u.TLSHostname != "" {
		q.Set("tls-hostname", u.TLSHostname)
	}
	if u.TLS && !u.TLSVerifyPeer {
		q.Set("tls-verify-peer", "0")
	}
	if u.TLSCertificates != "" {
		q.Set("tls-certificates", u.TLSCertificates)
	}
	for k, vs := range u.Extra {
		q[k] = vs
	}
	v.RawQuery = q.Encode()
	return v.String()
}
