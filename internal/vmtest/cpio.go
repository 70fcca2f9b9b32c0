package vmtest

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// cpio "new ASCII" (newc) format, the one the kernel unpacks as an
// initramfs: each member is a 110-byte header of the magic 070701 and
// thirteen 8-digit hexadecimal fields, the NUL-terminated name padded to a
// multiple of 4 bytes (counting the header), then the data padded to a
// multiple of 4. A member named TRAILER!!! ends the archive.
const (
	newcMagic   = "070701"
	newcTrailer = "TRAILER!!!"
	newcHeader  = 110

	modeDir  = 0o040000
	modeFile = 0o100000
	modeLink = 0o120000
	modeChar = 0o020000
)

type entry struct {
	mode         uint32
	data         []byte
	major, minor uint32 // of a device node
}

// Archive is a set of files, directories, symbolic links and device nodes
// written as one cpio newc archive (the initramfs format). Parent
// directories are added implicitly. Members are written in path order, so
// the same content gives the same bytes. It is not safe for concurrent use.
type Archive struct {
	entries map[string]entry
}

func (a *Archive) put(name string, e entry) {
	if a.entries == nil {
		a.entries = make(map[string]entry)
	}
	name = strings.TrimPrefix(path.Clean("/"+name), "/")
	for dir := path.Dir(name); dir != "." && dir != "/"; dir = path.Dir(dir) {
		if _, ok := a.entries[dir]; !ok {
			a.entries[dir] = entry{mode: modeDir | 0o755}
		}
	}
	a.entries[name] = e
}

// Dir adds a directory with mode perm.
func (a *Archive) Dir(name string, perm fs.FileMode) {
	a.put(name, entry{mode: modeDir | uint32(perm.Perm())})
}

// File adds a regular file holding data (kept, not copied).
func (a *Archive) File(name string, perm fs.FileMode, data []byte) {
	a.put(name, entry{mode: modeFile | uint32(perm.Perm()), data: data})
}

// Symlink adds a symbolic link to target.
func (a *Archive) Symlink(name, target string) {
	a.put(name, entry{mode: modeLink | 0o777, data: []byte(target)})
}

// CharDev adds a character device node.
func (a *Archive) CharDev(name string, perm fs.FileMode, major, minor uint32) {
	a.put(name, entry{mode: modeChar | uint32(perm.Perm()), major: major, minor: minor})
}

// Has reports whether name is in the archive.
func (a *Archive) Has(name string) bool {
	_, ok := a.entries[strings.TrimPrefix(path.Clean("/"+name), "/")]
	return ok
}

// WriteTo writes the archive in cpio newc format, ending with the trailer.
func (a *Archive) WriteTo(w io.Writer) (int64, error) {
	names := make([]string, 0, len(a.entries))
	for n := range a.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	cw := &countWriter{w: bufio.NewWriterSize(w, 1<<16)}
	for i, n := range names {
		writeMember(cw, uint32(i+1), n, a.entries[n])
	}
	writeMember(cw, 0, newcTrailer, entry{})
	if cw.err == nil {
		cw.err = cw.w.(*bufio.Writer).Flush()
	}
	return cw.n, cw.err
}

func writeMember(w *countWriter, ino uint32, name string, e entry) {
	nlink := uint32(1)
	if e.mode&0o170000 == modeDir {
		nlink = 2
	}
	if name == newcTrailer {
		nlink = 1
	}
	fmt.Fprintf(w, "%s%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		newcMagic, ino, e.mode, 0, 0, nlink, 0, len(e.data), 0, 0,
		e.major, e.minor, len(name)+1, 0)
	io.WriteString(w, name)
	w.Write(make([]byte, 1+pad4(newcHeader+len(name)+1)))
	w.Write(e.data)
	w.Write(make([]byte, pad4(len(e.data))))
}

func pad4(n int) int { return (4 - n%4) % 4 }

type countWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.err = err
	return n, err
}
