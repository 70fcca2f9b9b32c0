// Package checksum is part of nhd; see the README for the package map.
package checksum
