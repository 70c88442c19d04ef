//! [`Slot`] and [`Written`]: the place of a new instance's value, and the proof that it was
//! filled, for the in-place hooks of [`FromDLPack`](crate::FromDLPack)
//! ([`share_into`](crate::FromDLPack::share_into),
//! [`from_imported_into`](crate::FromDLPack::from_imported_into)).
//!
//! The runtime publishes an instance as holding a whole value only on a [`Written`], and safe code
//! gets a [`Written`] only by writing a whole value ([`Slot::write`]). Writing field by field
//! through [`Slot::as_mut_ptr`] ends in the `unsafe` [`Slot::assume_written`], where the
//! implementer states that every field was written. A hook that declines simply returns no
//! [`Written`]: the instance is given back untouched by any drop.

use std::marker::PhantomData;
use std::mem::MaybeUninit;

/// Invariant in `'a`: a [`Written`] proves the filling of the one [`Slot`] of the same call, and
/// cannot be widened or narrowed into another call's.
type Brand<'a> = PhantomData<fn(&'a ()) -> &'a ()>;

/// The uninitialised value of a new instance that nothing else can see yet. Fill it with
/// [`write`](Self::write) (safe), or field by field through [`as_mut_ptr`](Self::as_mut_ptr) and
/// then [`assume_written`](Self::assume_written) (`unsafe`).
pub struct Slot<'a, T> {
    out: &'a mut MaybeUninit<T>,
    _brand: Brand<'a>,
}

/// Proof that a [`Slot`] holds a whole value: made only by [`Slot::write`] and
/// [`Slot::assume_written`].
#[must_use = "the runtime takes the value as written only when the hook returns this proof"]
pub struct Written<'a, T> {
    _brand: Brand<'a>,
    _value: PhantomData<*const T>,
}

impl<'a, T> Slot<'a, T> {
    /// The runtime's constructor: `out` is the value's place in an instance nothing else can
    /// see, which the runtime publishes only on the returned [`Written`].
    #[inline(always)]
    pub(crate) fn new(out: &'a mut MaybeUninit<T>) -> Self {
        Slot {
            out,
            _brand: PhantomData,
        }
    }

    /// Writes the whole value.
    #[inline(always)]
    pub fn write(self, value: T) -> Written<'a, T> {
        self.out.write(value);
        Written {
            _brand: PhantomData,
            _value: PhantomData,
        }
    }

    /// The value's place, for writing it field by field (`(&raw mut (*p).field).write(..)`),
    /// which saves the copy of a value built first and then moved.
    #[inline(always)]
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.out.as_mut_ptr()
    }

    /// The proof for a value written through [`as_mut_ptr`](Self::as_mut_ptr).
    ///
    /// # Safety
    /// Every field of the value (every byte a `T` needs initialised) was written, with a valid
    /// value of its type: the runtime will use it as a `T` and drop it.
    #[inline(always)]
    pub unsafe fn assume_written(self) -> Written<'a, T> {
        Written {
            _brand: PhantomData,
            _value: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for Slot<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Slot")
    }
}

impl<T> std::fmt::Debug for Written<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Written")
    }
}
