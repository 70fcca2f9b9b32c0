//go:build !linux

package tcp

// rawReadv reads into p only where there is no raw readv(2): q, what a
// Linux host reads ahead, stays empty.
func rawReadv(fd uintptr, p, q []byte) (int, error) { return rawRead(fd, p) }
