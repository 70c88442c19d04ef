//! One freed `PyMem` block kept for the next allocation of the same kind: the export path's
//! manager blocks (`export::block`) reuse the block the last released export gave back, so an
//! export-then-release loop (every `np.from_dlpack(t)`) skips one allocator round trip.
//!
//! Precondition: every access is ordered by the GIL (plain loads and stores, no locked
//! instruction). Checked at compile time: a free-threaded build keeps no spare (each block is
//! allocated and freed). Fallback: `PyMem_Malloc` / `PyMem_Free`. `DLBIND_FREELIST=0` switches
//! the slots off, so a memory checker sees every free.

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

/// The value of a slot that is switched off: not NULL, so [`SpareBlock::give`] never parks a
/// block there, and not a block, so [`SpareBlock::take`] never hands it out.
const OFF: *mut c_void = ptr::without_provenance_mut(1);

/// A slot for one spare block.
pub(crate) struct SpareBlock(AtomicPtr<c_void>);

impl SpareBlock {
    /// An empty slot (switched off in a free-threaded build).
    pub(crate) const fn new() -> Self {
        SpareBlock(AtomicPtr::new(if cfg!(Py_GIL_DISABLED) {
            OFF
        } else {
            ptr::null_mut()
        }))
    }

    /// The spare block, emptying the slot; `None` when it holds none.
    ///
    /// # Safety
    /// The GIL is held.
    #[inline]
    pub(crate) unsafe fn take(&self) -> Option<*mut c_void> {
        let spare = self.0.load(Ordering::Relaxed);
        // Neither NULL (empty) nor OFF.
        if spare.addr() > OFF.addr() {
            self.0.store(ptr::null_mut(), Ordering::Relaxed);
            Some(spare)
        } else {
            None
        }
    }

    /// Keeps `block` when the slot is empty (`true`); otherwise the caller frees it.
    ///
    /// # Safety
    /// The GIL is held; `block` is a block of this slot's kind that nothing refers to.
    #[inline]
    pub(crate) unsafe fn give(&self, block: *mut c_void) -> bool {
        if self.0.load(Ordering::Relaxed).is_null() {
            self.0.store(block, Ordering::Relaxed);
            true
        } else {
            false
        }
    }

    /// Switches the slot off for the rest of the process (called before any block is kept).
    pub(crate) fn switch_off(&self) {
        self.0.store(OFF, Ordering::Relaxed);
    }

    /// Whether a block waits in the slot.
    pub(crate) fn held(&self) -> bool {
        self.0.load(Ordering::Relaxed).addr() > OFF.addr()
    }
}
