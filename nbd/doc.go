// Package nbd implements the Network Block Device protocol as described in
// NetworkBlockDevice/nbd doc/proto.md, with URIs as in doc/uri.md: a
// concurrent client and a server, in pure Go, over one shared wire codec.
//
// # Client
//
// Dial connects to the export an NBD URI names and returns a *Client:
//
//	c, err := nbd.Dial(ctx, "nbd+unix:///disk?socket=/run/nbd.sock")
//	...
//	defer c.Close()
//	_, err = c.ReadAt(buf, off)
//
// NewClient does the same over a net.Conn the caller already has, and
// Negotiator (DialNegotiator, Negotiate) drives the option phase by hand:
// list exports, query one with NBD_OPT_INFO, list or set metadata contexts,
// then Go into transmission.
//
// The handshake speaks fixed newstyle (NO_ZEROES when offered) and accepts
// plain newstyle and oldstyle servers. It asks for structured replies and
// the base:allocation context, then enters transmission with NBD_OPT_GO,
// requesting block size constraints, name and description, and falls back
// to NBD_OPT_EXPORT_NAME when the server does not know GO. With an nbds URI
// or WithTLS it sends NBD_OPT_STARTTLS first and upgrades with crypto/tls
// (X.509 certificates; Go's crypto/tls has no external pre-shared keys or
// anonymous TLS, so tls-type=psk and tls-type=anon are refused); if TLS
// cannot be had, the connection fails (ErrTLSUnavailable), never falling
// back to plaintext. Every option error reply is an *OptionError matching
// its sentinel (ErrOptUnsupported, ErrOptPolicy, ErrOptTLSRequired, ...).
//
// A *Client implements io.ReaderAt, io.WriterAt and io.Closer, and the
// server's Backend with every optional interface (Flusher, FUAWriter,
// Trimmer, Zeroer, BlockStatuser, Cacher, MultiConnBackend), so a client
// can be served again: ExportOf gives its export as the upstream describes
// it.
// Context-taking forms with command flags cover every command: Pread
// (FlagDF), Pwrite (FlagFUA), Flush, TrimFlags, WriteZeroes (FlagFUA,
// FlagNoHole, FlagFastZero), Cache, BlockStatus, BlockStatusFlags
// (FlagReqOne, any negotiated context) and WalkExtents. Export, Flags,
// BlockSize, MetaContexts, StructuredReplies and Handshake report what was
// negotiated.
//
// Concurrency: a Client is safe for concurrent use. Requests from many
// goroutines are in flight at once on one connection, each with its own
// cookie, answered in any order, with structured reply chunks of different
// requests interleaved. At most WithMaxInFlight requests (default 64) are in
// flight per connection; further calls wait for a slot or their context
// (backpressure, no unbounded queue). With WithConnections and a server
// advertising CAN_MULTI_CONN, requests are spread over several connections
// and Flush flushes them all. One goroutine can keep several READs and
// WRITEs in flight itself with StartRead and StartWrite, waiting for each
// with Call.Wait (read-ahead, write-behind), with no goroutine hand-off.
// StartReadAt, StartWriteAt and Wait(handle) do it by handle (dma.AsyncReaderAt/AsyncWriterAt).
//
// Performance: each request is one write (header and payload together with
// writev on TCP and unix sockets); reply data is read straight into the
// caller's buffer; there is no goroutine per request and no reader
// goroutine either: the waiting callers take turns reading replies for
// everyone (leader and followers), so at queue depth one a caller reads its
// own reply, spinning briefly on the socket before it parks while spinning
// has measured faster than parking on this connection (WithReplySpin).
// ReadAt and WriteAt allocate nothing in steady state.
//
// Safety: the client treats the server as untrusted. Every length is
// checked before anything is allocated or read; a bad magic, an unknown
// cookie, a chunk type it cannot interpret, structured replies that were
// never negotiated, or a hang-up kills the connection, and every request in
// flight fails at once, as does every later call. A chunk outside its
// request, overlapping chunks, data missing at DONE, a malformed error
// chunk or block status fails just that request. A read buffer is never
// left with stale or partial data on error: it is zeroed. Context
// cancellation and deadlines work on every call: a request waiting for its
// reply is abandoned (its late reply is read and discarded).
//
// Local refusal, as libnbd's strict mode: a command or flag the server did
// not advertise fails with ErrNotAdvertised without being sent; writes to a
// read-only export with ErrReadOnly (which matches syscall.EPERM); requests
// past the end with ErrOutOfRange; requests that break an advertised
// minimum block size with ErrUnaligned; a flag the command does not take
// with ErrInvalidFlag; each also matches the errno a server would answer
// (ENOTSUP, EPERM, EINVAL). A Negotiator call out of place (after the
// negotiation ended) fails with ErrNegotiation. READ and WRITE requests larger than
// the maximum payload (advertised, else 32 MiB) are split transparently.
//
// Server errors: a server's error value is an Errno (or a *ServerError
// carrying the message and offset of an error chunk), so
// errors.Is(err, syscall.EIO) works for every value the protocol defines,
// and an unknown value matches EINVAL, as proto.md says.
//
// # Server
//
// Server serves one or more Exports, each over a Backend (an io.ReaderAt
// and io.WriterAt with a Size, plus optional interfaces it advertises as
// features); MemDisk is a sparse in-memory Backend. See Server, Export and
// Backend. A *Client is a Backend too: ExportOf serves it again as the
// upstream describes it (a proxy).
//
// # Which Backend method serves which command
//
// The server finds the optional interfaces by type assertion and calls,
// for each command and flag, the first method in this table the Backend
// has (a READ or WRITE over 64 KiB reaches ReadAt or WriteAt as one call
// per 1 MiB buffer, in order; a write read into pages, as one per page):
//
//	command, flags             Backend method
//	-------------------------  ------------------------------------------------
//	READ                       Lender.Lend, GiveBack (on a socket, not TLS); ReadAt
//	READ, structured replies   also BlockStatuser.BlockStatus of the range, for
//	                           OFFSET_HOLE chunks (not for a Lender, nor under
//	                           Export.NoReadHoles)
//	WRITE                      PageTaker.TakePage (each page of a write of whole,
//	                           aligned 64 KiB pages); WriteAt
//	WRITE + FUA                FUAWriter.WriteAtFUA; else as WRITE, then
//	                           Flusher.Flush
//	FLUSH                      Flusher.Flush (SEND_FLUSH, SEND_FUA only with one)
//	TRIM (+ FUA)               Trimmer.Trim (SEND_TRIM only with one), then Flush
//	WRITE_ZEROES               Zeroer.WriteZeroes with NO_HOLE and FAST_ZERO as
//	  (+ NO_HOLE, FAST_ZERO)   given; on ENOTSUP without FAST_ZERO, or with no
//	  (+ FUA)                  Zeroer, WriteAt of zeroes (FAST_ZERO without a
//	                           Zeroer: ENOTSUP at once); then Flush under FUA
//	CACHE                      Cacher.Cache; nothing (success) without one
//	BLOCK_STATUS               BlockStatuser.BlockStatus; else the range as data
//	(CAN_MULTI_CONN)           MultiConnBackend.CanMultiConn
//	(export size)              Size, once, when the server starts
//
// So a wrapper that must see every write (a byte counter, a journal) has
// to override WriteAtFUA as well as WriteAt, and hide TakePage and Lend
// if the Backend it wraps has them (see Lender).
//
// # Wire codec
//
// The fixed headers (Request, SimpleReply, ChunkHeader, OptionHeader,
// OptionReply) have Put and Parse methods on fixed arrays; the variable
// payloads have Append and Parse functions (payload.go). Both sides use
// them, and neither allocates per request.
package nbd
