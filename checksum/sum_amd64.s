//go:build !purego

#include "textflag.h"

// The AVX2 sum reads 128 bytes per round (then up to three single 32-byte
// vectors into the first pair) as four 32-byte vectors of eight
// little-endian dwords. For each vector v it keeps two sums per dword lane:
//
//	A += v        (wrapping modulo 2^32)
//	H += v >> 16  (the high 16-bit word of each dword, exact)
//
// The low words' exact sum is then A - H<<16 modulo 2^32, exact as long as it
// stays below 2^32: each lane takes one vector per 64 bytes (two accumulator
// pairs alternate; the tail adds at most three more), so up to 65536
// vectors, 4 MiB, per call. That is three
// vector ALU operations per 32 bytes instead of the four of mask-and-shift.
// Modulo 2^16-1 every 16-bit word weighs the same, so the total of all lanes'
// low and high sums is the little-endian partial.

// func sumAVX2(b []byte) uint64
// Sums b[:len(b)&^31]; len(b) must be at most 4 MiB.
TEXT ·sumAVX2(SB), NOSPLIT, $0-32
	MOVQ b_base+0(FP), SI
	MOVQ b_len+8(FP), CX
	MOVQ CX, DX
	ANDQ $96, DX     // 32-byte blocks after the 128-byte rounds
	ANDQ $~127, CX   // bytes in 128-byte rounds
	MOVQ CX, BX
	ORQ  DX, BX
	JZ   zero
	VPXOR Y0, Y0, Y0 // A0
	VPXOR Y1, Y1, Y1 // H0
	VPXOR Y2, Y2, Y2 // A1
	VPXOR Y3, Y3, Y3 // H1
	TESTQ CX, CX
	JZ    tail

loop:
	VMOVDQU 0(SI), Y4
	VMOVDQU 32(SI), Y5
	VMOVDQU 64(SI), Y6
	VMOVDQU 96(SI), Y7
	VPADDD  Y4, Y0, Y0
	VPSRLD  $16, Y4, Y4
	VPADDD  Y5, Y2, Y2
	VPSRLD  $16, Y5, Y5
	VPADDD  Y4, Y1, Y1
	VPADDD  Y5, Y3, Y3
	VPADDD  Y6, Y0, Y0
	VPSRLD  $16, Y6, Y6
	VPADDD  Y7, Y2, Y2
	VPSRLD  $16, Y7, Y7
	VPADDD  Y6, Y1, Y1
	VPADDD  Y7, Y3, Y3
	ADDQ    $128, SI
	SUBQ    $128, CX
	JNZ     loop

tail:
	TESTQ DX, DX
	JZ    done

tloop:
	VMOVDQU 0(SI), Y4
	VPADDD  Y4, Y0, Y0
	VPSRLD  $16, Y4, Y4
	VPADDD  Y4, Y1, Y1
	ADDQ    $32, SI
	SUBQ    $32, DX
	JNZ     tloop

done:
	CALL reduce<>(SB)
	MOVQ AX, ret+24(FP)
	RET

zero:
	MOVQ $0, ret+24(FP)
	RET

// func copySumAVX2(dst, src []byte) uint64
// Copies src[:len(src)&^31] to dst and sums it; len(dst) >= len(src) and
// len(src) at most 4 MiB. dst and src must not overlap.
TEXT ·copySumAVX2(SB), NOSPLIT, $0-56
	MOVQ dst_base+0(FP), DI
	MOVQ src_base+24(FP), SI
	MOVQ src_len+32(FP), CX
	MOVQ CX, DX
	ANDQ $96, DX
	ANDQ $~127, CX
	MOVQ CX, BX
	ORQ  DX, BX
	JZ   czero
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	TESTQ CX, CX
	JZ    ctail

cloop:
	VMOVDQU 0(SI), Y4
	VMOVDQU 32(SI), Y5
	VMOVDQU 64(SI), Y6
	VMOVDQU 96(SI), Y7
	VMOVDQU Y4, 0(DI)
	VMOVDQU Y5, 32(DI)
	VMOVDQU Y6, 64(DI)
	VMOVDQU Y7, 96(DI)
	VPADDD  Y4, Y0, Y0
	VPSRLD  $16, Y4, Y4
	VPADDD  Y5, Y2, Y2
	VPSRLD  $16, Y5, Y5
	VPADDD  Y4, Y1, Y1
	VPADDD  Y5, Y3, Y3
	VPADDD  Y6, Y0, Y0
	VPSRLD  $16, Y6, Y6
	VPADDD  Y7, Y2, Y2
	VPSRLD  $16, Y7, Y7
	VPADDD  Y6, Y1, Y1
	VPADDD  Y7, Y3, Y3
	ADDQ    $128, SI
	ADDQ    $128, DI
	SUBQ    $128, CX
	JNZ     cloop

ctail:
	TESTQ DX, DX
	JZ    cdone

ctloop:
	VMOVDQU 0(SI), Y4
	VMOVDQU Y4, 0(DI)
	VPADDD  Y4, Y0, Y0
	VPSRLD  $16, Y4, Y4
	VPADDD  Y4, Y1, Y1
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $32, DX
	JNZ     ctloop

cdone:
	CALL reduce<>(SB)
	MOVQ AX, ret+48(FP)
	RET

czero:
	MOVQ $0, ret+48(FP)
	RET

// func copySumAVX2NT(dst, src []byte) uint64
// Like copySumAVX2 but with non-temporal stores, which bypass the cache: for
// copies larger than the cache, where the destination would only evict data
// that is still needed. dst must be 32-byte aligned.
TEXT ·copySumAVX2NT(SB), NOSPLIT, $0-56
	MOVQ dst_base+0(FP), DI
	MOVQ src_base+24(FP), SI
	MOVQ src_len+32(FP), CX
	MOVQ CX, DX
	ANDQ $96, DX
	ANDQ $~127, CX
	MOVQ CX, BX
	ORQ  DX, BX
	JZ   nzero
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	TESTQ CX, CX
	JZ    ntail

nloop:
	VMOVDQU  0(SI), Y4
	VMOVDQU  32(SI), Y5
	VMOVDQU  64(SI), Y6
	VMOVDQU  96(SI), Y7
	VMOVNTDQ Y4, 0(DI)
	VMOVNTDQ Y5, 32(DI)
	VMOVNTDQ Y6, 64(DI)
	VMOVNTDQ Y7, 96(DI)
	VPADDD   Y4, Y0, Y0
	VPSRLD   $16, Y4, Y4
	VPADDD   Y5, Y2, Y2
	VPSRLD   $16, Y5, Y5
	VPADDD   Y4, Y1, Y1
	VPADDD   Y5, Y3, Y3
	VPADDD   Y6, Y0, Y0
	VPSRLD   $16, Y6, Y6
	VPADDD   Y7, Y2, Y2
	VPSRLD   $16, Y7, Y7
	VPADDD   Y6, Y1, Y1
	VPADDD   Y7, Y3, Y3
	ADDQ     $128, SI
	ADDQ     $128, DI
	SUBQ     $128, CX
	JNZ      nloop

ntail:
	TESTQ DX, DX
	JZ    ndone

ntloop:
	VMOVDQU  0(SI), Y4
	VMOVNTDQ Y4, 0(DI)
	VPADDD   Y4, Y0, Y0
	VPSRLD   $16, Y4, Y4
	VPADDD   Y4, Y1, Y1
	ADDQ     $32, SI
	ADDQ     $32, DI
	SUBQ     $32, DX
	JNZ      ntloop

ndone:
	SFENCE
	CALL reduce<>(SB)
	MOVQ AX, ret+48(FP)
	RET

nzero:
	MOVQ $0, ret+48(FP)
	RET

// reduce turns the accumulators Y0..Y3 (A0, H0, A1, H1) into the 64-bit sum
// of all low and high words in AX, and clears the upper vector state.
TEXT reduce<>(SB), NOSPLIT|NOFRAME, $0
	VPSLLD     $16, Y1, Y4
	VPSUBD     Y4, Y0, Y0 // L0 = A0 - H0<<16: exact low-word sums
	VPSLLD     $16, Y3, Y4
	VPSUBD     Y4, Y2, Y2 // L1
	VPXOR      Y7, Y7, Y7
	VPUNPCKLDQ Y7, Y0, Y4 // widen every dword lane to a qword
	VPUNPCKHDQ Y7, Y0, Y5
	VPADDQ     Y5, Y4, Y4
	VPUNPCKLDQ Y7, Y1, Y5
	VPUNPCKHDQ Y7, Y1, Y6
	VPADDQ     Y5, Y4, Y4
	VPADDQ     Y6, Y4, Y4
	VPUNPCKLDQ Y7, Y2, Y5
	VPUNPCKHDQ Y7, Y2, Y6
	VPADDQ     Y5, Y4, Y4
	VPADDQ     Y6, Y4, Y4
	VPUNPCKLDQ Y7, Y3, Y5
	VPUNPCKHDQ Y7, Y3, Y6
	VPADDQ     Y5, Y4, Y4
	VPADDQ     Y6, Y4, Y4
	VEXTRACTI128 $1, Y4, X5
	VPADDQ     X5, X4, X4
	VPSHUFD    $0x4e, X4, X5
	VPADDQ     X5, X4, X4
	VMOVQ      X4, AX
	VZEROUPPER
	RET

// func readAVX2(b []byte) uint64
// Reads b[:len(b)&^127] with the least work per byte, one VPOR per 32 bytes:
// the memory read limit the benchmarks compare the sum with. Not a checksum.
TEXT ·readAVX2(SB), NOSPLIT, $0-32
	MOVQ b_base+0(FP), SI
	MOVQ b_len+8(FP), CX
	ANDQ $~127, CX
	JZ   rzero
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3

rloop:
	VPOR 0(SI), Y0, Y0
	VPOR 32(SI), Y1, Y1
	VPOR 64(SI), Y2, Y2
	VPOR 96(SI), Y3, Y3
	ADDQ $128, SI
	SUBQ $128, CX
	JNZ  rloop

	VPOR  Y1, Y0, Y0
	VPOR  Y3, Y2, Y2
	VPOR  Y2, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPOR  X1, X0, X0
	VMOVQ X0, AX
	VZEROUPPER
	MOVQ  AX, ret+24(FP)
	RET

rzero:
	MOVQ $0, ret+24(FP)
	RET
