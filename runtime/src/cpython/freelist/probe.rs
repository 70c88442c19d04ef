//! The layout probe: whether [`new_instance`](super::new_instance) may build `T` without PyO3's
//! initializer, read off the first instance PyO3 makes of it (decision 0017,
//! `docs/decisions/0017-pyo3-object-layout.md`).
//!
//! The direct path writes the value into zero-filled memory at an offset and relies on that
//! being the object PyO3 would have made. That holds for one PyO3 release, the one this module
//! was written against (`AUDITED_PYO3` in the build script, 0.30.1), whose layout [`ClassObject`]
//! models. So the probe answers [`Direct::At`] only when
//! - the build script found that release compiled (`dlbind_pyo3_layout_known`): a later 0.30.x
//!   that the `pyo3 = "0.30.1"` requirement admits may lay classes out differently, or set up
//!   an instance in a way no single instance shows, and gets PyO3's constructor until it is
//!   audited;
//! - the type's instance size (`tp_basicsize`, which PyO3 sets to the size of its class
//!   object), weak-reference offset and value offset are exactly the model's, it has no instance
//!   dict and no variable part, and
//! - every byte of the PyO3-made instance after the header, outside the value, is zero (the
//!   weak-reference slot and padding).
//!
//! Anything else is [`Direct::Refused`]: the slower path, never a write at a guessed offset.

use pyo3::PyClass;
use pyo3::prelude::*;
use pyo3::pyclass::boolean_struct::True;

use super::registry::Direct;

/// Whether the PyO3 compiled is the release whose class layout and construction [`ClassObject`]
/// describes (the build script's `dlbind_pyo3_layout_known`).
pub(super) const PYO3_LAYOUT_KNOWN: bool = cfg!(dlbind_pyo3_layout_known);

/// PyO3 0.30.1's instance of a frozen, `Send`, dict-less `#[pyclass]` whose base is `object`
/// (`PyStaticClassObject<T>`): the object header (`PyClassObjectBase<ffi::PyObject>`), then
/// the contents.
#[cfg(not(Py_LIMITED_API))]
#[repr(C)]
struct ClassObject<T, W> {
    head: pyo3::ffi::PyObject,
    contents: Contents<T, W>,
}

/// That class's `PyClassObjectContents<T>`: the value (`ManuallyDrop<UnsafeCell<T>>`, laid out
/// as `T`), the borrow checker (`EmptySlot`, a frozen class), the thread checker
/// (`SendablePyClass`, a `Send` class) and the dict slot (`PyClassDummySlot`, no `dict`), all
/// three zero-sized with alignment 1 and so left out, then the weak-reference slot: `W`, a
/// pointer (NULL in a new instance) with `#[pyclass(weakref)]`, `()` without.
#[cfg(not(Py_LIMITED_API))]
#[repr(C)]
struct Contents<T, W> {
    value: T,
    weakref: W,
}

/// Where [`ClassObject`] puts things, in bytes from the object's start.
#[cfg(not(Py_LIMITED_API))]
#[derive(PartialEq, Eq, Debug)]
struct Layout {
    /// The value's offset.
    value: usize,
    /// The instance size (`tp_basicsize`).
    basicsize: usize,
    /// The weak-reference slot's offset (`tp_weaklistoffset`), 0 without one.
    weaklist: usize,
}

#[cfg(not(Py_LIMITED_API))]
impl Layout {
    /// The model's layout of `T`, with a weak-reference slot or without.
    fn model<T>(weakref: bool) -> Layout {
        use std::mem::{offset_of, size_of};
        type Slot = *mut pyo3::ffi::PyObject;
        if weakref {
            let contents = offset_of!(ClassObject<T, Slot>, contents);
            Layout {
                value: contents + offset_of!(Contents<T, Slot>, value),
                basicsize: size_of::<ClassObject<T, Slot>>(),
                weaklist: contents + offset_of!(Contents<T, Slot>, weakref),
            }
        } else {
            Layout {
                value: offset_of!(ClassObject<T, ()>, contents)
                    + offset_of!(Contents<T, ()>, value),
                basicsize: size_of::<ClassObject<T, ()>>(),
                weaklist: 0,
            }
        }
    }
}

/// What [`new_instance`](super::new_instance) may do for `T`, read off `b`, an instance PyO3
/// just made (see the module docs).
pub(super) fn probe_layout<T: PyClass<Frozen = True> + Sync>(b: &Bound<'_, T>) -> Direct {
    if !PYO3_LAYOUT_KNOWN {
        return Direct::Refused;
    }
    // No list, and no type fields to read, in an abi3 build.
    #[cfg(Py_LIMITED_API)]
    {
        let _ = b;
        Direct::Refused
    }
    #[cfg(not(Py_LIMITED_API))]
    probe_full_api(b)
}

/// [`probe_layout`] on the full API.
#[cfg(not(Py_LIMITED_API))]
fn probe_full_api<T: PyClass<Frozen = True> + Sync>(b: &Bound<'_, T>) -> Direct {
    use pyo3::ffi;
    use std::ptr;

    let obj = b.as_ptr().cast::<u8>().cast_const();
    let val = ptr::from_ref::<T>(b.get()).cast::<u8>();
    // SAFETY: reading the type of a live object, and fields of that live, ready type object.
    let (ty, basicsize, itemsize, dictoffset, weaklistoffset) = unsafe {
        let ty = ffi::Py_TYPE(b.as_ptr());
        (
            ty,
            (*ty).tp_basicsize,
            (*ty).tp_itemsize,
            (*ty).tp_dictoffset,
            (*ty).tp_weaklistoffset,
        )
    };
    let (Ok(basicsize), Ok(weaklist)) =
        (usize::try_from(basicsize), usize::try_from(weaklistoffset))
    else {
        return Direct::Refused;
    };
    let Some(value) = (val as usize).checked_sub(obj as usize) else {
        return Direct::Refused;
    };
    let seen = Layout {
        value,
        basicsize: basicsize.wrapping_add_signed(skew()),
        weaklist,
    };
    if !ptr::eq(ty, T::type_object_raw(b.py()))
        || itemsize != 0
        || dictoffset != 0
        || std::mem::align_of::<T>() > 16
        || seen != Layout::model::<T>(weaklist != 0)
    {
        return Direct::Refused;
    }
    // The model's layout (so the value and the weak-reference slot lie inside the instance's
    // real `basicsize`): every byte after the header that is not the value's is zero.
    let head = std::mem::size_of::<ffi::PyObject>();
    let size = std::mem::size_of::<T>();
    let zero_elsewhere = (head..basicsize)
        .filter(|i| !(value..value + size).contains(i))
        // SAFETY: `[head, basicsize)` lies inside the live object. Volatile reads: padding
        // PyO3's typed write left is read as whatever bytes memory holds, not reasoned about.
        .all(|i| unsafe { obj.add(i).read_volatile() } == 0);
    if zero_elsewhere {
        Direct::At(value)
    } else {
        Direct::Refused
    }
}

/// What the test hook adds to the `tp_basicsize` the probe sees (0 outside dlbind's tests).
#[cfg(not(Py_LIMITED_API))]
#[inline]
fn skew() -> isize {
    #[cfg(feature = "test-util")]
    {
        BASICSIZE_SKEW.load(std::sync::atomic::Ordering::Relaxed)
    }
    #[cfg(not(feature = "test-util"))]
    {
        0
    }
}

#[cfg(feature = "test-util")]
static BASICSIZE_SKEW: std::sync::atomic::AtomicIsize = std::sync::atomic::AtomicIsize::new(0);

/// For dlbind's own tests: from now on the layout probe sees every type's `tp_basicsize` off by
/// `by` bytes (0: as it is), as a PyO3 release with another class layout would report it, so a
/// type probed meanwhile is refused and built by PyO3. Only what the probe compares changes;
/// nothing reads or writes outside the real instance.
#[cfg(feature = "test-util")]
#[doc(hidden)]
pub fn skew_probed_basicsize(by: isize) {
    BASICSIZE_SKEW.store(by, std::sync::atomic::Ordering::Relaxed);
}
