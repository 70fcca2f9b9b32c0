package nbd

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"
)

// A server that answers one request at a time, as nbd-server does: it
// sends each reply whole before it reads the next request. Many callers
// with large reads and writes in flight must not deadlock (a batch that
// carried a WRITE payload after a READ would: the server blocks sending the
// READ's reply, which the READ's caller cannot read while the batch's
// writev waits for the server to read the payload). Every write is read
// back.
func TestClientSerialServerLargeMix(t *testing.T) {
	const size = 8 << 20
	const n = 1 << 20
	cfg := clientDefaultScript()
	cfg.size = size
	cfg.structured = false
	disk := make([]byte, size)
	c := clientSocketScripted(t, func(p *clientPeer) {
		p.handshake(cfg)
		for {
			r, data := p.request()
			switch r.Type {
			case CmdDisc:
				return
			case CmdWrite:
				copy(disk[r.Offset:], data)
				p.simple(r.Cookie, 0, nil)
			case CmdRead:
				p.simple(r.Cookie, 0, disk[r.Offset:r.Offset+uint64(r.Length)])
			default:
				p.simple(r.Cookie, EINVAL, nil)
			}
		}
	})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			off := int64(g) * n
			w := bytes.Repeat([]byte{byte(g + 1)}, n)
			r := make([]byte, n)
			for i := range 6 {
				w[i] = byte(i)
				if err := c.Pwrite(ctx, w, off, 0); err != nil {
					t.Errorf("caller %d: write %d: %v", g, i, err)
					return
				}
				if err := c.Pread(ctx, r, off, 0); err != nil || !bytes.Equal(r, w) {
					t.Errorf("caller %d: read %d: %v (data equal: %v)", g, i, err, bytes.Equal(r, w))
					return
				}
			}
		})
	}
	wg.Wait()
}

// Requests started while another request holds the write lock wait in the
// queue and go out together, in one writev, when the lock is free.
func TestClientQueuedRequestsShareOneWrite(t *testing.T) {
	const callers = 8
	cfg := clientDefaultScript()
	cfg.structured = false
	c := clientSocketScripted(t, func(p *clientPeer) {
		p.handshake(cfg)
		for {
			r, _ := p.request()
			if r.Type == CmdDisc {
				return
			}
			p.simple(r.Cookie, 0, make([]byte, r.Length))
		}
	})
	cc := c.conns[0]
	cc.wsem <- struct{}{} // a writer that holds the lock
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			buf := make([]byte, 512)
			if err := c.Pread(context.Background(), buf, int64(i)*512, 0); err != nil {
				t.Errorf("read %d: %v", i, err)
			}
		})
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		cc.wmu.Lock()
		n := len(cc.wq)
		cc.wmu.Unlock()
		if n == callers {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d requests queued", n, callers)
		}
		time.Sleep(time.Millisecond)
	}
	before := cc.wbatches
	<-cc.wsem
	wg.Wait()
	cc.wsem <- struct{}{} // the writer's counter is read under the lock
	if got := cc.wbatches - before; got != 1 {
		t.Errorf("%d queued requests went out in %d writes, want 1", callers, got)
	}
	<-cc.wsem
}
