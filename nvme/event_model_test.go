package nvme

import (
	"slices"
	"testing"

	"github.com/nhdkit/nhd/nbd"
	"pgregory.net/rapid"
)

// TestAsyncEventModel changes a subsystem's namespaces at random while
// the host sends Asynchronous Event Requests, toggles the event and reads
// the Changed Namespace List, and checks the controller against a model:
// the active ids, the changed list, and when a request completes.
func TestAsyncEventModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		f := newFabric(nbd.NewMemDisk(1<<20), 0)
		h := bringUp(t, f)
		tr := transportOf(h.admin)
		m := &eventModel{active: []uint32{1}}
		check := func(t *rapid.T) {
			if cpls, _ := tr.state(); len(cpls) != m.completed {
				t.Fatalf("%d completions, model %d", len(cpls), m.completed)
			}
		}
		change := func(t *rapid.T, nsid uint32) {
			if i, found := slices.BinarySearch(m.changed, nsid); !found {
				m.changed = slices.Insert(m.changed, i, nsid)
			}
			if m.enabled {
				m.pending = true
				m.deliver()
			}
			check(t)
		}
		rt.Repeat(map[string]func(*rapid.T){
			"add": func(t *rapid.T) {
				want := uint32(1)
				for slices.Contains(m.active, want) {
					want++
				}
				nsid, err := f.AddNamespace(testNQN, Namespace{Backend: nbd.NewMemDisk(1 << 20)})
				if err != nil || nsid != want {
					t.Fatalf("add: %d %v, model %d", nsid, err, want)
				}
				i, _ := slices.BinarySearch(m.active, nsid)
				m.active = slices.Insert(m.active, i, nsid)
				change(t, nsid)
			},
			"remove": func(t *rapid.T) {
				if len(m.active) == 0 {
					t.Skip("no namespace")
				}
				nsid := rapid.SampledFrom(m.active).Draw(t, "nsid")
				if err := f.RemoveNamespace(testNQN, nsid); err != nil {
					t.Fatal(err)
				}
				m.active = slices.DeleteFunc(m.active, func(id uint32) bool { return id == nsid })
				change(t, nsid)
			},
			"resize": func(t *rapid.T) {
				if len(m.active) == 0 {
					t.Skip("no namespace")
				}
				nsid := rapid.SampledFrom(m.active).Draw(t, "nsid")
				if err := f.ResizeNamespace(testNQN, nsid); err != nil {
					t.Fatal(err)
				}
				change(t, nsid)
			},
			"aer": func(t *rapid.T) {
				cpl, held := h.aer()
				switch {
				case m.held == aerLimit:
					if held || cpl.Status != StatusAERLimitExceeded|StatusDNR {
						t.Fatalf("AER past the limit: held %v, %v", held, cpl.Status)
					}
				case m.pending && !m.masked:
					if held || AsyncEventOf(cpl.Result).LID != LogChangedNamespaces {
						t.Fatalf("AER with an event waiting: held %v, %+v", held, cpl)
					}
					m.pending, m.masked = false, true
				default:
					if !held {
						t.Fatalf("AER not held: %+v", cpl)
					}
					m.held++
				}
				check(t)
			},
			"enable": func(t *rapid.T) {
				m.enabled = rapid.Bool().Draw(t, "on")
				var v uint32
				if m.enabled {
					v = OAESNamespaceAttr
				}
				h.ok(h.exec(h.admin, Command{Opcode: OpSetFeatures, CDW10: FeatAsyncEventConfig, CDW11: v}, nil), "AEC")
			},
			"log": func(t *rapid.T) {
				rae := rapid.Bool().Draw(t, "rae")
				if got := h.changedLog(rae); !slices.Equal(got, m.changed) {
					t.Fatalf("changed list %v, model %v", got, m.changed)
				}
				if !rae {
					m.changed, m.masked = nil, false
					m.deliver()
				}
				check(t)
			},
			"active list": func(t *rapid.T) {
				page := make([]byte, IdentifySize)
				h.ok(h.exec(h.admin, Command{Opcode: OpIdentify, CDW10: CNSActiveNamespaces}, page), "ns list")
				if got := ParseNamespaceList((*[IdentifySize]byte)(page), nil); !slices.Equal(got, m.active) {
					t.Fatalf("active %v, model %v", got, m.active)
				}
			},
		})
	})
}

type eventModel struct {
	active    []uint32 // sorted
	changed   []uint32 // sorted
	enabled   bool
	pending   bool
	masked    bool
	held      int
	completed int
}

func (m *eventModel) deliver() {
	if m.held > 0 && m.pending && !m.masked {
		m.held--
		m.completed++
		m.pending, m.masked = false, true
	}
}
