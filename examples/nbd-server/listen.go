package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
)

// Where the server takes its connections from: a socket it listens on
// (-unix, -tcp), the listening sockets a service manager passed it
// (socket activation), or the one connection on its standard input and
// output (-inetd).

// listenFdsStart is the first descriptor passed by socket activation
// (systemd's SD_LISTEN_FDS_START).
const listenFdsStart = 3

// activationListeners returns the listening sockets passed by socket
// activation: LISTEN_FDS descriptors from 3 on, meant for this process
// when LISTEN_PID is its pid (or unset, for a launcher that cannot know
// the pid before it starts us, as with a plain fork and exec). It returns
// nil when LISTEN_FDS is unset or names another process, and unsets the
// variables so that no child takes them for its own.
func activationListeners() ([]net.Listener, error) {
	fds := os.Getenv("LISTEN_FDS")
	if fds == "" {
		return nil, nil
	}
	if pid := os.Getenv("LISTEN_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return nil, nil
	}
	os.Unsetenv("LISTEN_FDS")
	os.Unsetenv("LISTEN_PID")
	os.Unsetenv("LISTEN_FDNAMES")
	n, err := strconv.Atoi(fds)
	if err != nil || n < 1 || n > 64 {
		return nil, fmt.Errorf("LISTEN_FDS=%q: want a count of passed sockets from 1 to 64", fds)
	}
	ls := make([]net.Listener, 0, n)
	for fd := listenFdsStart; fd < listenFdsStart+n; fd++ {
		f := os.NewFile(uintptr(fd), "LISTEN_FD_"+strconv.Itoa(fd))
		l, err := net.FileListener(f) // a dup, close-on-exec
		f.Close()
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			return nil, fmt.Errorf("socket activation: descriptor %d: %w", fd, err)
		}
		ls = append(ls, l)
	}
	return ls, nil
}

// stdioConn returns the connection on standard input (inetd, nbdkit -s):
// a socket, which standard output shares, so the connection is read and
// written through it alone.
func stdioConn() (net.Conn, error) {
	nc, err := net.FileConn(os.Stdin) // a dup
	if err != nil {
		return nil, fmt.Errorf("-inetd: standard input is not a socket: %w", err)
	}
	// Nothing else may write to the connection: the log goes to stderr.
	os.Stdin.Close()
	os.Stdout.Close()
	return nc, nil
}

// listen returns the listeners of the command line or of socket
// activation (exactly one source), or, under -inetd, none.
func (c *config) listen() ([]net.Listener, error) {
	activated, err := activationListeners()
	if err != nil {
		return nil, err
	}
	given := 0
	for _, on := range []bool{c.unixPath != "", c.tcpAddr != "", c.inetd, activated != nil} {
		if on {
			given++
		}
	}
	if given != 1 {
		for _, l := range activated {
			l.Close()
		}
		return nil, errors.New("give exactly one of -unix PATH, -tcp HOST:PORT, -inetd, or listening sockets by socket activation (LISTEN_FDS)")
	}
	switch {
	case activated != nil:
		return activated, nil
	case c.inetd:
		return nil, nil
	}
	var l net.Listener
	if c.unixPath != "" {
		os.Remove(c.unixPath) // a stale socket from an earlier run
		l, err = net.Listen("unix", c.unixPath)
	} else {
		l, err = net.Listen("tcp", c.tcpAddr)
	}
	if err != nil {
		return nil, err
	}
	return []net.Listener{l}, nil
}
