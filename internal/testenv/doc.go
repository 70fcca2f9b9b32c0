// Package testenv holds the helpers nhd's tests share for reaching real peers:
// external programs (nbdkit, qemu-nbd, nbd-server, nbdinfo, fio, hdparm ...),
// processes started and stopped by the test, and short unix socket paths.
//
// The rule it enforces: under plain `go test` a missing program skips the test
// with a message naming the Debian package that provides it; when the
// environment variable CI is set, a missing program fails the test, so no test
// passes by skipping in CI.
package testenv
