package nbd

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Soft disconnect (proto.md, "Terminating the transmission phase"): "If
// the client receives an ESHUTDOWN error it MUST initiate a soft
// disconnect". A reply with ESHUTDOWN makes the connection refuse new
// requests at once (ErrServerShutdown); the requests already in flight go
// on to their replies, and once none is left the connection sends
// NBD_CMD_DISC and closes, as Close does. Client.Shutdown drains a
// connection the same way (quiesce), so the two never compete for slots.
//
// The wait is bounded (WithSoftDisconnectTimeout): a server that answers
// ESHUTDOWN and never answers the rest would otherwise hold the
// connection, and callers without a deadline, until Close. When it runs
// out the connection still sends NBD_CMD_DISC before it closes: proto.md
// says "The client MAY issue a soft disconnect at any time, but SHOULD
// wait until there are no inflight requests first", and a hard disconnect
// is for a peer that broke a MUST, which a slow server has not; the DISC
// asks the server to finish what it has (NBD_CMD_DISC: "The server MUST
// handle all outstanding requests") even though this client no longer
// waits for the replies. The timer is made when the soft disconnect
// starts, never on a request's path.

// ErrServerShutdown is the error of calls refused on a connection whose
// server answered a request with ESHUTDOWN: the server is going away, so
// the client lets the requests in flight finish, sends NBD_CMD_DISC and
// closes the connection (proto.md's soft disconnect). It also matches
// syscall.ESHUTDOWN with errors.Is, and ErrnoOf gives ESHUTDOWN. The
// request that got ESHUTDOWN fails with the server's error, not this.
// Requests still without a reply when WithSoftDisconnectTimeout's wait runs
// out fail with an error that matches both this and ErrConnectionLost.
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

// softDisconnect waits until no request is in flight, or for c.shutWait
// (WithSoftDisconnectTimeout), then sends NBD_CMD_DISC and closes the
// connection. The requests still in flight when the wait runs out fail
// with softDisconnectTimedOut's error. If the connection dies meanwhile
// (Close, a hang-up), quiesce returns and close does nothing more.
func (c *clientConn) softDisconnect() {
	ctx := context.Background()
	if c.shutWait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.shutWait)
		defer cancel()
	}
	if c.quiesce(ctx) != nil {
		c.close(softDisconnectTimedOut(c.shutWait))
		return
	}
	c.close(errClientServerShutdown)
}

// softDisconnectTimedOut is the error of the requests still in flight, and
// of later calls, on a connection whose soft disconnect stopped waiting
// after d: the connection is lost to them (ErrConnectionLost: a request's
// outcome is unknown) because the server is shutting down
// (ErrServerShutdown, ESHUTDOWN).
func softDisconnectTimedOut(d time.Duration) error {
	return fmt.Errorf("%w: no reply %v after ESHUTDOWN (WithSoftDisconnectTimeout): %w", ErrConnectionLost, d, errClientServerShutdown)
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
