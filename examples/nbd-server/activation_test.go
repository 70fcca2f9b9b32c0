package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nhdkit/nhd/internal/testenv"
	"github.com/nhdkit/nhd/nbd"
)

// beMainEnv makes the test binary run main instead of the tests, so the
// tests can start the command as a process of its own, with inherited
// descriptors.
const beMainEnv = "NBD_SERVER_TEST_BE_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(beMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// command returns the command (this test binary running main) with args,
// started through prog if not "" (a wrapper that execs it), killed when
// the test ends.
func command(t *testing.T, prog string, args ...string) *exec.Cmd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	if prog == "" {
		prog = os.Args[0]
	}
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = append(os.Environ(), beMainEnv+"=1")
	return cmd
}

// listenInherited returns a listening unix socket as a file to pass to a
// child, and the socket's path.
func listenInherited(t *testing.T) (*os.File, string) {
	t.Helper()
	sock := testenv.SocketPath(t, "act.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ul := l.(*net.UnixListener)
	ul.SetUnlinkOnClose(false) // the child keeps serving on the path
	f, err := ul.File()
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	t.Cleanup(func() { f.Close() })
	return f, sock
}

// useDisk writes through c and reads the bytes back.
func useDisk(t *testing.T, c *nbd.Client) {
	t.Helper()
	want := []byte("activated")
	if _, err := c.WriteAt(want, 4096); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if _, err := c.ReadAt(got, 4096); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %q, %v", got, err)
	}
}

// stop sends SIGTERM and expects a clean exit.
func stop(t *testing.T, cmd *exec.Cmd, log *bytes.Buffer) {
	t.Helper()
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v\n%s", err, log)
	}
	if !strings.Contains(log.String(), "stopped") {
		t.Fatalf("log lacks the clean stop:\n%s", log)
	}
}

// TestSocketActivation starts the command with a listening socket on
// descriptor 3 and LISTEN_FDS=1, as systemd does: with LISTEN_PID unset,
// and set to the command's own pid by a shell that execs it. A LISTEN_PID
// of another process is not for it, which leaves it with no listener.
func TestSocketActivation(t *testing.T) {
	sh := testenv.Need(t, "sh", "dash")
	args := []string{"-size", "4M", "-name", "act"}
	for _, tc := range []struct {
		name, prog string
		args       []string
	}{
		{"LISTEN_PID unset", "", args},
		// The shell's pid ($$) is the command's: exec keeps it.
		{"LISTEN_PID set", sh, append([]string{"-c", `LISTEN_PID=$$ exec "$0" "$@"`, os.Args[0]}, args...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, sock := listenInherited(t)
			cmd := command(t, tc.prog, tc.args...)
			cmd.Env = append(cmd.Env, "LISTEN_FDS=1")
			cmd.ExtraFiles = []*os.File{f} // descriptor 3
			log := new(bytes.Buffer)
			cmd.Stderr = log
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			c, err := nbd.Dial(context.Background(), "nbd+unix:///act?socket="+sock)
			if err != nil {
				cmd.Process.Kill()
				t.Fatalf("dial: %v\n%s", err, log)
			}
			useDisk(t, c)
			c.Close()
			stop(t, cmd, log)
		})
	}

	t.Run("LISTEN_PID of another process", func(t *testing.T) {
		f, _ := listenInherited(t)
		cmd := command(t, "", "-size", "4M")
		cmd.Env = append(cmd.Env, "LISTEN_FDS=1", "LISTEN_PID=1")
		cmd.ExtraFiles = []*os.File{f}
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "give exactly one of") {
			t.Fatalf("started with another process's sockets: %v\n%s", err, out)
		}
	})
}

// TestInetd serves one client on the command's standard input and output,
// a socket pair's end, and expects it to exit cleanly when the client is
// done.
func TestInetd(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "client"), os.NewFile(uintptr(fds[1]), "server")
	cmd := command(t, "", "-size", "4M", "-inetd")
	cmd.Stdin, cmd.Stdout = theirs, theirs
	log := new(bytes.Buffer)
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	nc, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		t.Fatal(err)
	}
	c, err := nbd.NewClient(context.Background(), nc)
	if err != nil {
		t.Fatalf("handshake over standard input: %v\n%s", err, log)
	}
	if c.Size() != 4<<20 {
		t.Fatalf("size %d", c.Size())
	}
	useDisk(t, c)
	c.Close() // NBD_CMD_DISC: the command is done
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v\n%s", err, log)
	}
	if !strings.Contains(log.String(), "stopped") {
		t.Fatalf("log lacks the clean stop:\n%s", log)
	}
}
