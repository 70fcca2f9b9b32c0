package nbd

// Serving a Client again: the export of a client as the upstream server
// describes it, for a Server that proxies it.

// Compile-time check: a Client tells a Server whether the upstream allows
// several connections.
var _ MultiConnBackend = (*Client)(nil)

// CanMultiConn reports whether the upstream server advertised
// NBD_FLAG_CAN_MULTI_CONN (the MultiConnBackend interface), so that a
// Server exporting c advertises it too and its clients may open several
// connections (nbdcopy, qemu-img). A Flush through c flushes every one of
// c's connections, and the upstream's promise covers its other clients.
func (c *Client) CanMultiConn() bool { return c.info.Flags.Has(ExportCanMultiConn) }

// ExportOf returns an Export, named name, that serves c as the upstream
// server described it in the handshake: its description, read-only and
// rotational flags, and the minimum and preferred block sizes when the
// upstream advertised them (the preferred one at most
// DefaultServerMaxPayload: a Server with a smaller MaxPayload needs it
// lowered). The size is c's, and CAN_MULTI_CONN follows the upstream's
// (CanMultiConn). The upstream's maximum payload needs nothing: c splits
// longer requests.
//
// NoReadHoles is set: asking the upstream where the holes are costs a
// BLOCK_STATUS round trip per READ, more than the holes save on most
// reads; clear it to keep holes in READ replies. NBD_CMD_BLOCK_STATUS is
// forwarded either way. A command the upstream did not advertise (TRIM,
// CACHE, FAST_ZERO, BLOCK_STATUS without base:allocation) is refused by c
// without being sent and answered ENOTSUP (see ErrNotAdvertised); a FUA
// write to an upstream without FUA is a write and a flush.
func ExportOf(c *Client, name string) Export {
	e := Export{
		Name:        name,
		Description: c.info.Description,
		Backend:     c,
		ReadOnly:    c.info.Flags.Has(ExportReadOnly),
		Rotational:  c.info.Flags.Has(ExportRotational),
		NoReadHoles: true,
	}
	if c.info.MinBlock != 0 {
		// c.minBlock and c.prefBlock are the advertised sizes when they
		// make sense (clientBlockLimits), the spec's defaults otherwise.
		e.MinBlockSize = c.minBlock
		e.PreferredBlockSize = min(c.prefBlock, DefaultServerMaxPayload)
	}
	return e
}
