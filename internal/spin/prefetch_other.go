//go:build !amd64

package spin

const hasPrefetchW = false

func prefetchw(p *byte) {}
