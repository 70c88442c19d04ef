//! Performance knobs. Nothing here is needed for correct use: the defaults are what the
//! benchmarks measure. Each knob names what it costs and what it saves.
//!
//! | knob | what it does |
//! |---|---|
//! | [`enable_freelist`] | a per-type free list of released instances (imports and views create one object per call); [`new_instance`] builds from it |
//! | [`enable_direct_release`] | for a [`ReleasePython`] free-list type: instances are released without PyO3's deallocation trampoline (its Python references given back first) |
//! | [`set_pool_limit`] / [`pool_limit`] | the byte limit of the reuse pool for freed huge host buffers (copies into fresh memory skip the page faults) |
//! | [`set_same_type_views`] | `from_dlpack(t)` of your own type as a direct view (on by default) or through its exchange table |
//! | [`UncheckedExtent`] | a derived type whose constructors keep shape and strides inside the data skips the per-export span check |
//!
//! ## Environment switches (read once, at first use)
//! | variable | effect |
//! |---|---|
//! | `DLBIND_FREELIST=0` | no free lists and no spare manager blocks: every release is a real free (what memory checkers need) |
//! | `DLBIND_NUMPY_FAST_PATH=0` | `numpy.ndarray` is imported through its `__dlpack__`, not by reading numpy's array header |
//! | `DLBIND_SAME_TYPE_VIEWS=0` | starts with the same-type shortcut off (see [`set_same_type_views`]) |

pub use crate::alloc::{pool_limit, set_pool_limit};
pub use crate::cpython::freelist::{
    MAX_CAPACITY as MAX_FREELIST_CAPACITY, MAX_TYPES as MAX_FREELIST_TYPES, ReleasePython,
    Released, enable_direct_release, enable_freelist, new_instance,
};
pub use crate::exchange::set_same_type_views;
pub use crate::export::UncheckedExtent;
