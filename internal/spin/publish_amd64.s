//go:build linux && amd64 && !race

#include "textflag.h"

// func storeRelease(a *atomic.Uint64, v uint64)
TEXT ·storeRelease(SB), NOSPLIT, $0-16
	MOVQ a+0(FP), AX
	MOVQ v+8(FP), BX
	MOVQ BX, 0(AX)
	RET
