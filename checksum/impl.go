package checksum

// impl names one implementation of the two primitives every exported function
// is built on, so the tests can check each one the machine can run against the
// reference, not only the one chosen at init.
type impl struct {
	name    string
	sum     func(b []byte) uint64
	copySum func(dst, src []byte) uint64 // len(dst) == len(src)
}

// genericImpl is the pure-Go implementation, available everywhere.
var genericImpl = impl{name: "generic", sum: sumGeneric, copySum: copySumGeneric}
