package nbd

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A flag the command does not take is refused locally with an error that
// matches ErrInvalidFlag and EINVAL (as every other local refusal matches
// a sentinel and the errno a server would answer); nothing is sent.
// Before, the error matched neither, and ErrnoOf made it EIO.
func TestClientInvalidFlagSentinel(t *testing.T) {
	next := make(chan Command, 1)
	c, err := clientScripted(t, func(p *clientPeer) {
		p.handshake(clientDefaultScript())
		r, _ := p.request()
		next <- r.Type
		p.hangup()
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = c.Pread(ctx, make([]byte, 512), 0, FlagFUA)
	if !errors.Is(err, ErrInvalidFlag) || !errors.Is(err, syscall.EINVAL) || ErrnoOf(err) != EINVAL {
		t.Errorf("READ with FUA: %v; want ErrInvalidFlag matching EINVAL", err)
	}
	c.Close()
	if got := <-next; got != CmdDisc {
		t.Errorf("the refused READ went out: the server got %v first, want DISC", got)
	}
}

// Negotiator calls out of place fail with ErrNegotiation; option data past
// the client's bound with ErrOptTooBig. Before, plain errors.New strings.
func TestNegotiatorMisuseSentinels(t *testing.T) {
	cs, ss := net.Pipe()
	defer cs.Close()
	go func() {
		defer ss.Close()
		defer func() { recover() }()
		p := &clientPeer{t: t, conn: ss}
		p.greet(HandshakeFixedNewstyle | HandshakeNoZeroes)
		p.hangup()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := Negotiate(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", MaxStringLength)
	queries := make([]string, 300) // over 1 MiB of option data
	for i := range queries {
		queries[i] = big
	}
	n.sr = true // as after StructuredReplies
	if _, err := n.SetMetaContexts(ctx, "", queries...); !errors.Is(err, ErrOptTooBig) {
		t.Errorf("SET_META_CONTEXT with 1.2 MB of queries: %v, want ErrOptTooBig", err)
	}
	n.tls = true // as after StartTLS
	if err := n.StartTLS(ctx, nil); !errors.Is(err, ErrNegotiation) {
		t.Errorf("StartTLS with TLS on: %v, want ErrNegotiation", err)
	}
	n.Close()
	if err := n.StructuredReplies(ctx); !errors.Is(err, ErrNegotiation) {
		t.Errorf("StructuredReplies after Close: %v, want ErrNegotiation", err)
	}
	if _, err := n.Go(ctx, ""); !errors.Is(err, ErrNegotiation) {
		t.Errorf("Go after Close: %v, want ErrNegotiation", err)
	}
}
