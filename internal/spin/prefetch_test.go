package spin

import (
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/nhdkit/nhd/internal/allocs"
)

// PrefetchWrite is a hint: it leaves memory as it was, wherever it points
// into an object (first byte, last byte, a byte whose line the object
// shares with its neighbour).
func TestPrefetchWriteChangesNothing(t *testing.T) {
	buf := make([]byte, 4096+3)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	for _, i := range []int{0, 1, 63, 64, 2047, 4096, len(buf) - 1} {
		PrefetchWrite(&buf[i])
	}
	var x byte = 42
	PrefetchWrite(&x)
	for i := range buf {
		if buf[i] != byte(i*7+1) {
			t.Fatalf("byte %d changed to %d", i, buf[i])
		}
	}
	if x != 42 {
		t.Fatalf("x changed to %d", x)
	}
}

// On Linux/amd64 the CPUID check agrees with the kernel's flag for the
// instruction (3dnowprefetch in /proc/cpuinfo).
func TestPrefetchWriteAvailableMatchesCPUInfo(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		if runtime.GOARCH != "amd64" && PrefetchWriteAvailable() {
			t.Fatal("PrefetchWrite claims an instruction off amd64")
		}
		t.Skip("the check reads /proc/cpuinfo on linux/amd64")
	}
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Fatal(err)
	}
	want := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "flags") {
			want = strings.Contains(" "+line+" ", " 3dnowprefetch ")
			break
		}
	}
	if got := PrefetchWriteAvailable(); got != want {
		t.Fatalf("PrefetchWriteAvailable() = %v, /proc/cpuinfo says %v", got, want)
	}
}

// PrefetchWrite costs nothing per call but the call: no allocation.
func TestPrefetchWriteNoAllocs(t *testing.T) {
	buf := make([]byte, 64)
	if n := allocs.PerRun(1000, func() { PrefetchWrite(&buf[0]) }); n > allocs.Slack {
		t.Fatalf("%v allocations per call", n)
	}
}
