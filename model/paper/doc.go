// Package paper holds the inputs and printed figures of the 2007 NHD paper
// ("Analysis and optimization of I/O performance for the embedded NHD
// system", Journal of Chinese Computer Systems 28(7)), as model nodes and
// samples, so the model's tests and examples recompute the paper from its
// own inputs.
//
// The paper's "MB/s" is 2^20 bytes per second and its block is 64 KiB.
// Everything here is data: the package computes nothing the model does not.
package paper
