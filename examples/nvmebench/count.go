package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// The count mode (-count PAIR -job JOB -ops N) runs one job for exactly N
// operations on one pair, after filling the disk, and first prints each
// TCP socket of the process with its side (target or host) on stderr:
// syscalls.sh runs it under perf and splits the system calls on the
// sockets by side, so the two ends of a pair are counted apart although
// they share the process.

// findJob returns the job whose name, spaces written as dashes, is name.
func findJob(name string) (job, bool) {
	for _, j := range jobs {
		if strings.ReplaceAll(j.name, " ", "-") == name {
			return j, true
		}
	}
	return job{}, false
}

// count runs j for ops operations on the pair named pair (nvme or nbd)
// with that many queues (connections).
func count(sides io.Writer, pair string, j job, ops, queues int) error {
	f := func(dk disk) (result, error) {
		return result{}, runOps(sides, dk, j, ops)
	}
	var err error
	switch pair {
	case "nvme":
		_, err = nvmePair(queues, f)
	case "nbd":
		_, err = nbdPair(queues, f)
	default:
		err = fmt.Errorf("unknown pair %q (nvme or nbd)", pair)
	}
	return err
}

// runOps fills dk, prints the sockets' sides and runs ops operations of
// j from j.depth goroutines.
func runOps(sides io.Writer, dk disk, j job, ops int) error {
	fill := make([]byte, 1<<20)
	for off := int64(0); off < diskSize; off += int64(len(fill)) {
		if _, err := dk.WriteAt(fill, off); err != nil {
			return err
		}
	}
	if err := printSides(sides); err != nil {
		return err
	}
	var n atomic.Int64
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	for g := range j.depth {
		wg.Go(func() {
			buf := make([]byte, j.size)
			r := rand.New(rand.NewPCG(uint64(g), 18))
			for n.Add(1) <= int64(ops) {
				if err := j.once(dk, r, buf); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if p := first.Load(); p != nil {
		return *p
	}
	return nil
}

// printSides writes "fd N target" or "fd N host" for each TCP socket the
// process holds: a socket whose local port is the port of the process's
// listening socket is the target's.
func printSides(w io.Writer) error {
	ports := map[string]string{} // socket inode: local port
	listen := ""
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		raw, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(raw), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 {
				continue
			}
			_, port, _ := strings.Cut(f[1], ":")
			ports[f[9]] = port
			if f[3] == "0A" { // LISTEN
				if _, ours := ownInodes()[f[9]]; ours {
					listen = port
				}
			}
		}
	}
	if listen == "" {
		return fmt.Errorf("no listening socket found in /proc")
	}
	for ino, fd := range ownInodes() {
		port, ok := ports[ino]
		if !ok {
			continue
		}
		side := "host"
		if port == listen {
			side = "target"
		}
		fmt.Fprintf(w, "fd %d %s\n", fd, side)
	}
	return nil
}

// ownInodes maps the inode of each socket the process holds to its
// descriptor.
func ownInodes() map[string]int {
	m := map[string]int{}
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		t, err := os.Readlink("/proc/self/fd/" + e.Name())
		ino, ok := strings.CutPrefix(t, "socket:[")
		if err != nil || !ok {
			continue
		}
		fd, _ := strconv.Atoi(e.Name())
		m[strings.TrimSuffix(ino, "]")] = fd
	}
	return m
}
