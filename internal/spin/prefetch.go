package spin

// Taking a cache line ahead of a write.
//
// A ring's producer writes each slot again one lap after its consumer read
// it, so the slot's first cache line is usually in the consumer's cache,
// and the producer's first store into it waits for a cross-core round trip
// to take the line over; stores leave the store buffer in order, so the
// producer's next stores (its counter's, which the consumer waits for) wait
// behind it. PrefetchWrite asks for the line a few slots before the write
// (PREFETCHW on amd64), so the round trip happens while the producer is
// still busy with earlier slots.

// PrefetchWrite asks for the cache line holding *p in a state this core can
// write without waiting, ahead of a write to it. It is a hint: it changes
// no memory, never faults, and does nothing where the processor lacks the
// instruction (PrefetchWriteAvailable) or on other architectures.
func PrefetchWrite(p *byte) {
	if hasPrefetchW {
		prefetchw(p)
	}
}

// PrefetchWriteAvailable reports whether PrefetchWrite does anything here.
func PrefetchWriteAvailable() bool { return hasPrefetchW }
