package allocs

import "testing"

var sink []byte

// PerRun sees what testing.AllocsPerRun rounds away: one allocation every
// other call is half an allocation per call, not none.
func TestPerRun(t *testing.T) {
	if n := PerRun(1000, func() {}); n > Slack {
		t.Errorf("a call that allocates nothing: %v allocations per call", n)
	}
	i := 0
	every2nd := func() {
		if i++; i%2 == 0 {
			sink = make([]byte, 64)
		}
	}
	if n := PerRun(1000, every2nd); n < 0.5 || n > 0.5+Slack {
		t.Errorf("an allocation every other call: %v per call, want 0.5", n)
	}
	if n := testing.AllocsPerRun(1000, every2nd); n != 0 {
		t.Logf("testing.AllocsPerRun no longer rounds down (%v): this package may go", n)
	}
}
