//! Performance knobs: three, each with a fast default (the defaults are what the benchmarks
//! measure), and none needed for correct use.
//!
//! | knob | default | what it does |
//! |---|---|---|
//! | [`enable_freelist`] | 64 for a frozen type given to [`add_from_dlpack`](crate::add_from_dlpack) | the size of a type's free list of released instances: imports and views create one object per call, and most of such a call is the object's allocation |
//! | [`set_pool_limit`] | 256 MiB | the byte limit of the reuse pool for freed huge (≥ 2 MiB) host buffers: copies into fresh memory skip the page faults; returns the previous limit |
//! | [`set_same_type_views`] | on | `from_dlpack(t)` of your own frozen type as a direct view of `t`'s storage, or (off) through `t`'s C exchange table like any producer's |
//!
//! Limits: free lists for at most 8 types per process (a type given one by
//! [`add_from_dlpack`](crate::add_from_dlpack) takes a slot only while at most 4 are in use,
//! leaving the rest to explicit calls), each of at most 1,024 instances; a larger capacity is a
//! ValueError, a ninth type a RuntimeError. The pool keeps at most 8 mappings.
//!
//! A derived type whose constructors keep every value's dtype valid and its shape and strides
//! inside its data may skip the per-export checks with `#[dlpack(unchecked_extent)]` and an
//! `unsafe impl` [`UncheckedExtent`](crate::UncheckedExtent): a promise, not a knob.
//!
//! ## Environment switches (read once, at first use)
//! | variable | effect |
//! |---|---|
//! | `DLBIND_FREELIST=0` | no free lists and no spare manager blocks: every release is a real free (what memory checkers need) |
//! | `DLBIND_NUMPY_FAST_PATH=0` | `numpy.ndarray` is imported through its `__dlpack__`, not by reading numpy's array header |
//! | `DLBIND_SAME_TYPE_VIEWS=0` | starts with the same-type shortcut off (see [`set_same_type_views`]) |

pub use crate::alloc::set_pool_limit;
pub use crate::cpython::freelist::enable_freelist;
pub use crate::exchange::set_same_type_views;
