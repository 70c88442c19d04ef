//! Process-wide diagnostics counters of the consumer (imports through a table, same-type
//! views) and the same-type shortcut's switch.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Imports through an exchange table, process-wide (see [`exchange_imports`]).
static IMPORTS: AtomicU64 = AtomicU64::new(0);

/// Same-type imports served by [`FromDLPack::share_from`](crate::import::FromDLPack::share_from) (see [`same_type_views`]).
static SAME_TYPE_VIEWS: AtomicU64 = AtomicU64::new(0);
/// Whether `from_dlpack_fastcall::<T>` may serve an exact `T` through `share_from`.
static SAME_TYPE_VIEWS_ON: AtomicBool = AtomicBool::new(true);
static SAME_TYPE_VIEWS_ENV: std::sync::Once = std::sync::Once::new();

/// How many tensors this process imported through a producer's C exchange table (tests and
/// diagnostics: shows whether `from_dlpack` took the table path, i.e. called the table's
/// owning export). Same-type imports that [`FromDLPack::share_from`](crate::import::FromDLPack::share_from) served do not call
/// the table and are counted by [`same_type_views`] instead.
pub fn exchange_imports() -> u64 {
    IMPORTS.load(Ordering::Relaxed)
}

/// How many `from_dlpack(x)` calls of a `T`'s fastcall function took an exact `T` as a direct
/// view of its storage ([`FromDLPack::share_from`](crate::import::FromDLPack::share_from): what `T`'s own table would give,
/// without calling it).
pub fn same_type_views() -> u64 {
    SAME_TYPE_VIEWS.load(Ordering::Relaxed)
}

/// Turns the same-type shortcut of `crate::import::typed::from_dlpack_fastcall` on or off (on by
/// default; `DLBIND_SAME_TYPE_VIEWS=0` in the environment at first use turns it off). Off, an
/// exact `T` is imported through `type(x).__dlpack_c_exchange_api__` like any other producer:
/// benchmarks and tests use it to time and check that path.
pub fn set_same_type_views(on: bool) {
    SAME_TYPE_VIEWS_ENV.call_once(|| {});
    SAME_TYPE_VIEWS_ON.store(on, Ordering::Relaxed);
}

/// Whether the same-type shortcut is on (see [`set_same_type_views`]).
#[inline(always)]
pub fn same_type_views_enabled() -> bool {
    if !SAME_TYPE_VIEWS_ENV.is_completed() {
        SAME_TYPE_VIEWS_ENV.call_once(|| {
            if std::env::var_os("DLBIND_SAME_TYPE_VIEWS").is_some_and(|v| v == "0") {
                SAME_TYPE_VIEWS_ON.store(false, Ordering::Relaxed);
            }
        });
    }
    SAME_TYPE_VIEWS_ON.load(Ordering::Relaxed)
}

/// Adds one to a diagnostics counter. Imports run with the GIL held, which orders the updates,
/// so a plain load + store does (no thread-local lookup, no locked add on the hot path; as for
/// `live_exports`, a free-threaded build would make the count approximate).
#[inline(always)]
fn count_one(counter: &AtomicU64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(1),
        Ordering::Relaxed,
    );
}

/// Counts one import in [`exchange_imports`].
#[inline(always)]
pub(crate) fn note_exchange_import() {
    count_one(&IMPORTS);
}

/// Counts one same-type view in [`same_type_views`].
#[inline(always)]
pub(crate) fn note_same_type_view() {
    count_one(&SAME_TYPE_VIEWS);
}
