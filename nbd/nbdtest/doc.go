// Package nbdtest starts an in-process NBD server for tests, so code that
// speaks NBD can be tested without installing anything: Start serves a
// fresh nbd.MemDisk (or any nbd.Backend) on a unix socket (or loopback
// TCP) and returns its URI; the server is shut down when the test ends.
//
//	srv := nbdtest.Start(t, nbdtest.WithSize(16<<20))
//	c, err := nbd.Dial(ctx, srv.URI)
package nbdtest
