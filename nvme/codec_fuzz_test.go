package nvme

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzDecoders feeds every decoder arbitrary bytes: none panics, and what
// one decodes encodes to bytes that decode to the same value (reserved
// bytes and padding may differ). Seeds live in testdata/fuzz/FuzzDecoders.
func FuzzDecoders(f *testing.F) {
	var c [CommandSize]byte
	cmd := Command{Opcode: OpFabrics, Flags: FlagSGL, CID: 1, SGL: SGL{Length: 1024, Type: SGLDataBlockOffset}}
	Connect{SQSize: 31, KATO: 5000}.Encode(&cmd)
	cmd.Put(&c)
	f.Add(c[:])
	var id [IdentifySize]byte
	(&IdentifyController{Serial: "s", Model: "m", SubNQN: "nqn.x", NN: 1}).Put(&id)
	f.Add(id[:])
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip(t, b, CommandSize, func(b []byte) (v Command) { v.Parse((*[CommandSize]byte)(b)); return v },
			func(v Command) []byte { var o [CommandSize]byte; v.Put(&o); return o[:] })
		roundTrip(t, b, CompletionSize, func(b []byte) (v Completion) { v.Parse((*[CompletionSize]byte)(b)); return v },
			func(v Completion) []byte { var o [CompletionSize]byte; v.Put(&o); return o[:] })
		roundTrip(t, b, IdentifySize, func(b []byte) (v IdentifyController) { v.Parse((*[IdentifySize]byte)(b)); return v },
			func(v IdentifyController) []byte { var o [IdentifySize]byte; v.Put(&o); return o[:] })
		roundTrip(t, b, IdentifySize, func(b []byte) (v IdentifyNamespace) { v.Parse((*[IdentifySize]byte)(b)); return v },
			func(v IdentifyNamespace) []byte { var o [IdentifySize]byte; v.Put(&o); return o[:] })
		roundTrip(t, b, DiscoveryLogPageSize, func(b []byte) (v DiscoveryLogHeader) { v.Parse((*[DiscoveryLogPageSize]byte)(b)); return v },
			func(v DiscoveryLogHeader) []byte { var o [DiscoveryLogPageSize]byte; v.Put(&o); return o[:] })
		roundTrip(t, b, DiscoveryLogPageSize, func(b []byte) (v DiscoveryLogEntry) { v.Parse((*[DiscoveryLogPageSize]byte)(b)); return v },
			func(v DiscoveryLogEntry) []byte { var o [DiscoveryLogPageSize]byte; v.Put(&o); return o[:] })
		roundTrip(t, b, SMARTLogSize, func(b []byte) (v SMARTLog) { v.Parse((*[SMARTLogSize]byte)(b)); return v },
			func(v SMARTLog) []byte { var o [SMARTLogSize]byte; v.Put(&o); return o[:] })
		roundTrip(t, b, ErrorLogEntrySize, func(b []byte) (v ErrorLogEntry) { v.Parse((*[ErrorLogEntrySize]byte)(b)); return v },
			func(v ErrorLogEntry) []byte { var o [ErrorLogEntrySize]byte; v.Put(&o); return o[:] })
		roundTrip(t, b, ConnectDataSize, func(b []byte) (v ConnectData) { v.Parse((*[ConnectDataSize]byte)(b)); return v },
			func(v ConnectData) []byte { var o [ConnectDataSize]byte; v.Put(&o); return o[:] })
		roundTrip(t, b, DSMRangeSize, func(b []byte) (v DSMRange) { v.Parse((*[DSMRangeSize]byte)(b)); return v },
			func(v DSMRange) []byte { var o [DSMRangeSize]byte; v.Put(&o); return o[:] })
		if len(b) >= IdentifySize {
			p := (*[IdentifySize]byte)(b)
			ids := ParseNamespaceList(p, nil)
			var out [IdentifySize]byte
			PutNamespaceList(&out, ids)
			if got := ParseNamespaceList(&out, nil); !slices.Equal(got, ids) {
				t.Fatalf("namespace list %v -> %v", ids, got)
			}
			ds := ParseNamespaceDescriptors(p)
			PutNamespaceDescriptors(&out, ds)
			if got := ParseNamespaceDescriptors(&out); len(got) != len(ds) {
				t.Fatalf("descriptors %d -> %d", len(ds), len(got))
			}
		}
	})
}

// roundTrip decodes the first n bytes of b, encodes the value, decodes
// the encoding again and requires the same value. It compares with ==,
// and cmp only to report a difference: reflection on every execution made
// each one cost about a millisecond under the fuzzer's coverage, so that
// minimizing one new input took the whole of a short -fuzztime.
func roundTrip[T comparable](t *testing.T, b []byte, n int, dec func([]byte) T, enc func(T) []byte) {
	if len(b) < n {
		return
	}
	v := dec(b[:n])
	if w := dec(enc(v)); v != w {
		t.Helper()
		t.Fatalf("%T round trip:\n%s", v, cmp.Diff(v, w))
	}
}
