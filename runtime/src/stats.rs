//! Process-wide counters, for tests, leak checks and diagnostics. Reading one costs a load;
//! the hot paths update them without locks (the GIL orders the updates).
//!
//! | counter | counts |
//! |---|---|
//! | [`live_exports`] | managed tensors exported whose deleter has not run yet (0 when nothing leaks) |
//! | [`live_export_borrows`] | shared borrows of non-frozen objects that live exports hold |
//! | [`live_borrow_guards`] | the guard objects among them (memoryviews, `__array_interface__`; capsules make none) |
//! | [`spare_blocks_held`] | freed manager blocks kept for the next export (0 to 2) |
//! | [`exchange_imports`] | imports through a producer's C exchange table |
//! | [`same_type_views`] | `from_dlpack(t)` calls served as a direct view of your own type |
//! | [`numpy_fast_imports`] | imports that read a `numpy.ndarray`'s header instead of calling `__dlpack__` |
//! | [`freelist_len`] / [`builds_directly`] | a type's free list: how many wait, and whether instances are built directly |
//! | [`shortcuts`] | which CPython shortcuts this build and interpreter take (not a counter: a report) |

pub use crate::bridges::numpy_fast_imports;
pub use crate::cpython::freelist::{builds_directly, freelist_len};
pub use crate::exchange::{exchange_imports, same_type_views};
pub use crate::export::borrow::{live_borrow_guards, live_export_borrows};
pub use crate::export::{live_exports, spare_blocks_held};

pub use crate::cpython::shortcuts::Shortcut;

/// Which CPython shortcuts this build (full API or abi3) takes on the running interpreter:
/// each has a precondition, checked at run time (or at compile time for the version), and a
/// fallback (the table for every version: docs/manual/interpreters.md). Checks not made yet are
/// made now, except the numpy header's, which needs an ndarray import first
/// (`"not probed yet"`).
pub fn shortcuts(py: pyo3::Python<'_>) -> Vec<Shortcut> {
    crate::cpython::shortcuts::report(py, crate::bridges::header_path_state())
}
