//! Aligned host buffers for copies and fresh exports.
//!
//! * `len == 0`: no allocation; the pointer is a dangling, non-null pointer aligned to
//!   [`AlignedBuffer::SMALL_ALIGN`].
//! * `len < LARGE_THRESHOLD`: the global allocator, 64-byte aligned.
//! * `LARGE_THRESHOLD <= len < HUGE_THRESHOLD`: the global allocator, 256-byte aligned.
//! * `len >= HUGE_THRESHOLD` (Linux): an anonymous `mmap`, 2 MiB aligned, with
//!   `madvise(MADV_HUGEPAGE)` so that transparent huge pages are used even when THP is set to
//!   `madvise`. Fresh anonymous pages are zero, so `zeroed` costs nothing extra here; the kernel
//!   zeroes each huge page on first touch (which the parallel copy kernels spread over threads).
//!   Freed huge mappings are kept in a small bounded cache and reused by `uninit` (not by
//!   `zeroed`), see [`set_pool_limit`]. On other systems: the global allocator, 256-byte aligned.
//!
//! Depends only on `std` and `libc` (no other dlbind module).

use std::alloc::Layout;
use std::fmt;
use std::ptr::{self, NonNull};

/// Allocation failure: `bytes` could not be allocated (or the size is not representable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocError {
    pub bytes: usize,
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "failed to allocate {} bytes of host memory", self.bytes)
    }
}

impl std::error::Error for AllocError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backing {
    /// `len == 0`: nothing allocated.
    Empty,
    /// Global allocator with `Layout::from_size_align(len, align)`.
    Heap,
    /// Anonymous mapping of `map_len` bytes starting at `ptr`.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    Mmap { map_len: usize },
}

/// An owned, aligned, heap-allocated byte buffer.
pub struct AlignedBuffer {
    ptr: NonNull<u8>,
    len: usize,
    align: usize,
    backing: Backing,
}

// SAFETY: the buffer exclusively owns its allocation (like `Box<[u8]>`); the raw pointer is
// only an owning handle, so moving or sharing the handle across threads is sound. Mutation
// through `as_mut_ptr(&self)` is the caller's responsibility (documented unsafe-to-use pointer).
unsafe impl Send for AlignedBuffer {}
// SAFETY: `&AlignedBuffer` only exposes reads (`as_slice`) and raw pointers.
unsafe impl Sync for AlignedBuffer {}

const HUGE_PAGE: usize = 2 << 20;

impl AlignedBuffer {
    /// Alignment of buffers smaller than [`Self::LARGE_THRESHOLD`].
    pub const SMALL_ALIGN: usize = 64;
    /// Minimum alignment of buffers of at least [`Self::LARGE_THRESHOLD`] bytes.
    pub const LARGE_ALIGN: usize = 256;
    /// Buffers of this many bytes or more are [`Self::LARGE_ALIGN`]-aligned.
    pub const LARGE_THRESHOLD: usize = 1 << 20;
    /// Buffers of this many bytes or more are mapped directly, 2 MiB aligned, with
    /// `MADV_HUGEPAGE` (Linux).
    pub const HUGE_THRESHOLD: usize = HUGE_PAGE;
    /// Alignment of huge buffers on Linux.
    pub const HUGE_ALIGN: usize = HUGE_PAGE;

    /// A zero-filled buffer of `len` bytes.
    pub fn zeroed(len: usize) -> Result<Self, AllocError> {
        Self::allocate(len, true)
    }

    /// A buffer of `len` bytes with unspecified (but initialised) contents: zeroes, or the old
    /// contents of a recycled huge mapping. Meant to be overwritten through `as_mut_ptr`.
    pub fn uninit(len: usize) -> Result<Self, AllocError> {
        Self::allocate(len, false)
    }

    /// Whether nothing is allocated (dropping the buffer frees nothing).
    #[inline]
    pub(crate) fn is_unallocated(&self) -> bool {
        matches!(self.backing, Backing::Empty)
    }

    /// An empty buffer (nothing allocated, nothing to free).
    pub(crate) const fn empty() -> Self {
        Self {
            // SAFETY: SMALL_ALIGN is a non-zero power of two (see `allocate`).
            ptr: unsafe { NonNull::new_unchecked(ptr::without_provenance_mut::<u8>(Self::SMALL_ALIGN)) },
            len: 0,
            align: Self::SMALL_ALIGN,
            backing: Backing::Empty,
        }
    }

    fn allocate(len: usize, zero: bool) -> Result<Self, AllocError> {
        let err = AllocError { bytes: len };
        if len == 0 {
            // SMALL_ALIGN is a non-zero power of two, so this is a valid, aligned, non-null
            // dangling pointer (the same trick as `NonNull::dangling` with a larger alignment).
            let ptr = NonNull::new(ptr::without_provenance_mut::<u8>(Self::SMALL_ALIGN)).ok_or(err)?;
            return Ok(Self {
                ptr,
                len: 0,
                align: Self::SMALL_ALIGN,
                backing: Backing::Empty,
            });
        }
        #[cfg(target_os = "linux")]
        if len >= Self::HUGE_THRESHOLD {
            return Self::map_huge(len, zero);
        }
        let align = if len >= Self::LARGE_THRESHOLD {
            Self::LARGE_ALIGN
        } else {
            Self::SMALL_ALIGN
        };
        let layout = Layout::from_size_align(len, align).map_err(|_| err)?;
        // Heap buffers are always zero-filled, also for `uninit`, so that the safe `as_slice`
        // never exposes uninitialised memory (the allocator skips the memset for fresh pages;
        // otherwise it costs < 2 MiB of memset, small next to the copy that follows).
        let _ = zero;
        // SAFETY: `layout` has a non-zero size (len > 0 checked above).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(err)?;
        let buf = Self {
            ptr,
            len,
            align,
            backing: Backing::Heap,
        };
        if len >= HUGE_PAGE {
            advise_hugepage(buf.ptr.as_ptr(), len);
        }
        Ok(buf)
    }

    #[cfg(target_os = "linux")]
    fn map_huge(len: usize, zero: bool) -> Result<Self, AllocError> {
        let err = AllocError { bytes: len };
        // Map whole huge pages so that the tail can be a huge page too; over-allocate by one
        // huge page to be able to trim to a 2 MiB aligned start.
        let map_len = len.checked_next_multiple_of(HUGE_PAGE).ok_or(err)?;
        if !zero && let Some((addr, cached_len)) = pool::take(map_len) {
            let ptr = NonNull::new(addr as *mut u8).ok_or(err)?;
            return Ok(Self {
                ptr,
                len,
                align: HUGE_PAGE,
                backing: Backing::Mmap {
                    map_len: cached_len,
                },
            });
        }
        let total = map_len.checked_add(HUGE_PAGE).ok_or(err)?;
        if total > isize::MAX as usize {
            return Err(err);
        }
        // SAFETY: anonymous private mapping with a null hint; no existing memory is affected.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(err);
        }
        let base_addr = base as usize;
        let start = base_addr.next_multiple_of(HUGE_PAGE);
        let head = start - base_addr;
        let tail = total - head - map_len;
        // Miri lacks shims for a partial `munmap` (it unmaps whole mappings only) and for
        // `madvise`: there the head and the tail stay mapped, `pool::unmap` releases the whole
        // mapping, and no advice is given.
        #[cfg(miri)]
        {
            let _ = (head, tail);
            miri_mappings::add(start, base_addr, total);
        }
        #[cfg(not(miri))]
        // SAFETY: [base, start) and [start + map_len, base + total) are page-aligned sub-ranges
        // of the mapping just created (mmap returns page-aligned memory, HUGE_PAGE is a multiple
        // of the page size), and nothing refers to them.
        unsafe {
            if head > 0 {
                libc::munmap(base, head);
            }
            if tail > 0 {
                libc::munmap((start + map_len) as *mut libc::c_void, tail);
            }
            // Best effort: failure (e.g. THP disabled) only costs speed.
            libc::madvise(start as *mut libc::c_void, map_len, libc::MADV_HUGEPAGE);
        }
        // The mapping's own pointer moved to `start` (keeps its provenance).
        let ptr = NonNull::new(base.cast::<u8>().wrapping_add(head)).ok_or(err)?;
        Ok(Self {
            ptr,
            len,
            align: HUGE_PAGE,
            backing: Backing::Mmap { map_len },
        })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// `len() == 0`.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The guaranteed alignment of `as_ptr()` (64, 256 or 2 MiB).
    pub fn alignment(&self) -> usize {
        self.align
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// Raw mutable pointer. Writing through it while a slice from `as_slice` is alive is
    /// undefined behaviour; the caller must ensure exclusive access when writing.
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The contents.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for `len` bytes (or dangling and aligned with len 0) and lives as
        // long as `self`; every byte is initialised (heap: alloc_zeroed; mappings: zero pages
        // from the kernel or a recycled mapping's old, initialised bytes).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        match self.backing {
            Backing::Empty => {}
            Backing::Heap => {
                // SAFETY: allocated in `allocate` with exactly this (valid) layout.
                unsafe {
                    let layout = Layout::from_size_align_unchecked(self.len, self.align);
                    std::alloc::dealloc(self.ptr.as_ptr(), layout);
                }
            }
            Backing::Mmap { map_len } => {
                #[cfg(target_os = "linux")]
                pool::give(self.ptr.as_ptr() as usize, map_len);
                #[cfg(not(target_os = "linux"))]
                let _ = map_len;
            }
        }
    }
}

impl fmt::Debug for AlignedBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuffer")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("align", &self.align)
            .finish()
    }
}

/// A small cache of freed huge mappings, so that a loop of "allocate, copy, free" does not pay
/// the kernel's zero-fill page faults every time (about 11 ms per 64 MiB on the 2-vCPU VM, more
/// than the copy itself). Only `uninit` reuses mappings (their old contents remain); `zeroed`
/// always maps fresh zero pages. Bounded by [`pool_limit`] bytes in total (default 256 MiB,
/// at most 8 mappings); [`set_pool_limit`]`(0)` disables it and releases everything.
#[cfg(target_os = "linux")]
mod pool {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    pub(super) static LIMIT: AtomicUsize = AtomicUsize::new(256 << 20);
    const MAX_ENTRIES: usize = 8;

    struct Pool {
        /// (address, mapped length), oldest first.
        entries: Vec<(usize, usize)>,
        bytes: usize,
    }

    static POOL: Mutex<Pool> = Mutex::new(Pool {
        entries: Vec::new(),
        bytes: 0,
    });

    fn lock() -> std::sync::MutexGuard<'static, Pool> {
        // The pool's invariants hold between statements, so a poisoned lock is still usable.
        POOL.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn unmap(list: Vec<(usize, usize)>) {
        for (addr, len) in list {
            // Under Miri, the whole mapping around it (no partial `munmap` there: `map_huge`).
            #[cfg(miri)]
            let (addr, len) = super::miri_mappings::remove(addr, len);
            // SAFETY: every entry is a live mapping owned by the pool alone (it was handed over
            // by a dropped buffer and removed from the pool before this call).
            unsafe { libc::munmap(addr as *mut libc::c_void, len) };
        }
    }

    /// A cached mapping of at least `map_len` bytes and at most 25% more (best fit).
    pub(super) fn take(map_len: usize) -> Option<(usize, usize)> {
        let mut p = lock();
        let max = map_len.saturating_add(map_len / 4);
        let (i, _) = p
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.1 >= map_len && e.1 <= max)
            .min_by_key(|(_, e)| e.1)?;
        let e = p.entries.remove(i);
        p.bytes -= e.1;
        Some(e)
    }

    /// Hand a mapping over to the pool (or unmap it when it does not fit).
    pub(super) fn give(addr: usize, map_len: usize) {
        let limit = LIMIT.load(Ordering::Relaxed);
        if map_len > limit / 2 {
            unmap(vec![(addr, map_len)]);
            return;
        }
        let mut evicted = Vec::new();
        {
            let mut p = lock();
            while !p.entries.is_empty()
                && (p.bytes + map_len > limit || p.entries.len() >= MAX_ENTRIES)
            {
                let e = p.entries.remove(0);
                p.bytes -= e.1;
                evicted.push(e);
            }
            p.entries.push((addr, map_len));
            p.bytes += map_len;
        }
        unmap(evicted);
    }

    pub(super) fn trim(limit: usize) {
        let mut evicted = Vec::new();
        {
            let mut p = lock();
            while !p.entries.is_empty() && p.bytes > limit {
                let e = p.entries.remove(0);
                p.bytes -= e.1;
                evicted.push(e);
            }
        }
        unmap(evicted);
    }
}

/// Under Miri only, which lacks a shim for a partial `munmap` (its `munmap` takes whole
/// mappings only), so that `map_huge` cannot trim its over-sized mapping to the 2 MiB aligned
/// part: the whole mapping of each aligned start, for the `munmap` that releases it.
#[cfg(all(target_os = "linux", miri))]
mod miri_mappings {
    use std::sync::{Mutex, MutexGuard};

    /// (aligned start, mapping address, mapping length) of each live mapping.
    fn lock() -> MutexGuard<'static, Vec<(usize, usize, usize)>> {
        static MAPPINGS: Mutex<Vec<(usize, usize, usize)>> = Mutex::new(Vec::new());
        MAPPINGS.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn add(start: usize, base: usize, total: usize) {
        lock().push((start, base, total));
    }

    /// The whole mapping around the `len` bytes at `start`, forgotten here.
    pub(super) fn remove(start: usize, len: usize) -> (usize, usize) {
        let mut maps = lock();
        let i = maps
            .iter()
            .position(|m| m.0 == start)
            .expect("mapped by map_huge");
        let (_, base, total) = maps.swap_remove(i);
        assert!(start - base + len <= total, "inside its mapping");
        (base, total)
    }
}

/// Bytes of freed huge mappings kept for reuse by `AlignedBuffer::uninit` (Linux; 0 elsewhere).
/// Not public: [`set_pool_limit`] returns the previous limit.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn pool_limit() -> usize {
    #[cfg(target_os = "linux")]
    return pool::LIMIT.load(std::sync::atomic::Ordering::Relaxed);
    #[cfg(not(target_os = "linux"))]
    return 0;
}

/// Sets the byte limit of the reuse pool for freed huge host buffers (default 256 MiB, at most
/// 8 mappings; 0 disables it and releases everything it holds) and returns the previous limit.
/// What exceeds the new limit is released at once. Copies into fresh memory (`copy=True`, a
/// device-to-host copy) of buffers of 2 MiB or more take their memory from the pool, skipping
/// the page faults of a fresh mapping. On systems other than Linux there is no pool: it
/// returns 0 and does nothing.
pub fn set_pool_limit(bytes: usize) -> usize {
    #[cfg(target_os = "linux")]
    {
        let old = pool::LIMIT.swap(bytes, std::sync::atomic::Ordering::Relaxed);
        pool::trim(bytes);
        old
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = bytes;
        0
    }
}

/// `madvise(MADV_HUGEPAGE)` on the 2 MiB-aligned interior of `[ptr, ptr + len)` (Linux only).
fn advise_hugepage(ptr: *mut u8, len: usize) {
    #[cfg(target_os = "linux")]
    {
        let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
        let end = (ptr as usize + len) / HUGE_PAGE * HUGE_PAGE;
        if end > start {
            // SAFETY: [start, end) lies inside the live allocation [ptr, ptr + len) and is
            // page-aligned; MADV_HUGEPAGE only changes paging policy, never contents.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, len);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_size_is_aligned_and_non_null() {
        for b in [
            AlignedBuffer::zeroed(0).unwrap(),
            AlignedBuffer::uninit(0).unwrap(),
        ] {
            assert!(b.is_empty());
            assert_eq!(b.len(), 0);
            assert!(!b.as_ptr().is_null());
            assert_eq!(b.as_ptr() as usize % AlignedBuffer::SMALL_ALIGN, 0);
            assert_eq!(b.as_slice(), &[] as &[u8]);
        }
    }

    #[test]
    fn alignment_by_size() {
        for len in [1usize, 7, 63, 64, 65, 4096, 100_000, (1 << 20) - 1] {
            let b = AlignedBuffer::uninit(len).unwrap();
            assert_eq!(b.len(), len);
            assert_eq!(b.alignment(), AlignedBuffer::SMALL_ALIGN, "len {len}");
            assert_eq!(b.as_ptr() as usize % 64, 0, "len {len}");
        }
        for len in [
            1usize << 20,
            (1 << 20) + 3,
            (2 << 20) - 1,
            2 << 20,
            (5 << 20) + 17,
            64 << 20,
        ] {
            let b = AlignedBuffer::uninit(len).unwrap();
            assert_eq!(b.len(), len);
            assert!(b.alignment() >= AlignedBuffer::LARGE_ALIGN, "len {len}");
            assert_eq!(b.as_ptr() as usize % b.alignment(), 0, "len {len}");
            assert_eq!(
                b.as_ptr() as usize % AlignedBuffer::LARGE_ALIGN,
                0,
                "len {len}"
            );
            #[cfg(target_os = "linux")]
            if len >= AlignedBuffer::HUGE_THRESHOLD {
                assert_eq!(b.alignment(), AlignedBuffer::HUGE_ALIGN);
            }
        }
    }

    #[cfg_attr(miri, ignore = "scans MiBs byte by byte: minutes under Miri")]
    #[test]
    fn zeroed_is_zero_and_writable() {
        for len in [2usize, 1000, (1 << 20) + 5, (3 << 20) + 1] {
            let mut b = AlignedBuffer::zeroed(len).unwrap();
            assert!(b.as_slice().iter().all(|&x| x == 0), "len {len}");
            let s = b.as_mut_slice();
            s[0] = 1;
            s[len - 1] = 2;
            assert_eq!(b.as_slice()[0], 1);
            assert_eq!(b.as_slice()[len - 1], 2);
        }
    }

    #[cfg_attr(miri, ignore = "scans MiBs byte by byte: minutes under Miri")]
    #[test]
    fn uninit_is_writable_through_ptr() {
        let len = (4 << 20) + 123;
        let b = AlignedBuffer::uninit(len).unwrap();
        // SAFETY: the buffer is valid for len bytes and no slice of it is alive.
        unsafe { std::ptr::write_bytes(b.as_mut_ptr(), 0xAB, len) };
        assert!(b.as_slice().iter().all(|&x| x == 0xAB));
    }

    #[cfg(target_os = "linux")]
    #[cfg_attr(miri, ignore = "scans MiBs byte by byte: minutes under Miri")]
    #[test]
    fn pool_reuses_for_uninit_but_never_for_zeroed() {
        let len = (6 << 20) + 1;
        let a = AlignedBuffer::uninit(len).unwrap();
        // SAFETY: valid for len bytes, no slice alive.
        unsafe { std::ptr::write_bytes(a.as_mut_ptr(), 0x77, len) };
        let addr = a.as_ptr() as usize;
        drop(a);
        // zeroed must not hand back the dirty mapping's contents.
        let z = AlignedBuffer::zeroed(len).unwrap();
        assert!(z.as_slice().iter().all(|&b| b == 0));
        // Other tests run in parallel and may take the cached mapping; only check reuse when
        // the pool still has it (the address is then the same).
        let u = AlignedBuffer::uninit(len).unwrap();
        if u.as_ptr() as usize == addr {
            assert_eq!(u.as_slice()[len - 1], 0x77);
        }
        assert_eq!(u.as_ptr() as usize % AlignedBuffer::HUGE_ALIGN, 0);
        drop(z);
        drop(u);
        assert!(pool_limit() > 0);
    }

    #[test]
    fn huge_request_fails_cleanly() {
        let e = AlignedBuffer::uninit(usize::MAX - 10).unwrap_err();
        assert_eq!(e.bytes, usize::MAX - 10);
        assert!(e.to_string().contains("bytes"));
        assert!(AlignedBuffer::zeroed(isize::MAX as usize).is_err());
    }

    #[test]
    fn send_sync_and_debug() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<AlignedBuffer>();
        let b = AlignedBuffer::zeroed(10).unwrap();
        assert!(format!("{b:?}").contains("len: 10"));
    }
}
