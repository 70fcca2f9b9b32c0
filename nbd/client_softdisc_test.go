package nbd

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"
)

// proto.md, "Terminating the transmission phase": "If the client receives
// an ESHUTDOWN error it MUST initiate a soft disconnect." After one
// ESHUTDOWN reply the next thing on the wire is NBD_CMD_DISC, and a new
// call is refused locally with ErrServerShutdown (matching
// syscall.ESHUTDOWN). Before, the client sent the next READ.
func TestClientESHUTDOWNSoftDisconnect(t *testing.T) {
	got := make(chan Request, 1)
	c, err := clientScripted(t, func(p *clientPeer) {
		p.handshake(clientDefaultScript())
		r, _ := p.request()
		p.chunk(r.Cookie, ReplyFlagDone, ChunkError, AppendErrorChunk(nil, &ErrorChunk{Error: ESHUTDOWN, Message: "going down"}))
		r2, _ := p.request()
		got <- r2
		p.hangup()
	})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 512)
	if _, err := c.ReadAt(buf, 0); !errors.Is(err, syscall.ESHUTDOWN) {
		t.Fatalf("first read: %v, want the server's ESHUTDOWN", err)
	}
	_, err2 := c.ReadAt(buf, 512)
	if !errors.Is(err2, ErrServerShutdown) || !errors.Is(err2, syscall.ESHUTDOWN) || ErrnoOf(err2) != ESHUTDOWN {
		t.Errorf("call after ESHUTDOWN: %v, want ErrServerShutdown matching ESHUTDOWN", err2)
	}
	select {
	case r2 := <-got:
		if r2.Type != CmdDisc {
			t.Errorf("after ESHUTDOWN the client sent %v, want NBD_CMD_DISC", r2.Type)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no NBD_CMD_DISC after ESHUTDOWN")
	}
}

// A soft disconnect lets the requests already in flight finish: the
// second READ, sent before the ESHUTDOWN reply came, gets its data, and
// only then does NBD_CMD_DISC go out.
func TestClientESHUTDOWNFinishesInFlight(t *testing.T) {
	refused := make(chan struct{})
	sentFirst := make(chan struct{})
	disc := make(chan Request, 1)
	c, err := clientScripted(t, func(p *clientPeer) {
		cfg := clientDefaultScript()
		cfg.structured = false
		p.handshake(cfg)
		r1, _ := p.request()
		close(sentFirst)
		r2, _ := p.request()
		p.simple(r1.Cookie, ESHUTDOWN, nil)
		<-refused // the client refused a third call meanwhile
		p.simple(r2.Cookie, 0, make([]byte, r2.Length))
		r3, _ := p.request()
		disc <- r3
		p.hangup()
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first := clientAsync(func() error { return c.Pread(ctx, make([]byte, 512), 0, 0) })
	<-sentFirst
	second := clientAsync(func() error { return c.Pread(ctx, make([]byte, 512), 512, 0) })
	if err := clientWaitErr(t, first); !errors.Is(err, syscall.ESHUTDOWN) {
		t.Fatalf("first READ: %v, want ESHUTDOWN", err)
	}
	if err := c.Pread(ctx, make([]byte, 512), 1024, 0); !errors.Is(err, ErrServerShutdown) {
		t.Errorf("READ after ESHUTDOWN: %v, want ErrServerShutdown", err)
	}
	close(refused)
	if err := clientWaitErr(t, second); err != nil {
		t.Errorf("READ in flight when ESHUTDOWN came: %v, want success", err)
	}
	select {
	case r := <-disc:
		if r.Type != CmdDisc {
			t.Errorf("after the last reply the client sent %v, want NBD_CMD_DISC", r.Type)
		}
	case <-ctx.Done():
		t.Fatal("no NBD_CMD_DISC")
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown after a soft disconnect: %v", err)
	}
}
