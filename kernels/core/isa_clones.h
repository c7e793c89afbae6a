// Functions compiled twice and dispatched at load time: an AVX2 clone where the CPU has it (8
// float lanes), the baseline x86-64 one (SSE2) elsewhere. Both compute the same bits: the clones
// vectorize across columns only, and "avx2" does not enable FMA, so no multiply-add is
// contracted. tests/core builds the core a second time with SOK_LITE_NO_TARGET_CLONES to check
// the baseline path on any machine.
#ifndef SOK_LITE_KERNELS_CORE_ISA_CLONES_H_
#define SOK_LITE_KERNELS_CORE_ISA_CLONES_H_

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(SOK_LITE_NO_TARGET_CLONES)
#define SOK_LITE_ISA_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define SOK_LITE_ISA_CLONES
#endif

// For the helpers of a cloned function: a helper left out of line is compiled once, for the
// baseline, and every clone would call that copy.
#if defined(__GNUC__)
#define SOK_LITE_INLINE_IN_CLONES inline __attribute__((always_inline))
#else
#define SOK_LITE_INLINE_IN_CLONES inline
#endif

#endif  // SOK_LITE_KERNELS_CORE_ISA_CLONES_H_
