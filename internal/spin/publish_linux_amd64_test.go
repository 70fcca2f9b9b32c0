//go:build linux && amd64 && !race

package spin

import (
	"testing"

	"github.com/nhdkit/nhd/internal/testenv"
)

// On linux/amd64 outside the race detector Publish is a plain store, which
// needs membarrier(2) (Linux 4.14 and later).
func TestAsymmetricOnLinuxAMD64(t *testing.T) {
	if !Asymmetric() {
		testenv.Unavailable(t, "membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) is refused: Publish falls back to sync/atomic's Store")
	}
	if !heavyBarrier() {
		t.Fatal("membarrier failed after registration")
	}
}
