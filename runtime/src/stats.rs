//! Process-wide counters, for tests, leak checks and diagnostics. Reading one costs a load;
//! the hot paths update them without locks (the GIL orders the updates).
//!
//! | counter | counts |
//! |---|---|
//! | [`live_exports`] | managed tensors exported whose deleter has not run yet (0 when nothing leaks) |
//! | [`live_export_borrows`] | shared borrows of non-frozen objects that live exports hold |
//! | [`spare_blocks_held`] | freed manager blocks kept for the next export (0 to 2) |
//! | [`exchange_imports`] | imports through a producer's C exchange table |
//! | [`same_type_views`] | `from_dlpack(t)` calls served as a direct view of your own type |
//! | [`numpy_fast_imports`] | imports that read a `numpy.ndarray`'s header instead of calling `__dlpack__` |
//! | [`freelist_len`] / [`builds_directly`] | a type's free list: how many wait, and whether instances are built directly |

pub use crate::bridges::numpy_fast_imports;
pub use crate::cpython::freelist::{builds_directly, freelist_len};
pub use crate::exchange::{exchange_imports, same_type_views};
pub use crate::export::borrow::live_export_borrows;
pub use crate::export::{live_exports, spare_blocks_held};
