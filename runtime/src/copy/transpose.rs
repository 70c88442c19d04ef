//! Cache-blocked transpose: `dst[a][b] = src[a * sa + b * sb]` for a 2-D block, repeated over
//! the remaining ("batch") axes.
//!
//! The block is walked in cache-line-sized squares (`L × L` elements with `L * elem = 64` bytes,
//! so every source and destination line touched is consumed entirely within the square). When
//! the source is unit-stride along `a`, the square is done with SIMD micro-kernels: AVX2 8×8 for
//! 4-byte elements, AVX2 4×4 for 8-byte, SSE2 8×8 for 2-byte; otherwise (and on the edges) a
//! scalar loop specialised by element width.

use std::ptr;

use super::kernels::{SendPtr, run_units};

/// Transpose description in byte strides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Spec {
    /// Rows of the block (the source axis with the smallest stride) and its source / destination
    /// byte strides.
    na: usize,
    sa: isize,
    da: isize,
    /// Columns (the destination's last axis, destination stride = elem) and source byte stride.
    nb: usize,
    sb: isize,
    elem: usize,
    /// The other axes, with source and destination byte strides.
    bdims: Vec<usize>,
    bsrc: Vec<isize>,
    bdst: Vec<isize>,
}

impl Spec {
    /// `dims`/`strides`: a normalised layout (byte strides), `k`: the block-row axis (< last).
    pub(super) fn new(dims: &[usize], strides: &[isize], elem: usize, k: usize) -> Self {
        let nd = dims.len();
        let last = nd - 1;
        let mut dst_strides = vec![0isize; nd];
        let mut acc = elem as isize;
        for i in (0..nd).rev() {
            dst_strides[i] = acc;
            acc = acc.wrapping_mul(dims[i] as isize); // total <= nbytes <= isize::MAX
        }
        let mut spec = Spec {
            na: dims[k],
            sa: strides[k],
            da: dst_strides[k],
            nb: dims[last],
            sb: strides[last],
            elem,
            bdims: Vec::new(),
            bsrc: Vec::new(),
            bdst: Vec::new(),
        };
        for i in 0..last {
            if i != k {
                spec.bdims.push(dims[i]);
                spec.bsrc.push(strides[i]);
                spec.bdst.push(dst_strides[i]);
            }
        }
        spec
    }

    pub(super) fn batches(&self) -> usize {
        self.bdims.iter().product()
    }
}

pub static BAND_K: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);
pub static NT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
pub static PF_DIST: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Side of the cache-line square, in elements.
fn line_block(elem: usize) -> usize {
    match elem {
        1 => 64,
        2 => 32,
        4 => 16,
        8 => 8,
        _ => 8,
    }
}

type StripFn = unsafe fn(*const u8, isize, isize, *mut u8, isize, usize, usize, usize);

/// The strip kernel for this element width, or None for widths without one (`strip_bytes`).
fn select(elem: usize, unit_stride: bool) -> Option<StripFn> {
    #[cfg(target_arch = "x86_64")]
    if unit_stride {
        match elem {
            4 if std::arch::is_x86_feature_detected!("avx2") => {
                if NT.load(std::sync::atomic::Ordering::Relaxed) {
                    return Some(x86::strip_4_avx2_nt);
                }
                return Some(x86::strip_4_avx2);
            }
            8 if std::arch::is_x86_feature_detected!("avx2") => return Some(x86::strip_8_avx2),
            2 => return Some(x86::strip_2_sse2),
            _ => {}
        }
    }
    let _ = unit_stride;
    match elem {
        1 => Some(strip_scalar::<u8>),
        2 => Some(strip_scalar::<u16>),
        4 => Some(strip_scalar::<u32>),
        8 => Some(strip_scalar::<u64>),
        16 => Some(strip_scalar::<u128>),
        _ => None,
    }
}

/// Run the transpose on the rayon pool when `parallel`.
///
/// # Safety
/// The spec comes from a validated layout; every source element readable; `dst` writable for
/// the whole output; no overlap.
pub(super) unsafe fn run(spec: &Spec, src: *const u8, dst: *mut u8, parallel: bool) {
    let l = line_block(spec.elem) * BAND_K.load(std::sync::atomic::Ordering::Relaxed);
    let bands = spec.na.div_ceil(l);
    let units = spec.batches() * bands;
    let unit_bytes = l * spec.nb * spec.elem;
    let strip = select(spec.elem, spec.sa == spec.elem as isize);
    let (s, d) = (SendPtr(src as *mut u8), SendPtr(dst));
    run_units(units, unit_bytes, parallel, |r| {
        let (s, d) = (s, d);
        #[cfg(target_arch = "x86_64")]
        let _fence = Fence;
        for u in r {
            let (batch, band) = (u / bands, u % bands);
            let (so, dof) = batch_offsets(&spec.bdims, &spec.bsrc, &spec.bdst, batch);
            let a0 = band * l;
            let a1 = (a0 + l).min(spec.na);
            // SAFETY: (so, dof) are the offsets of a valid batch; rows a0..a1 < na; each
            // (batch, band) writes a disjoint set of destination rows.
            unsafe {
                let (sp, dp) = (s.0.wrapping_offset(so) as *const u8, d.0.wrapping_offset(dof));
                match strip {
                    Some(f) => f(sp, spec.sa, spec.sb, dp, spec.da, a0, a1, spec.nb),
                    None => strip_bytes(sp, spec.sa, spec.sb, dp, spec.da, a0, a1, spec.nb, spec.elem),
                }
            };
        }
    });
}

/// Orders non-temporal stores before the task ends (also on unwind).
#[cfg(target_arch = "x86_64")]
struct Fence;
#[cfg(target_arch = "x86_64")]
impl Drop for Fence {
    fn drop(&mut self) {
        // SAFETY: SSE is baseline on x86_64; sfence has no memory-safety preconditions.
        unsafe { std::arch::x86_64::_mm_sfence() };
    }
}

fn batch_offsets(dims: &[usize], s: &[isize], d: &[isize], mut flat: usize) -> (isize, isize) {
    let (mut so, mut dof) = (0isize, 0isize);
    for i in (0..dims.len()).rev() {
        let ix = (flat % dims[i]) as isize;
        flat /= dims[i];
        so += ix * s[i];
        dof += ix * d[i];
    }
    (so, dof)
}

/// Scalar block `[a0, a1) × [b0, b1)`.
///
/// # Safety
/// All addressed elements valid (see `run`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_scalar<T: Copy>(
    src: *const u8,
    sa: isize,
    sb: isize,
    dst: *mut u8,
    da: isize,
    a0: usize,
    a1: usize,
    b0: usize,
    b1: usize,
) {
    for a in a0..a1 {
        let sp = src.wrapping_offset(a as isize * sa);
        let dp = dst.wrapping_offset(a as isize * da) as *mut T;
        for b in b0..b1 {
            // SAFETY: element (a, b) of the source block and its destination slot.
            unsafe {
                let v = ptr::read_unaligned(sp.wrapping_offset(b as isize * sb) as *const T);
                ptr::write_unaligned(dp.add(b), v);
            }
        }
    }
}

/// Rows `a0..a1`, all columns, scalar, in `L × L` squares.
///
/// # Safety
/// See `run`.
#[allow(clippy::too_many_arguments)]
unsafe fn strip_scalar<T: Copy>(
    src: *const u8,
    sa: isize,
    sb: isize,
    dst: *mut u8,
    da: isize,
    a0: usize,
    a1: usize,
    nb: usize,
) {
    let l = line_block(size_of::<T>());
    let mut b0 = 0;
    while b0 < nb {
        let b1 = (b0 + l).min(nb);
        // SAFETY: forwarded contract.
        unsafe { tile_scalar::<T>(src, sa, sb, dst, da, a0, a1, b0, b1) };
        b0 = b1;
    }
}

/// Any element width, element by element (`memcpy` of `elem` bytes), in 16 × 16 squares.
///
/// # Safety
/// See `run`.
#[allow(clippy::too_many_arguments)]
unsafe fn strip_bytes(
    src: *const u8,
    sa: isize,
    sb: isize,
    dst: *mut u8,
    da: isize,
    a0: usize,
    a1: usize,
    nb: usize,
    elem: usize,
) {
    const L: usize = 16;
    let mut b0 = 0;
    while b0 < nb {
        let b1 = (b0 + L).min(nb);
        for a in a0..a1 {
            let sp = src.wrapping_offset(a as isize * sa);
            let dp = dst.wrapping_offset(a as isize * da);
            for b in b0..b1 {
                // SAFETY: element (a, b) and its destination slot are valid (see `run`).
                unsafe { ptr::copy_nonoverlapping(sp.wrapping_offset(b as isize * sb), dp.add(b * elem), elem) };
            }
        }
        b0 = b1;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::tile_scalar;
    use std::arch::x86_64::*;

    /// AVX2 8×8 transpose of 4-byte elements: rows `src + i*sb` (8 contiguous elements each) to
    /// rows `dst + j*da`.
    ///
    /// # Safety
    /// AVX2 available; the 8×8 block is valid.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn micro_4<const NT: bool>(src: *const u8, sb: isize, dst: *mut u8, da: isize) {
        // SAFETY: 8 unaligned 32-byte loads of valid source rows, 8 unaligned 32-byte stores
        // to valid destination rows.
        unsafe {
            let ld = |i: isize| _mm256_loadu_ps(src.offset(i * sb) as *const f32);
            let (r0, r1, r2, r3, r4, r5, r6, r7) = (ld(0), ld(1), ld(2), ld(3), ld(4), ld(5), ld(6), ld(7));
            let t0 = _mm256_unpacklo_ps(r0, r1);
            let t1 = _mm256_unpackhi_ps(r0, r1);
            let t2 = _mm256_unpacklo_ps(r2, r3);
            let t3 = _mm256_unpackhi_ps(r2, r3);
            let t4 = _mm256_unpacklo_ps(r4, r5);
            let t5 = _mm256_unpackhi_ps(r4, r5);
            let t6 = _mm256_unpacklo_ps(r6, r7);
            let t7 = _mm256_unpackhi_ps(r6, r7);
            let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
            let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
            let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
            let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
            let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
            let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
            let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
            let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
            let st = |j: isize, v: __m256| {
                if NT {
                    _mm256_stream_ps(dst.offset(j * da) as *mut f32, v)
                } else {
                    _mm256_storeu_ps(dst.offset(j * da) as *mut f32, v)
                }
            };
            st(0, _mm256_permute2f128_ps::<0x20>(u0, u4));
            st(1, _mm256_permute2f128_ps::<0x20>(u1, u5));
            st(2, _mm256_permute2f128_ps::<0x20>(u2, u6));
            st(3, _mm256_permute2f128_ps::<0x20>(u3, u7));
            st(4, _mm256_permute2f128_ps::<0x31>(u0, u4));
            st(5, _mm256_permute2f128_ps::<0x31>(u1, u5));
            st(6, _mm256_permute2f128_ps::<0x31>(u2, u6));
            st(7, _mm256_permute2f128_ps::<0x31>(u3, u7));
        }
    }

    /// AVX2 4×4 transpose of 8-byte elements.
    ///
    /// # Safety
    /// AVX2 available; the 4×4 block is valid.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn micro_8(src: *const u8, sb: isize, dst: *mut u8, da: isize) {
        // SAFETY: 4 unaligned 32-byte loads / stores of valid rows.
        unsafe {
            let ld = |i: isize| _mm256_loadu_pd(src.offset(i * sb) as *const f64);
            let (r0, r1, r2, r3) = (ld(0), ld(1), ld(2), ld(3));
            let t0 = _mm256_unpacklo_pd(r0, r1);
            let t1 = _mm256_unpackhi_pd(r0, r1);
            let t2 = _mm256_unpacklo_pd(r2, r3);
            let t3 = _mm256_unpackhi_pd(r2, r3);
            let st = |j: isize, v: __m256d| _mm256_storeu_pd(dst.offset(j * da) as *mut f64, v);
            st(0, _mm256_permute2f128_pd::<0x20>(t0, t2));
            st(1, _mm256_permute2f128_pd::<0x20>(t1, t3));
            st(2, _mm256_permute2f128_pd::<0x31>(t0, t2));
            st(3, _mm256_permute2f128_pd::<0x31>(t1, t3));
        }
    }

    /// SSE2 8×8 transpose of 2-byte elements.
    ///
    /// # Safety
    /// The 8×8 block is valid (SSE2 is baseline on x86_64).
    #[inline(always)]
    unsafe fn micro_2(src: *const u8, sb: isize, dst: *mut u8, da: isize) {
        // SAFETY: 8 unaligned 16-byte loads / stores of valid rows.
        unsafe {
            let ld = |i: isize| _mm_loadu_si128(src.offset(i * sb) as *const __m128i);
            let (r0, r1, r2, r3, r4, r5, r6, r7) = (ld(0), ld(1), ld(2), ld(3), ld(4), ld(5), ld(6), ld(7));
            let a0 = _mm_unpacklo_epi16(r0, r1);
            let a1 = _mm_unpackhi_epi16(r0, r1);
            let a2 = _mm_unpacklo_epi16(r2, r3);
            let a3 = _mm_unpackhi_epi16(r2, r3);
            let a4 = _mm_unpacklo_epi16(r4, r5);
            let a5 = _mm_unpackhi_epi16(r4, r5);
            let a6 = _mm_unpacklo_epi16(r6, r7);
            let a7 = _mm_unpackhi_epi16(r6, r7);
            let b0 = _mm_unpacklo_epi32(a0, a2);
            let b1 = _mm_unpackhi_epi32(a0, a2);
            let b2 = _mm_unpacklo_epi32(a1, a3);
            let b3 = _mm_unpackhi_epi32(a1, a3);
            let b4 = _mm_unpacklo_epi32(a4, a6);
            let b5 = _mm_unpackhi_epi32(a4, a6);
            let b6 = _mm_unpacklo_epi32(a5, a7);
            let b7 = _mm_unpackhi_epi32(a5, a7);
            let st = |j: isize, v: __m128i| _mm_storeu_si128(dst.offset(j * da) as *mut __m128i, v);
            st(0, _mm_unpacklo_epi64(b0, b4));
            st(1, _mm_unpackhi_epi64(b0, b4));
            st(2, _mm_unpacklo_epi64(b1, b5));
            st(3, _mm_unpackhi_epi64(b1, b5));
            st(4, _mm_unpacklo_epi64(b2, b6));
            st(5, _mm_unpackhi_epi64(b2, b6));
            st(6, _mm_unpacklo_epi64(b3, b7));
            st(7, _mm_unpackhi_epi64(b3, b7));
        }
    }

    /// Generates a strip function: rows `a0..a1`, all columns, in `L × L` squares made of
    /// `M × M` micro-kernels where the square is full, scalar on the edges.
    macro_rules! strip_fn {
        ($(#[$attr:meta])* $name:ident, $t:ty, $l:expr, $m:expr, $micro:path) => {
            /// # Safety
            /// The source is unit-stride along `a` (`sa == size_of::<T>()`), the CPU supports
            /// the micro-kernel's instructions, and the contract of `super::run` holds.
            $(#[$attr])*
            #[allow(clippy::too_many_arguments)]
            pub(super) unsafe fn $name(
                src: *const u8,
                sa: isize,
                sb: isize,
                dst: *mut u8,
                da: isize,
                a0: usize,
                a1: usize,
                nb: usize,
            ) {
                const L: usize = $l;
                const M: usize = $m;
                let e = size_of::<$t>() as isize;
                let pf = super::PF_DIST.load(std::sync::atomic::Ordering::Relaxed);
                let mut b0 = 0;
                while b0 < nb {
                    let b1 = (b0 + L).min(nb);
                    if pf > 0 && b1 + pf * L <= nb {
                        let base = src.wrapping_offset(a0 as isize * sa + (b0 + pf * L) as isize * sb);
                        for i in 0..L as isize {
                            // SAFETY: prefetching never faults.
                            unsafe { _mm_prefetch::<_MM_HINT_T0>(base.wrapping_offset(i * sb) as *const i8) };
                        }
                    }
                    let mut as0 = a0;
                    while as0 < a1 {
                        let as1 = (as0 + L).min(a1);
                        if as1 - as0 == L && b1 - b0 == L {
                            let mut ma = as0;
                            while ma < as1 {
                                let mut mb = b0;
                                while mb < b1 {
                                    let sp = src.wrapping_offset(ma as isize * sa + mb as isize * sb);
                                    let dp = dst.wrapping_offset(ma as isize * da + mb as isize * e);
                                    // SAFETY: a full M × M block inside the valid L × L square;
                                    // the required CPU features are enabled (caller contract).
                                    unsafe { $micro(sp, sb, dp, da) };
                                    mb += M;
                                }
                                ma += M;
                            }
                        } else {
                            // SAFETY: forwarded contract (edge block).
                            unsafe { tile_scalar::<$t>(src, sa, sb, dst, da, as0, as1, b0, b1) };
                        }
                        as0 = as1;
                    }
                    b0 = b1;
                }
            }
        };
    }

    strip_fn!(#[target_feature(enable = "avx2")] strip_4_avx2, u32, 16, 8, micro_4::<false>);
    strip_fn!(#[target_feature(enable = "avx2")] strip_4_avx2_nt, u32, 16, 8, micro_4::<true>);
    strip_fn!(#[target_feature(enable = "avx2")] strip_8_avx2, u64, 8, 4, micro_8);
    strip_fn!(strip_2_sse2, u16, 32, 8, micro_2);
}
