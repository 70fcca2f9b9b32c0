package nbd

import (
	"context"
	"errors"
	"fmt"
)

// Soft disconnect (proto.md, "Terminating the transmission phase"): "If
// the client receives an ESHUTDOWN error it MUST initiate a soft
// disconnect". A reply with ESHUTDOWN makes the connection refuse new
// requests at once (ErrServerShutdown); the requests already in flight go
// on to their replies, and once none is left the connection sends
// NBD_CMD_DISC and closes, as Close does. Client.Shutdown drains a
// connection the same way (quiesce), so the two never compete for slots.

// ErrServerShutdown is the error of calls refused on a connection whose
// server answered a request with ESHUTDOWN: the server is going away, so
// the client lets the requests in flight finish, sends NBD_CMD_DISC and
// closes the connection (proto.md's soft disconnect). It also matches
// syscall.ESHUTDOWN with errors.Is, and ErrnoOf gives ESHUTDOWN. The
// request that got ESHUTDOWN fails with the server's error, not this.
var ErrServerShutdown = errors.New("nbd: server shutting down (ESHUTDOWN): connection closing")

// errClientServerShutdown is ErrServerShutdown with its errno, made once.
var errClientServerShutdown = fmt.Errorf("%w (%w)", ErrServerShutdown, clientErrno{ESHUTDOWN})

// noteReplyError starts a soft disconnect if err, a request's error from
// its reply, is ESHUTDOWN. It is called before the request's caller is
// woken, so that caller's next call is refused.
func (c *clientConn) noteReplyError(err error) {
	if err != nil && errors.Is(err, ESHUTDOWN) && !c.shut.Swap(true) {
		go c.softDisconnect()
	}
}

// softDisconnect waits until no request is in flight, then sends
// NBD_CMD_DISC and closes the connection.
func (c *clientConn) softDisconnect() {
	if c.quiesce(context.Background()) == nil {
		c.close(errClientServerShutdown)
	}
}

// refused reports the error of a new request on c once a soft disconnect
// has begun (nil before).
func (c *clientConn) refused() error {
	if c.shut.Load() {
		return errClientServerShutdown
	}
	return nil
}

// quiesce waits until no request is in flight on c, keeping every slot it
// frees so that no other request can start: nil once it holds them all or
// the connection is dead, ctx's error if ctx ends first. Several callers
// take turns; one that comes after another has finished returns at once.
func (c *clientConn) quiesce(ctx context.Context) error {
	select {
	case c.qsem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-c.qsem }()
	for c.held < len(c.slots) {
		select {
		case <-c.free:
			c.held++
		case <-c.dead:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
