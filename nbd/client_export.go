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

// limitFeatures keeps a Server exporting c from advertising what the
// upstream did not: no TRIM, no FUA writer (the server writes and
// flushes), no Zeroer (the server writes zeroes itself), no Cacher (CACHE
// succeeds doing nothing), and no BlockStatuser without base:allocation.
func (c *Client) limitFeatures(x *serverExport) {
	f := c.info.Flags
	if !f.Has(ExportSendTrim) {
		x.trimmer = nil
	}
	if !f.Has(ExportSendFUA) {
		x.fua, x.fuaAt = nil, nil
	}
	if !f.Has(ExportSendWriteZeroes) {
		x.zeroer = nil
	}
	if !f.Has(ExportSendCache) {
		x.cacher = nil
	}
	if !c.hasBase {
		x.status = nil
	}
}

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
// forwarded either way.
//
// A Server serving a *Client (through ExportOf or not) uses only the
// commands the upstream advertised: without TRIM upstream it advertises
// no TRIM; without WRITE_ZEROES it writes zeroes itself; without FUA it
// writes and flushes; without CACHE, CACHE does nothing; without
// base:allocation, block status reports data. FAST_ZERO the upstream
// lacks is answered ENOTSUP, as the flag asks.
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
