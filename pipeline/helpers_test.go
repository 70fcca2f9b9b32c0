package pipeline

import (
	"context"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"
)

// checkNoLeaks fails t if, after the test, more goroutines run than before
// it. Goroutines that Run waited for may take a moment to vanish from the
// count after they signalled, so it retries for a while before failing.
func checkNoLeaks(t testing.TB) {
	t.Helper()
	base := runtime.NumGoroutine()
	t.Cleanup(func() {
		if err := waitGoroutines(base, 2*time.Second); err != "" {
			t.Errorf("goroutine leak: %s", err)
		}
	})
}

// waitGoroutines waits until at most n goroutines run; it returns "" or a
// description of the extra goroutines.
func waitGoroutines(n int, limit time.Duration) string {
	deadline := time.Now().Add(limit)
	for {
		got := runtime.NumGoroutine()
		if got <= n {
			return ""
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			buf = buf[:runtime.Stack(buf, true)]
			var ours []string
			for _, g := range strings.Split(string(buf), "\n\n") {
				if strings.Contains(g, "nhd/pipeline") && !strings.Contains(g, "waitGoroutines") {
					ours = append(ours, g)
				}
			}
			return strings.Join(append([]string{time.Now().String()}, ours...), "\n\n")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// counter is a Source of the integers 0..n-1.
type counter struct{ i, n int }

func (c *counter) Next(ctx context.Context) (int, error) {
	if c.i >= c.n {
		return 0, io.EOF
	}
	c.i++
	return c.i - 1, nil
}

// collect is a Sink that appends what it consumes.
type collect[T any] struct{ got []T }

func (c *collect[T]) Consume(ctx context.Context, v T) error {
	c.got = append(c.got, v)
	return nil
}
