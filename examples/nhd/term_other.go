//go:build !linux && !darwin && !freebsd && !netbsd && !openbsd && !dragonfly

package main

// isTerminal reports false: the progress line is shown only where the
// terminal can be detected.
func isTerminal(fd int) bool { return false }
