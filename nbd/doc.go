// Package nbd is part of nhd; see the README for the package map.
package nbd
