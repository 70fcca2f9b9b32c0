//go:build purego

package checksum

const puregoBuild = true
