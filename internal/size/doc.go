// Package size parses the byte counts the example programs take on their
// command lines: a decimal number with an optional binary suffix k, m or g
// (either case), as in 4096, 64k, 1m or 2G.
package size
