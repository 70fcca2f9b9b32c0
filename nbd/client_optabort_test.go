package nbd

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// clientNextOption reads what the client sends after an option error: the
// next option's name, or how the client hung up.
func clientNextOption(p *clientPeer) string {
	var h [OptionHeaderSize]byte
	_ = p.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(p.conn, h[:]); err != nil {
		return "hang-up (" + err.Error() + ")"
	}
	var oh OptionHeader
	if err := oh.Parse(&h); err != nil {
		return "garbage"
	}
	return oh.Option.String()
}

// proto.md: "If the client receives NBD_REP_ERR_SHUTDOWN it MUST initiate
// a soft disconnect" (NBD_OPT_ABORT), and a party MUST NOT hang up save
// where the spec allows. NewClient and Dial send STRUCTURED_REPLY first,
// which this package's Server answers ERR_SHUTDOWN while shutting down,
// when full, or when it pushes the handshake out; SET_META_CONTEXT the
// same. The client used to hang up instead of sending ABORT.
func TestClientErrShutdownSendsAbort(t *testing.T) {
	for _, failing := range []OptionCode{OptStructuredReply, OptSetMetaContext} {
		t.Run(failing.String(), func(t *testing.T) {
			next := make(chan string, 1)
			_, err := clientScripted(t, func(p *clientPeer) {
				p.greet(HandshakeFixedNewstyle | HandshakeNoZeroes)
				for {
					o, _ := p.option()
					if o == failing {
						p.reply(o, RepErrShutdown, []byte("server shutting down"))
						break
					}
					p.reply(o, RepAck, nil)
				}
				next <- clientNextOption(p)
			}, WithMetaContexts(MetaContextBaseAllocation))
			if !errors.Is(err, ErrOptShutdown) {
				t.Fatalf("NewClient: %v, want ErrOptShutdown", err)
			}
			if got := <-next; got != OptAbort.String() {
				t.Errorf("after ERR_SHUTDOWN the client sent %s, want NBD_OPT_ABORT", got)
			}
		})
	}
}

// ListExports answered ERR_SHUTDOWN ends with NBD_OPT_ABORT too.
func TestClientListExportsErrShutdownSendsAbort(t *testing.T) {
	dir, err := os.MkdirTemp("", "nbdlist")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "s")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	next := make(chan string, 1)
	go func() {
		nc, err := l.Accept()
		if err != nil {
			next <- "accept: " + err.Error()
			return
		}
		defer nc.Close()
		defer func() {
			if r := recover(); r != nil {
				next <- "script failed"
			}
		}()
		p := &clientPeer{t: t, conn: nc}
		p.greet(HandshakeFixedNewstyle | HandshakeNoZeroes)
		p.expect(OptList)
		p.reply(OptList, RepErrShutdown, []byte("server shutting down"))
		next <- clientNextOption(p)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := ListExports(ctx, "nbd+unix:///?socket="+path); !errors.Is(err, ErrOptShutdown) {
		t.Fatalf("ListExports: %v, want ErrOptShutdown", err)
	}
	if got := <-next; got != OptAbort.String() {
		t.Errorf("after ERR_SHUTDOWN to LIST the client sent %s, want NBD_OPT_ABORT", got)
	}
}
