package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// InCI reports whether the tests run under continuous integration (the
// environment variable CI is set to a non-empty value other than "0" or
// "false").
func InCI() bool {
	v := os.Getenv("CI")
	return v != "" && v != "0" && v != "false"
}

// Need returns the path of program. When it is not on PATH the test is
// skipped with a message naming the Debian package pkg, or failed when InCI.
func Need(t testing.TB, program, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(program)
	if err == nil {
		return path
	}
	msg := fmt.Sprintf("%s not found on PATH: install the Debian package %s (apt-get install %s)", program, pkg, pkg)
	if InCI() {
		t.Fatalf("CI is set and %s", msg)
	}
	t.Skip(msg)
	return ""
}

// Unavailable reports a missing capability other than a program (for example
// a kernel feature): it skips under plain go test and fails when InCI.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("CI is set and %s", msg)
	}
	t.Skip(msg)
}

// SocketDir returns a fresh directory with a short path, suitable for unix
// sockets (sun_path holds at most 107 bytes, and t.TempDir paths grow with
// the test name). It is removed when the test ends.
func SocketDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nhd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// SocketPath returns a path for a unix socket named name inside SocketDir.
func SocketPath(t testing.TB, name string) string {
	t.Helper()
	return filepath.Join(SocketDir(t), name)
}

// Process is an external program started by a test. Its output is captured
// and logged if the test fails.
type Process struct {
	Cmd  *exec.Cmd
	name string
	out  lockedBuffer
	done chan struct{}
	err  error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Start runs path with args in its own process group. When the test ends the
// process (and anything it started) is killed by its own process group and
// waited for; its combined output is logged if the test failed.
func Start(t testing.TB, path string, args ...string) *Process {
	t.Helper()
	p := &Process{name: filepath.Base(path), done: make(chan struct{})}
	p.Cmd = exec.Command(path, args...)
	p.Cmd.Stdout = &p.out
	p.Cmd.Stderr = &p.out
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	go func() {
		p.err = p.Cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("%s %q output:\n%s", p.name, args, p.out.String())
		}
	})
	return p
}

// Kill stops the process group with SIGKILL and waits for the process.
func (p *Process) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Output returns what the process has printed so far.
func (p *Process) Output() string { return p.out.String() }

// Run runs path with args to completion with a timeout and returns its
// combined output; a non-zero exit fails the test with the output.
func Run(t testing.TB, timeout time.Duration, path string, args ...string) string {
	t.Helper()
	out, err := RunErr(timeout, path, args...)
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", filepath.Base(path), args, err, out)
	}
	return out
}

// RunErr is Run without the test: it returns the output and the error.
func RunErr(timeout time.Duration, path string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %v: %w", timeout, ctx.Err())
	}
	return string(out), err
}

// WaitDial waits until network/address accepts a connection (the process p,
// if not nil, must still be running), or fails the test after timeout.
func WaitDial(t testing.TB, p *Process, network, address string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout(network, address, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if p != nil {
			select {
			case <-p.done:
				t.Fatalf("%s exited before listening on %s %s: %v\n%s", p.name, network, address, p.err, p.out.String())
			default:
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listening on %s %s after %v: %v", network, address, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// FreeTCPAddr returns a 127.0.0.1 address with a port that was free a moment
// ago, for programs that must be told a port up front.
func FreeTCPAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// ErrTimeout is returned by helpers that gave up waiting.
var ErrTimeout = errors.New("testenv: timed out")
