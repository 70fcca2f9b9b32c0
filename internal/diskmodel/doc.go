// Package diskmodel is what nhd's fault tests know of a disk whose writes
// may fail: for each 512-byte sector, the generations (writes) it may hold.
//
// Each write of a test is a new generation, and Fill writes into every
// sector a pattern of its LBA and that generation, so that a sector read
// back tells which write put it there and whether it is intact.
// Generation 0 is a zeroed sector. A write known to have reached the disk
// (Done) leaves its sectors one possibility; one that failed, or whose
// fate is not known yet, adds its generation to what they may hold
// (Maybe), as a write that fails may have reached some sectors and not
// others. Check compares sectors read back with the model. Workers runs
// a fault test's workers, each with a model of its own region.
//
// A Model is used by one goroutine.
package diskmodel
