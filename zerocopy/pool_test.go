package zerocopy

import (
	"errors"
	"sync"
	"testing"

	"pgregory.net/rapid"
)

// tb is what the helpers need of a *testing.T or a *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// mustPanic runs f and checks that it panics with an error wrapping want.
func mustPanic(t tb, want error, f func()) {
	t.Helper()
	var got any
	func() {
		defer func() { got = recover() }()
		f()
	}()
	if got == nil {
		t.Fatalf("no panic, want one wrapping %v", want)
	}
	err, ok := got.(error)
	if !ok || !errors.Is(err, want) {
		t.Fatalf("panic %v, want one wrapping %v", got, want)
	}
}

func newTestPool(t tb, size, headroom int, checked bool) *Pool {
	t.Helper()
	p, err := NewPoolConfig(Config{Size: size, Headroom: headroom, Checked: checked})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNewPoolConfigRejects(t *testing.T) {
	for _, c := range []Config{{Size: 0}, {Size: -1}, {Size: 8, Headroom: -1}} {
		if _, err := NewPoolConfig(c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("NewPoolConfig(%+v) = %v, want ErrInvalidConfig", c, err)
		}
	}
	mustPanic(t, ErrInvalidConfig, func() { NewPool(0) })
}

func TestPoolLifeCycle(t *testing.T) {
	for _, checked := range []bool{false, true} {
		p := newTestPool(t, 100, 8, checked)
		b := p.Get()
		if b.Refs() != 1 || b.Frozen() || b.Len() != 100 || len(b.Writable()) != 100 {
			t.Fatalf("checked=%v: fresh buffer refs %d frozen %v len %d", checked, b.Refs(), b.Frozen(), b.Len())
		}
		copy(b.Writable(), "payload")
		storage := &b.store[0]
		b.Ref()
		if b.Refs() != 2 || !b.Frozen() {
			t.Fatalf("after Ref: refs %d frozen %v", b.Refs(), b.Frozen())
		}
		b.Release()
		if got := p.Stats(); got.Outstanding != 1 || got.Puts != 0 {
			t.Fatalf("after first Release: %+v", got)
		}
		b.Release()
		st := p.Stats()
		if st.Gets != 1 || st.Puts != 1 || st.Allocs != 1 || st.Free != 1 || st.Outstanding != 0 {
			t.Fatalf("checked=%v: after last Release: %+v", checked, st)
		}
		c := p.Get()
		if st := p.Stats(); st.Allocs != 1 {
			t.Fatalf("checked=%v: Get after Release allocated a new buffer: %+v", checked, st)
		}
		if &c.store[0] != storage {
			t.Fatalf("checked=%v: the pool did not reuse the storage", checked)
		}
		if checked && c == b {
			t.Fatalf("checked pool reused a handle")
		}
		if c.Frozen() || c.Refs() != 1 {
			t.Fatalf("reissued buffer: frozen %v refs %d", c.Frozen(), c.Refs())
		}
		c.Release()
	}
}

func TestPrealloc(t *testing.T) {
	p := NewPool(64)
	p.Prealloc(3)
	bs := []*Buf{p.Get(), p.Get(), p.Get()}
	if st := p.Stats(); st.Allocs != 3 || st.Free != 0 {
		t.Fatalf("after 3 Gets of 3 preallocated: %+v", st)
	}
	for _, b := range bs {
		b.Release()
	}
}

func TestMisuse(t *testing.T) {
	tests := []struct {
		name    string
		checked bool // run only in a checked pool
		want    error
		f       func(p *Pool)
	}{
		{"double release", false, ErrDoubleRelease, func(p *Pool) {
			b := p.Get()
			b.Release()
			b.Release()
		}},
		{"double release of a shared buffer", false, ErrDoubleRelease, func(p *Pool) {
			b := p.Get()
			b.Ref()
			b.Release()
			b.Release()
			b.Release()
		}},
		{"Ref after release", false, ErrReleased, func(p *Pool) {
			b := p.Get()
			b.Release()
			b.Ref()
		}},
		{"Bytes after release", false, ErrReleased, func(p *Pool) {
			b := p.Get()
			b.Release()
			_ = b.Bytes()
		}},
		{"Writable after Ref", false, ErrReadOnly, func(p *Pool) {
			b := p.Get()
			b.Ref()
			_ = b.Writable()
		}},
		{"Writable after Freeze", false, ErrReadOnly, func(p *Pool) {
			b := p.Get()
			b.Freeze()
			_ = b.Writable()
		}},
		{"Writable after Append", false, ErrReadOnly, func(p *Pool) {
			b := p.Get()
			var m Message
			if err := m.Append(b, 0, 4); err != nil {
				panic(err)
			}
			_ = b.Writable()
		}},
		{"stale double release after reissue", true, ErrDoubleRelease, func(p *Pool) {
			b := p.Get()
			b.Release()
			c := p.Get() // same storage, new handle
			defer c.Release()
			b.Release()
		}},
		{"write through a kept slice after hand-off", true, ErrModifiedAfterHandoff, func(p *Pool) {
			b := p.Get()
			w := b.Writable()
			b.Ref()
			w[3] ^= 1
			b.Release()
		}},
		{"write after hand-off found by Ref", true, ErrModifiedAfterHandoff, func(p *Pool) {
			b := p.Get()
			w := b.Writable()
			b.Freeze()
			w[0]++
			b.Ref()
		}},
		{"write after release", true, ErrWriteAfterRelease, func(p *Pool) {
			b := p.Get()
			w := b.Writable()
			b.Release()
			w[7] = 1
			p.Get()
		}},
	}
	for _, tt := range tests {
		for _, checked := range []bool{false, true} {
			if tt.checked && !checked {
				continue
			}
			name := tt.name
			if checked {
				name += "/checked"
			}
			t.Run(name, func(t *testing.T) {
				p := newTestPool(t, 32, 8, checked)
				mustPanic(t, tt.want, func() { tt.f(p) })
			})
		}
	}
}

// TestConcurrentRefRelease shares one buffer among goroutines: the last
// Release must return it exactly once.
func TestConcurrentRefRelease(t *testing.T) {
	p := newTestPool(t, 64, 0, true)
	for round := 0; round < 50; round++ {
		b := p.Get()
		copy(b.Writable(), "shared")
		const n = 8
		for i := 0; i < n; i++ {
			b.Ref()
		}
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if string(b.Bytes()[:6]) != "shared" {
					t.Error("payload changed")
				}
				b.Release()
			}()
		}
		wg.Wait()
		if st := p.Stats(); st.Puts != int64(round) || st.Outstanding != 1 {
			t.Fatalf("round %d before the last release: %+v", round, st)
		}
		b.Release()
	}
	if st := p.Stats(); st.Outstanding != 0 || st.Puts != 50 {
		t.Fatalf("after all: %+v", st)
	}
}

// TestPoolStateMachine checks the pool's reference counts against a model:
// a map from live handle to its count.
func TestPoolStateMachine(t *testing.T) {
	for _, checked := range []bool{false, true} {
		name := "unchecked"
		if checked {
			name = "checked"
		}
		t.Run(name, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) { poolMachine(t, checked) })
		})
	}
}

type liveBuf struct {
	b      *Buf
	refs   int
	frozen bool
	tag    byte // every payload byte, written at Get
}

func poolMachine(t *rapid.T, checked bool) {
	p := newTestPool(t, rapid.IntRange(1, 64).Draw(t, "size"), rapid.IntRange(0, 8).Draw(t, "headroom"), checked)
	var live []*liveBuf
	var dead []*Buf // checked pool only: released handles, never reissued
	var nextTag byte
	pick := func(t *rapid.T) int { return rapid.IntRange(0, len(live)-1).Draw(t, "i") }
	t.Repeat(map[string]func(*rapid.T){
		"get": func(t *rapid.T) {
			b := p.Get()
			nextTag++
			fill(b.Writable(), nextTag)
			live = append(live, &liveBuf{b: b, refs: 1, tag: nextTag})
		},
		"ref": func(t *rapid.T) {
			if len(live) == 0 {
				t.Skip("no live buffer")
			}
			l := live[pick(t)]
			l.b.Ref()
			l.refs++
			l.frozen = true
		},
		"freeze": func(t *rapid.T) {
			if len(live) == 0 {
				t.Skip("no live buffer")
			}
			l := live[pick(t)]
			l.b.Freeze()
			l.frozen = true
		},
		"writable": func(t *rapid.T) {
			if len(live) == 0 {
				t.Skip("no live buffer")
			}
			l := live[pick(t)]
			if l.frozen {
				mustPanic(t, ErrReadOnly, func() { l.b.Writable() })
			} else {
				l.b.Writable()[0] = l.tag // same value: contents unchanged
			}
		},
		"release": func(t *rapid.T) {
			if len(live) == 0 {
				t.Skip("no live buffer")
			}
			i := pick(t)
			l := live[i]
			l.b.Release()
			l.refs--
			if l.refs == 0 {
				live = append(live[:i], live[i+1:]...)
				if checked {
					dead = append(dead, l.b)
				}
			}
		},
		"trim": func(t *rapid.T) {
			keep := rapid.IntRange(0, 3).Draw(t, "keep")
			before := p.Stats().Free
			if got, want := p.Trim(keep), max(before-keep, 0); got != want {
				t.Fatalf("Trim(%d) with %d free dropped %d, want %d", keep, before, got, want)
			}
		},
		"misuse dead handle": func(t *rapid.T) {
			if len(dead) == 0 {
				t.Skip("no dead handle")
			}
			b := dead[rapid.IntRange(0, len(dead)-1).Draw(t, "d")]
			if rapid.Bool().Draw(t, "release") {
				mustPanic(t, ErrDoubleRelease, b.Release)
			} else {
				mustPanic(t, ErrReleased, func() { b.Ref() })
			}
		},
		"": func(t *rapid.T) {
			st := p.Stats()
			if st.Outstanding != int64(len(live)) {
				t.Fatalf("pool says %d outstanding, model %d", st.Outstanding, len(live))
			}
			if st.Gets-st.Puts != st.Outstanding || st.Allocs != int64(st.Free)+st.Outstanding+st.Dropped {
				t.Fatalf("inconsistent stats %+v", st)
			}
			for _, l := range live {
				if l.b.Refs() != l.refs || l.b.Frozen() != l.frozen {
					t.Fatalf("buffer refs %d frozen %v, model %d %v", l.b.Refs(), l.b.Frozen(), l.refs, l.frozen)
				}
				for _, c := range l.b.Bytes() {
					if c != l.tag {
						t.Fatalf("payload byte %#x, want tag %#x: a live buffer was handed out twice", c, l.tag)
					}
				}
			}
		},
	})
	for _, l := range live {
		for ; l.refs > 0; l.refs-- {
			l.b.Release()
		}
	}
	if st := p.Stats(); st.Outstanding != 0 {
		t.Fatalf("after releasing everything: %+v", st)
	}
}
