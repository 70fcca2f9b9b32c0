package spin

// hasPrefetchW: CPUID extended leaf 0x80000001, ECX bit 8 (PRFCHW, also
// called 3DNowPrefetch) says the processor has PREFETCHW. golang.org/x/sys/cpu,
// which package checksum asks for AVX2, does not report this bit, hence the
// CPUID here.
var hasPrefetchW = func() bool {
	maxExt, _, _, _ := cpuid(0x80000000, 0)
	if maxExt < 0x80000001 {
		return false
	}
	_, _, ecx, _ := cpuid(0x80000001, 0)
	return ecx&(1<<8) != 0
}()

// cpuid runs CPUID with EAX = leaf and ECX = sub.
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// prefetchw runs PREFETCHW on the byte at p.
//
//go:noescape
func prefetchw(p *byte)
