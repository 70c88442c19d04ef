//! The consumer path, top to bottom:
//!
//! 1. `typed`: the entry points — [`from_dlpack`] (to an [`ImportedTensor`]) and the raw
//!    fastcall `from_dlpack` that builds the caller's own type ([`FromDLPack`],
//!    [`add_from_dlpack`]).
//! 2. `order`: the one place that decides the order an import tries: same type → numpy's
//!    header → the C exchange table → the capsule / `__dlpack__` → the bridges.
//! 3. `producer_call`: calling the producer's `__dlpack__` (keywords, stream, the retry for
//!    producers that predate the keywords).
//! 4. `tensor`, `validate`, `nd`: the capsule consumed into an [`ImportedTensor`] (checks before
//!    ownership, the deleter run exactly once), and its views.
//! 5. `target`: [`FromDLPack`], what an import builds when it builds your type; `slot`: the
//!    typed writer of its in-place hooks ([`Slot`], [`Written`]).

pub(crate) mod class_kind;
pub(crate) mod derived;
#[cfg(feature = "ndarray")]
mod nd;
mod order;
mod producer_call;
mod slot;
mod target;
mod tensor;
pub mod typed;
mod validate;

pub use order::from_dlpack;
pub use slot::{Slot, Written};
pub use target::FromDLPack;
pub use tensor::ImportedTensor;
pub use typed::add_from_dlpack;
pub use validate::{MAX_NDIM, validate_dltensor, validate_layout};
