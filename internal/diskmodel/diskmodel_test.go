package diskmodel

import (
	"errors"
	"testing"
)

func TestModel(t *testing.T) {
	m := New(8)
	p := make([]byte, 8*SectorSize)
	if err := m.Check(p, 0); err != nil {
		t.Fatalf("a zeroed disk: %v", err)
	}
	g1, g2 := m.Next(), m.Next()
	Fill(p[2*SectorSize:4*SectorSize], 2, g1)
	if m.Check(p, 0) == nil {
		t.Fatal("a write the model does not know passed")
	}
	m.Maybe(2, 2, g1)
	if err := m.Check(p, 0); err != nil {
		t.Fatalf("a write that may have happened: %v", err)
	}
	if err := m.Check(make([]byte, SectorSize), 2); err != nil {
		t.Fatalf("the zeroes it may not have overwritten: %v", err)
	}
	m.Done(3, 1, g2)
	if m.Check(p[3*SectorSize:4*SectorSize], 3) == nil {
		t.Fatal("a sector overwritten since passed with its old generation")
	}
	Fill(p[3*SectorSize:4*SectorSize], 3, g2)
	if err := m.Check(p, 0); err != nil {
		t.Fatal(err)
	}
	p[3*SectorSize+100]++
	if m.Check(p, 0) == nil {
		t.Fatal("a corrupted sector passed")
	}
	Fill(p[3*SectorSize:4*SectorSize], 2, g2)
	if m.Check(p, 0) == nil {
		t.Fatal("a sector with another sector's data passed")
	}
	m.Done(0, 8, 0)
	if err := m.Check(make([]byte, 8*SectorSize), 0); err != nil || m.Sectors() != 8 {
		t.Fatalf("zeroed again: %v, %d sectors", err, m.Sectors())
	}
}

// recorder is a testing.TB that keeps what Errorf reports.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Logf(string, ...any)       {}
func (r *recorder) Errorf(f string, a ...any) { r.errs = append(r.errs, f) }

// Workers fails the test for a worker's error and for a worker that met
// no failure, and for nothing else.
func TestWorkers(t *testing.T) {
	r := &recorder{TB: t}
	Workers(r, 3, func(w int) (int, error) {
		switch w {
		case 0:
			return 2, nil
		case 1:
			return 0, nil
		}
		return 1, errors.New("broken")
	})
	if len(r.errs) != 2 {
		t.Fatalf("%d errors reported, want 2 (no failure met, an error)", len(r.errs))
	}
}
