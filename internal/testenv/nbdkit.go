package testenv

import (
	"testing"
	"time"
)

// Nbdkit starts nbdkit in the foreground on a unix socket of its own with
// args (filters, then the plugin and its parameters), waits until it
// accepts connections, and returns the process (stopped when the test
// ends) and the nbd+unix URI of its default export. A missing nbdkit skips
// the test naming the Debian package, or fails it under CI.
func Nbdkit(t testing.TB, args ...string) (*Process, string) {
	t.Helper()
	bin := Need(t, "nbdkit", "nbdkit")
	sock := SocketPath(t, "nbdkit.sock")
	p := Start(t, bin, append([]string{"--foreground", "--exit-with-parent", "--unix", sock}, args...)...)
	WaitDial(t, p, "unix", sock, 10*time.Second)
	return p, "nbd+unix:///?socket=" + sock
}
