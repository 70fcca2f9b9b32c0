package model

import "time"

// Little's law, L = λW: a queue holding depth requests, each in the system
// for latency, completes depth/latency requests per second. These helpers
// give the queue-depth view of a block device (the SSD and NVMe/TCP
// measurements quote IOPS at a queue depth and a latency).

// IOPS returns the request rate of depth requests in flight, each taking
// latency: depth/latency per second. A latency <= 0 gives 0.
func IOPS(depth float64, latency time.Duration) float64 {
	if latency <= 0 {
		return 0
	}
	return depth / latency.Seconds()
}

// Bandwidth returns the rate of iops requests per second of block bytes
// each: IOPS x block.
func Bandwidth(iops float64, block int64) Rate { return Rate(iops * float64(block)) }

// Depth returns the mean number of requests in flight at iops requests per
// second, each taking latency: iops x latency.
func Depth(iops float64, latency time.Duration) float64 { return iops * latency.Seconds() }

// Latency returns the mean time each request spends in flight when depth
// requests are kept in flight at iops per second: depth/iops. iops <= 0
// gives 0.
func Latency(depth, iops float64) time.Duration {
	if iops <= 0 {
		return 0
	}
	return seconds(depth / iops)
}
