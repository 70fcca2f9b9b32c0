// Package pipeline is part of nhd; see the README for the package map.
package pipeline
