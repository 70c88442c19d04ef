//! NVRTC source of the strided → C-contiguous copy kernel, specialised per (element width,
//! rank, access unit), the launch geometry, and a small cache keyed by that triple. Pure
//! Rust (no CUDA needed); `cuda.rs` compiles and launches.
//!
//! Kernel signature (all specialisations):
//! `extern "C" __global__ void NAME(const char* src, char* dst, unsigned long long n, Params p)`
//! with `struct Params { long long shape[R]; long long strides[R]; }` passed by value
//! (strides in elements; `src` already includes the byte offset). One thread per element,
//! grid-stride loop; each element of `W` bytes is moved as `W / U` units of `U` bytes, where
//! `U` is the widest power of two ≤ 16 dividing `W` for which both base pointers are aligned.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;

/// Threads per block.
pub const BLOCK_SIZE: u32 = 256;
/// Grid cap (the loop is grid-stride, so any `n` is covered).
pub const MAX_GRID: u32 = 65_535;
/// Largest rank the kernel is specialised for (higher ranks: the caller coalesces or errors).
pub const MAX_RANK: usize = 32;

/// What a compiled specialisation is keyed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KernelKey {
    /// Element width in bytes.
    pub elem_bytes: usize,
    /// Number of dimensions (≥ 1).
    pub rank: usize,
    /// Access unit in bytes (1, 2, 4, 8 or 16), divides `elem_bytes`.
    pub unit: usize,
}

impl KernelKey {
    /// The key for copying elements of `elem_bytes` bytes at rank `rank` between `src` and
    /// `dst`; `None` for `elem_bytes == 0`, rank 0 or rank > [`MAX_RANK`].
    pub fn for_copy(elem_bytes: usize, rank: usize, src: u64, dst: u64) -> Option<KernelKey> {
        if elem_bytes == 0 || rank == 0 || rank > MAX_RANK {
            return None;
        }
        let mut unit = 16usize;
        while unit > 1
            && (!elem_bytes.is_multiple_of(unit)
                || !src.is_multiple_of(unit as u64)
                || !dst.is_multiple_of(unit as u64))
        {
            unit /= 2;
        }
        Some(KernelKey {
            elem_bytes,
            rank,
            unit,
        })
    }

    /// The kernel's symbol name.
    pub fn name(&self) -> String {
        format!(
            "dlbind_strided_copy_w{}_r{}_u{}",
            self.elem_bytes, self.rank, self.unit
        )
    }

    /// The CUDA C++ source (no includes; compiles with NVRTC alone).
    pub fn source(&self) -> String {
        let unit_type = match self.unit {
            1 => "unsigned char",
            2 => "unsigned short",
            4 => "unsigned int",
            8 => "unsigned long long",
            _ => "dlbind_u128",
        };
        let units_per_elem = self.elem_bytes / self.unit;
        let name = self.name();
        let r = self.rank;
        let w = self.elem_bytes;
        format!(
            r#"// dlbind strided copy: elem {w} B, rank {r}, unit {unit} B
struct alignas(16) dlbind_u128 {{ unsigned long long lo; unsigned long long hi; }};
struct dlbind_params_{r} {{ long long shape[{r}]; long long strides[{r}]; }};
typedef {unit_type} dlbind_unit;
extern "C" __global__ void {name}(const char* __restrict__ src, char* __restrict__ dst,
                                  unsigned long long n, dlbind_params_{r} p)
{{
    const unsigned long long step = (unsigned long long)gridDim.x * (unsigned long long)blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {{
        unsigned long long rem = i;
        long long off = 0;
#pragma unroll
        for (int d = {r} - 1; d >= 0; --d) {{
            const unsigned long long extent = (unsigned long long)p.shape[d];
            const unsigned long long idx = rem % extent;
            rem /= extent;
            off += (long long)idx * p.strides[d];
        }}
        const dlbind_unit* s = reinterpret_cast<const dlbind_unit*>(src + off * {w}LL);
        dlbind_unit* t = reinterpret_cast<dlbind_unit*>(dst + i * {w}ULL);
#pragma unroll
        for (int k = 0; k < {units_per_elem}; ++k) t[k] = s[k];
    }}
}}
"#,
            unit = self.unit,
        )
    }
}

/// Grid size for `n` elements.
pub fn grid_for(n: u64) -> u32 {
    let blocks = n.div_ceil(BLOCK_SIZE as u64);
    blocks.clamp(1, MAX_GRID as u64) as u32
}

/// The kernel's `Params` argument: shape then strides, `2 * rank` little-endian `i64`s.
pub fn pack_params(shape: &[i64], strides: &[i64]) -> Vec<i64> {
    let mut v = Vec::with_capacity(shape.len() * 2);
    v.extend_from_slice(shape);
    v.extend_from_slice(strides);
    v
}

/// Drops size-1 axes and merges axes that are contiguous with each other (`stride[i] ==
/// shape[i+1] * stride[i+1]`), so that fewer kernel specialisations are needed and the
/// index arithmetic is cheaper. Returns `(shape, strides)`; an empty or all-size-1 tensor
/// becomes rank 1.
pub fn coalesce(shape: &[i64], strides: &[i64]) -> (Vec<i64>, Vec<i64>) {
    let mut out_shape: Vec<i64> = Vec::with_capacity(shape.len());
    let mut out_strides: Vec<i64> = Vec::with_capacity(shape.len());
    if shape.contains(&0) {
        return (vec![0], vec![1]);
    }
    for (&d, &s) in shape.iter().zip(strides) {
        if d == 1 {
            continue;
        }
        if let (Some(last_d), Some(last_s)) = (out_shape.last_mut(), out_strides.last_mut())
            && *last_s == d.saturating_mul(s)
        {
            *last_d *= d;
            *last_s = s;
            continue;
        }
        out_shape.push(d);
        out_strides.push(s);
    }
    if out_shape.is_empty() {
        return (vec![1], vec![1]);
    }
    (out_shape, out_strides)
}

/// A cache of compiled specialisations, keyed by `(context id, KernelKey)`; `V` is the
/// runtime's compiled handle. Compilation happens under the lock (at most once per key).
#[derive(Debug)]
pub struct KernelCache<C: Eq + Hash + Copy, V: Copy> {
    map: Mutex<HashMap<(C, KernelKey), V>>,
}

impl<C: Eq + Hash + Copy, V: Copy> Default for KernelCache<C, V> {
    fn default() -> Self {
        KernelCache {
            map: Mutex::new(HashMap::new()),
        }
    }
}

impl<C: Eq + Hash + Copy, V: Copy> KernelCache<C, V> {
    /// The cached value for `(ctx, key)`, built with `build` on a miss (errors are not cached).
    pub fn get_or_try_insert<E>(
        &self,
        ctx: C,
        key: KernelKey,
        build: impl FnOnce(&KernelKey) -> Result<V, E>,
    ) -> Result<V, E> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&v) = map.get(&(ctx, key)) {
            return Ok(v);
        }
        let v = build(&key)?;
        map.insert((ctx, key), v);
        Ok(v)
    }

    /// Number of compiled specialisations.
    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether nothing is compiled yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes and returns every entry (to unload modules).
    pub fn drain(&self) -> Vec<((C, KernelKey), V)> {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .collect()
    }
}

/// Reference implementation of the kernel on the host (same index arithmetic), for tests:
/// copies the strided tensor at byte offset `base` of `src` into `dst`.
pub fn reference_strided_copy(
    src: &[u8],
    base: usize,
    shape: &[i64],
    strides: &[i64],
    elem_bytes: usize,
    dst: &mut [u8],
) {
    let n: u64 = shape.iter().map(|&d| d.max(0) as u64).product();
    for i in 0..n {
        let mut rem = i;
        let mut off: i64 = 0;
        for d in (0..shape.len()).rev() {
            let extent = shape[d] as u64;
            let idx = rem % extent;
            rem /= extent;
            off += idx as i64 * strides[d];
        }
        let s = (base as i64 + off * elem_bytes as i64) as usize;
        let t = i as usize * elem_bytes;
        dst[t..t + elem_bytes].copy_from_slice(&src[s..s + elem_bytes]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_is_widest_aligned_divisor() {
        assert_eq!(KernelKey::for_copy(4, 2, 0x1000, 0x2000).unwrap().unit, 4);
        assert_eq!(KernelKey::for_copy(16, 2, 0x1000, 0x2000).unwrap().unit, 16);
        assert_eq!(KernelKey::for_copy(16, 2, 0x1008, 0x2000).unwrap().unit, 8);
        assert_eq!(KernelKey::for_copy(12, 3, 0x1000, 0x2000).unwrap().unit, 4);
        assert_eq!(KernelKey::for_copy(8, 1, 0x1001, 0x2000).unwrap().unit, 1);
        assert_eq!(KernelKey::for_copy(6, 1, 0x1000, 0x2000).unwrap().unit, 2);
        assert!(KernelKey::for_copy(0, 1, 0, 0).is_none());
        assert!(KernelKey::for_copy(4, 0, 0, 0).is_none());
        assert!(KernelKey::for_copy(4, MAX_RANK + 1, 0, 0).is_none());
    }

    #[test]
    fn source_is_specialised() {
        let k = KernelKey {
            elem_bytes: 8,
            rank: 3,
            unit: 4,
        };
        let src = k.source();
        assert!(src.contains("extern \"C\" __global__ void dlbind_strided_copy_w8_r3_u4("));
        assert!(src.contains("long long shape[3]; long long strides[3];"));
        assert!(src.contains("typedef unsigned int dlbind_unit;"));
        assert!(src.contains("k < 2;"));
        assert!(!src.contains("#include"));
        let k16 = KernelKey {
            elem_bytes: 32,
            rank: 1,
            unit: 16,
        };
        assert!(k16.source().contains("typedef dlbind_u128 dlbind_unit;"));
    }

    #[test]
    fn grid_geometry() {
        assert_eq!(grid_for(0), 1);
        assert_eq!(grid_for(1), 1);
        assert_eq!(grid_for(256), 1);
        assert_eq!(grid_for(257), 2);
        assert_eq!(grid_for(u64::MAX / 2), MAX_GRID);
    }

    #[test]
    fn coalesce_merges_and_drops() {
        assert_eq!(coalesce(&[2, 3, 4], &[12, 4, 1]), (vec![24], vec![1]));
        assert_eq!(coalesce(&[4, 3], &[1, 4]), (vec![4, 3], vec![1, 4]));
        assert_eq!(coalesce(&[2, 1, 3], &[3, 99, 1]), (vec![6], vec![1]));
        assert_eq!(coalesce(&[1, 1], &[5, 7]), (vec![1], vec![1]));
        assert_eq!(coalesce(&[3, 0], &[1, 1]), (vec![0], vec![1]));
        assert_eq!(
            coalesce(&[2, 3, 4], &[24, 4, 1]),
            (vec![2, 12], vec![24, 1])
        );
        assert_eq!(coalesce(&[4], &[-1]), (vec![4], vec![-1]));
    }

    #[test]
    fn coalesce_preserves_reference_result() {
        // transpose of a 3x4 (strides 4,1) viewed as 4x3 with strides (1,4), plus an offset view
        let src: Vec<u8> = (0..=255u8).collect();
        let cases: &[(&[i64], &[i64], usize, usize)] = &[
            (&[4, 3], &[1, 4], 2, 0),
            (&[2, 1, 3, 2], &[6, 100, 2, 1], 4, 0),
            (&[3, 2], &[-2, 1], 1, 8),
            (&[5], &[0], 4, 4),
            (&[2, 2, 2], &[4, 2, 1], 8, 0),
        ];
        for &(shape, strides, w, base) in cases {
            let n: usize = shape.iter().product::<i64>() as usize;
            let mut a = vec![0u8; n * w];
            let mut b = vec![0u8; n * w];
            reference_strided_copy(&src, base, shape, strides, w, &mut a);
            let (s2, st2) = coalesce(shape, strides);
            reference_strided_copy(&src, base, &s2, &st2, w, &mut b);
            assert_eq!(a, b, "shape {shape:?} strides {strides:?}");
        }
    }

    #[test]
    fn cache_builds_once_and_skips_errors() {
        let cache: KernelCache<u32, u64> = KernelCache::default();
        let key = KernelKey {
            elem_bytes: 4,
            rank: 2,
            unit: 4,
        };
        let mut builds = 0;
        let r: Result<u64, ()> = cache.get_or_try_insert(0, key, |_| Err(()));
        assert!(r.is_err());
        for _ in 0..3 {
            let v = cache.get_or_try_insert::<()>(0, key, |_| {
                builds += 1;
                Ok(7)
            });
            assert_eq!(v, Ok(7));
        }
        assert_eq!(builds, 1);
        let _ = cache.get_or_try_insert::<()>(1, key, |_| Ok(8));
        assert_eq!(cache.len(), 2);
    }
}
