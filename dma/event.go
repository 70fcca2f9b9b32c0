package dma

import (
	"time"

	"github.com/nhdkit/nhd/internal/spin"
)

// event is a counter one goroutine posts and one other goroutine awaits:
// the worker's start and the caller's done. It is spin.Event, the module's
// one spin-then-park primitive; see package internal/spin for how it spins
// and when it parks.
type event struct{ ev spin.Event }

func newEvent() event { return event{ev: spin.NewEvent()} }

func (e *event) post() { e.ev.Post() }

// await waits until more than seen posts have happened and returns the
// count, spinning for about d before it parks (a negative d parks after a
// few checks).
func (e *event) await(seen uint64, d time.Duration) uint64 { return e.ev.Await(seen, d) }
