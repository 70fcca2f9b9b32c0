// Package model is the cascade bandwidth model of the NHD datapath.
//
// A block of K bytes crossing N nodes in series, each speaking a synchronous
// protocol with its neighbour, sees 1/V = Σ 1/V_i (Series); nodes that
// overlap cut-through run at the bottleneck's pace (Pipelined).
package model
