//! [`Buffer`]: storage for an array type: an owned aligned host buffer, imported foreign
//! memory (kept alive by the owning [`ImportedTensor`]) or a view of another Python object's
//! memory (kept alive by a strong reference to that object).

use std::ffi::c_void;
use std::sync::Arc;

use pyo3::prelude::*;

use crate::alloc::AlignedBuffer;
use crate::device::Device;
use crate::error::DlpackError;
use crate::export::DataSource;
use crate::export::memo::ExportMemo;
use crate::extent::Extent;
use crate::ffi::DLDataType;
use crate::import::ImportedTensor;

/// Array storage: owned host memory, an imported DLPack tensor, or memory another Python object
/// or Rust value keeps alive. Built with [`Buffer::zeroed`], [`Buffer::from_aligned`],
/// `From<ImportedTensor>`, [`Buffer::view`] and [`Buffer::from_owner`]; what it holds is private,
/// so new kinds of storage can be added without breaking a user's code.
pub struct Buffer {
    /// What the storage vouches for, worked out once when the buffer is made (every export
    /// reads these four facts, not the storage: a load each, no match on the kind).
    facts: Facts,
    repr: Repr,
    /// Whether an export of the frozen instance this buffer is part of passed the export check
    /// (`export::memo`, decision 0022): every buffer starts unchecked, and none is `Clone`.
    memo: ExportMemo,
}

/// A [`Buffer`]'s element 0, extent, device and writability, as its storage gives them.
#[derive(Clone, Copy)]
struct Facts {
    data: *mut c_void,
    extent: Extent,
    device: Device,
    writability: crate::Writability,
}

// SAFETY: `data` is only an address here (never dereferenced through `Facts`); what keeps the
// memory valid, and decides whether a `Buffer` may move between threads, is its `Repr`.
unsafe impl Send for Facts {}
// SAFETY: as above.
unsafe impl Sync for Facts {}

impl Facts {
    /// The facts an `unsafe` constructor's caller vouches for.
    #[inline(always)]
    fn given(data: *mut c_void, extent: Extent, device: Device, readonly: bool) -> Facts {
        Facts {
            data,
            extent,
            device,
            writability: crate::Writability::from_readonly(readonly),
        }
    }

    /// The facts of host memory this buffer owns.
    #[inline(always)]
    fn of_owned(b: &AlignedBuffer) -> Facts {
        Facts {
            data: b.as_mut_ptr().cast::<c_void>(),
            extent: Extent::from_start(b.len()),
            device: Device::CPU,
            writability: crate::Writability::Writable,
        }
    }

    #[inline(always)]
    fn of_import(t: &ImportedTensor) -> Facts {
        Facts {
            data: t.data_ptr(),
            extent: t.extent(),
            device: t.device(),
            writability: t.writability(),
        }
    }
}

/// What a [`Buffer`] holds: what keeps its memory valid (the memory's address, extent,
/// device and writability are the buffer's [`Facts`]).
enum Repr {
    /// Host memory owned by this buffer (64-byte aligned; 256 for large ones).
    Owned(AlignedBuffer),
    /// Memory of an imported tensor; the producer's deleter runs when the buffer drops.
    Imported(ImportedTensor),
    /// Memory of an imported tensor shared with other buffers.
    Shared(Arc<ImportedTensor>),
    /// Memory owned by another Python object (e.g. the array a view or a same-type import was
    /// taken from), kept alive by a strong reference to it: no allocation, no DLPack round trip.
    View(Py<PyAny>),
    /// Memory kept valid by a Rust value the buffer owns (a device allocation, a memory map, an
    /// arena handle, …), dropped when the buffer drops: see [`Buffer::from_owner`].
    Kept(Box<dyn std::any::Any + Send + Sync>),
}

impl Buffer {
    #[inline(always)]
    fn owned(b: AlignedBuffer) -> Buffer {
        Buffer {
            facts: Facts::of_owned(&b),
            repr: Repr::Owned(b),
            memo: ExportMemo::new(),
        }
    }

    #[inline(always)]
    fn import(t: ImportedTensor) -> Buffer {
        Buffer {
            facts: Facts::of_import(&t),
            repr: Repr::Imported(t),
            memo: ExportMemo::new(),
        }
    }

    /// `nbytes` zeroed host bytes.
    pub fn zeroed(nbytes: usize) -> Result<Buffer, DlpackError> {
        Ok(Buffer::owned(AlignedBuffer::zeroed(nbytes)?))
    }

    /// Owned, writable host memory.
    #[inline]
    pub fn from_aligned(buf: AlignedBuffer) -> Buffer {
        Buffer::owned(buf)
    }

    /// An imported tensor's memory (the producer stays alive until the buffer drops).
    #[inline]
    pub fn from_imported(t: ImportedTensor) -> Buffer {
        Buffer::import(t)
    }

    /// A view of memory owned by the Python object `owner` (no allocation, no copy): element 0
    /// is `data`, the bytes `extent` around it may be addressed, on `device`, writable unless
    /// `readonly`. `owner` stays alive as long as the buffer (and any buffer cloned from it with
    /// [`Buffer::share_view`]). Exports of a type holding the buffer are checked against
    /// `extent`, whatever the type's shape says.
    ///
    /// # Safety
    /// Every byte of `extent` around `data` must belong to memory on `device` that `owner`
    /// keeps valid (and unmoved) for as long as `owner` is alive; unless `readonly`, consumers
    /// may write it (no Rust reference to it exists while the buffer lives).
    #[inline]
    pub unsafe fn view(
        owner: Py<PyAny>,
        data: *mut c_void,
        extent: Extent,
        device: Device,
        readonly: bool,
    ) -> Buffer {
        Buffer {
            facts: Facts::given(data, extent, device, readonly),
            repr: Repr::View(owner),
            memo: ExportMemo::new(),
        }
    }

    /// Memory owned by a Rust value: element 0 is `data`, the bytes `extent` around it may be
    /// addressed, on `device`, writable unless `readonly`; `owner` (a GPU allocation, a memory
    /// map, an arena handle, …) is dropped when the buffer drops, and not before. No allocation
    /// beyond boxing `owner`, no managed tensor.
    ///
    /// # Safety
    /// Every byte of `extent` around `data` must be memory on `device` that stays valid (and
    /// unmoved) while `owner` is alive; unless `readonly`, consumers may write it while the
    /// buffer lives (nothing reads it through a Rust reference meanwhile).
    #[inline]
    pub unsafe fn from_owner<O: Send + Sync + 'static>(
        owner: O,
        data: *mut c_void,
        extent: Extent,
        device: Device,
        readonly: bool,
    ) -> Buffer {
        Buffer {
            facts: Facts::given(data, extent, device, readonly),
            repr: Repr::Kept(Box::new(owner)),
            memo: ExportMemo::new(),
        }
    }

    /// Takes ownership of `v`'s elements: writable host memory that no Rust reference reaches
    /// any more (the `Vec` is moved in and dropped with the buffer), so that consumers may write
    /// it — what a type whose exports should be writable holds instead of a `Vec` field (which
    /// is lent through `&` and so exported read-only). No copy.
    pub fn from_vec<T: crate::DLPackElement + Send + Sync + 'static>(mut v: Vec<T>) -> Buffer {
        let data = v.as_mut_ptr().cast::<c_void>();
        let extent = Extent::from_start(std::mem::size_of_val::<[T]>(&v));
        // SAFETY: the `Vec`'s heap buffer does not move when the `Vec` moves into the buffer's
        // owner box, and it is dropped only with the buffer; `data` came from `as_mut_ptr`
        // (write access), `extent` is its length in bytes, and the `Vec` is never reached
        // again, so no Rust reference to the elements exists while consumers write them.
        unsafe { Buffer::from_owner(v, data, extent, Device::CPU, false) }
    }

    /// The bytes of owned host memory ([`Buffer::zeroed`], [`Buffer::from_aligned`]) to fill;
    /// `None` for imported memory and views, which this buffer does not own.
    #[inline]
    pub fn owned_bytes_mut(&mut self) -> Option<&mut [u8]> {
        match &mut self.repr {
            Repr::Owned(b) => Some(b.as_mut_slice()),
            _ => None,
        }
    }

    /// A view of this buffer's memory with element 0 at `data`, kept alive by `holder` — the
    /// Python object that owns `self` — or, when `self` is itself a view, by that view's owner
    /// (so chains of views do not chain owners). `readonly` is or-ed with this buffer's own.
    ///
    /// # Safety
    /// `holder` must own `self` (keep it alive and unmodified while `holder` lives), and the
    /// bytes addressed from `data` must lie in memory reachable from `self`.
    #[inline(always)]
    pub unsafe fn share_view(
        &self,
        py: Python<'_>,
        holder: &Bound<'_, PyAny>,
        data: *mut c_void,
        device: Device,
        readonly: bool,
    ) -> Buffer {
        // The facts are read before the owner's new reference is taken (that store could, for
        // all the compiler knows, change them), so that a `data` read from this buffer is seen
        // to be its element 0 (the same-type view: offset 0, the extent as it is).
        let facts = self.facts;
        let owner = match &self.repr {
            Repr::View(owner) => owner.clone_ref(py),
            _ => holder.clone().unbind(),
        };
        // The same memory seen from `data` (inside it, by the contract; nothing if not).
        let offset = (data as isize).wrapping_sub(facts.data as isize);
        let extent = facts.extent.shifted(offset).unwrap_or(Extent::EMPTY);
        Buffer {
            facts: Facts::given(
                data,
                extent,
                device,
                readonly || !facts.writability.is_writable(),
            ),
            repr: Repr::View(owner),
            memo: ExportMemo::new(),
        }
    }

    /// Gives back now the Python reference a view holds (its owner's: decref'd here, with the
    /// GIL `py` proves), leaving an empty buffer, so that dropping the buffer afterwards drops
    /// no `Py<…>`; `true` then, and for owned and imported memory, whose drops need no
    /// `Py<…>` (an imported tensor's deleter and keeper take the GIL themselves; a producer's
    /// managed tensor held alone is given back here, its deleter run now). `false` for
    /// [`Buffer::from_owner`] memory, whose owner may hold anything. What a
    /// [`ReleasePython`](crate::cpython::freelist::ReleasePython) type's `release_python_refs` calls for
    /// its buffer field. [`Buffer::owns_nothing`] then says whether its drop has anything left
    /// to do.
    #[inline]
    pub fn release_python_refs(&mut self, py: Python<'_>) -> bool {
        match &mut self.repr {
            Repr::View(v) => {
                let owner = v.as_ptr();
                // SAFETY: the view's `Py` is given up without its drop: the buffer is overwritten
                // in place (the view's other fields are plain data), and its reference is given
                // back here, at once, with the GIL (`py`); a `Py` dropped outside PyO3's own
                // trampolines would wait in PyO3's pool instead.
                unsafe {
                    self.become_empty();
                    pyo3::ffi::Py_DECREF(owner);
                }
                let _ = py;
                true
            }
            Repr::Imported(t) => {
                // A producer's managed tensor and nothing else: given back now (its deleter
                // runs here rather than in the drop), leaving an empty buffer whose drop does
                // nothing ([`Buffer::owns_nothing`]).
                // SAFETY: after `true` the handle owns nothing; it is overwritten in place,
                // never dropped.
                unsafe {
                    if t.release_managed_in_place() {
                        self.become_empty();
                    }
                }
                let _ = py;
                true
            }
            Repr::Owned(_) | Repr::Shared(_) => true,
            Repr::Kept(_) => false,
        }
    }

    /// Overwrites the facts and the storage with an empty owned buffer's, without dropping
    /// the storage that was there (the caller gave back what it held). The memo is left as it
    /// is: it is set only while the buffer is part of a live frozen instance, which no `&mut`
    /// reaches, so here it is either unset or the instance is being released (its slot is next
    /// filled with a whole new value).
    ///
    /// # Safety
    /// What `self.repr` holds must need no drop any more.
    #[inline(always)]
    unsafe fn become_empty(&mut self) {
        let empty = AlignedBuffer::empty();
        // SAFETY: plain writes of valid values over fields whose old values need no drop
        // (caller contract; `Facts` is `Copy`).
        unsafe {
            std::ptr::write(&mut self.facts, Facts::of_owned(&empty));
            std::ptr::write(&mut self.repr, Repr::Owned(empty));
        }
    }

    /// For dlbind's own tests: which storage the buffer holds (`"owned"`, `"imported"`,
    /// `"shared"`, `"view"`, `"kept"`).
    #[cfg(feature = "test-util")]
    #[doc(hidden)]
    pub fn storage_kind(&self) -> &'static str {
        match &self.repr {
            Repr::Owned(_) => "owned",
            Repr::Imported(_) => "imported",
            Repr::Shared(_) => "shared",
            Repr::View(_) => "view",
            Repr::Kept(_) => "kept",
        }
    }

    /// For dlbind's own tests: the Python object a view keeps alive.
    #[cfg(feature = "test-util")]
    #[doc(hidden)]
    pub fn view_owner(&self) -> Option<&Py<PyAny>> {
        match &self.repr {
            Repr::View(v) => Some(v),
            _ => None,
        }
    }

    /// Whether dropping the buffer would do nothing: an empty owned buffer (what a view becomes
    /// once [`Buffer::release_python_refs`] gave its owner back).
    #[inline]
    pub fn owns_nothing(&self) -> bool {
        matches!(&self.repr, Repr::Owned(b) if b.is_unallocated())
    }

    /// Address of the first byte (element 0 for imported tensors and views).
    #[inline]
    pub fn data_ptr(&self) -> *mut c_void {
        self.facts.data
    }

    /// The imported tensor behind this buffer, if any.
    ///
    /// Unsafe (issue 50, decision 0023): the buffer may export its memory writable (an import
    /// of a writable tensor; memory Rust owns outright, such as `adapters::ndarray::export` of
    /// an owned array, an image, or one of dlbind's copies), and a consumer may write it while
    /// the `&ImportedTensor` lives; a `&[T]` taken from it ([`ImportedTensor::as_slice`]) would
    /// then see its elements change, which Rust's aliasing rules forbid. Read the tensor before
    /// it goes into the buffer (it is yours then: nothing exports it), or promise:
    ///
    /// # Safety
    /// While the returned reference, or anything borrowed from it, lives, no export of this
    /// buffer that a consumer may write exists or is made (every export of it is read-only, or
    /// the value holding it is not reachable from Python).
    #[inline]
    pub unsafe fn imported(&self) -> Option<&ImportedTensor> {
        match &self.repr {
            Repr::Owned(_) | Repr::View(_) | Repr::Kept(_) => None,
            Repr::Imported(t) => Some(t),
            Repr::Shared(t) => Some(t),
        }
    }

    /// Where the memory is (owned buffers are host memory).
    #[inline]
    pub fn device(&self) -> Device {
        self.facts.device
    }

    /// Whether the memory must not be written (imported read-only tensors, read-only views).
    #[inline]
    pub fn readonly(&self) -> bool {
        !self.facts.writability.is_writable()
    }

    /// The bytes around [`Buffer::data_ptr`] that may be addressed: an owned buffer's length, an
    /// import's own extent (computed when it was made), a view's (given when it was made).
    #[inline]
    pub fn extent(&self) -> Extent {
        self.facts.extent
    }
}

impl From<AlignedBuffer> for Buffer {
    fn from(b: AlignedBuffer) -> Self {
        Buffer::owned(b)
    }
}

impl From<ImportedTensor> for Buffer {
    fn from(t: ImportedTensor) -> Self {
        Buffer::import(t)
    }
}

/// Writable only when this `Arc` is the tensor's only one: another clone can lend the elements
/// through `&` ([`ImportedTensor::as_slice`]) while a consumer of the buffer's export writes
/// them (issue 50), so a shared tensor is exported read-only, as the ndarray adapter exports a
/// shared `ArcArray`. (The buffer never hands out its `Arc`, so one unique when it is made
/// stays so.)
impl From<Arc<ImportedTensor>> for Buffer {
    fn from(mut t: Arc<ImportedTensor>) -> Self {
        let mut facts = Facts::of_import(&t);
        if Arc::get_mut(&mut t).is_none() {
            facts.writability = facts.writability.narrow(crate::Writability::ReadOnly);
        }
        Buffer {
            facts,
            repr: Repr::Shared(t),
            memo: ExportMemo::new(),
        }
    }
}

impl Buffer {
    fn debug_facts<'a, 'b>(
        &self,
        f: &'a mut std::fmt::Formatter<'b>,
        name: &str,
    ) -> std::fmt::DebugStruct<'a, 'b> {
        let mut d = f.debug_struct(name);
        d.field("data", &self.facts.data)
            .field("extent", &self.facts.extent)
            .field("device", &self.facts.device)
            .field("writability", &self.facts.writability);
        d
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.repr {
            Repr::Owned(b) => f
                .debug_struct("Buffer::Owned")
                .field("len", &b.len())
                .finish(),
            Repr::Imported(t) => f.debug_tuple("Buffer::Imported").field(t).finish(),
            Repr::Shared(t) => f.debug_tuple("Buffer::Shared").field(t).finish(),
            Repr::View(owner) => self.debug_facts(f, "Buffer::View").field("owner", &owner.as_ptr()).finish(),
            Repr::Kept(owner) => self.debug_facts(f, "Buffer::Kept").field("owner", &(**owner).type_id()).finish(),
        }
    }
}

// SAFETY: the pointer is valid while the buffer lives: owned memory is freed only on drop,
// imported memory only when the owning `ImportedTensor` drops, and a view's memory is kept
// alive by its owner reference (the `Buffer::view` contract). No dtype: untyped bytes.
unsafe impl DataSource for Buffer {
    #[inline]
    fn data_ptr(&self) -> *mut c_void {
        Buffer::data_ptr(self)
    }
    #[inline]
    fn element_dtype(&self) -> Option<DLDataType> {
        None
    }
    /// Owned memory's length, an import's or a view's extent (bytes below element 0 included).
    #[inline]
    fn extent(&self) -> Extent {
        Buffer::extent(self)
    }
    /// Writable unless the memory is read-only (an import or a view that said so): a buffer
    /// never hands out a Rust reference to its elements through `&self`.
    #[inline]
    fn writability(&self) -> crate::Writability {
        self.facts.writability
    }
    #[inline]
    fn device(&self) -> Device {
        Buffer::device(self)
    }
    /// This buffer's own memo: its facts are fixed when it is made, and no other source can
    /// share it (a `Buffer` is not `Clone`; `Arc<ImportedTensor>` sharing makes a new buffer).
    #[inline(always)]
    fn __dlbind_memo(&self) -> Option<&ExportMemo> {
        Some(&self.memo)
    }
    /// A view's owner, and the object an imported Python view keeps (its exporter), so that a
    /// reference cycle through them is collected (e.g. an object that exposes
    /// `__array_interface__` and stores the array imported from itself). Not visited: the
    /// Python objects a producer's managed tensor may hold (opaque to dlbind), and a
    /// shared (`Repr::Shared`) tensor's owner (shared by several buffers, it is not this one's to
    /// report).
    fn visit_python_refs(&self, visit: &pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        match &self.repr {
            Repr::View(v) => visit.call(v),
            Repr::Imported(t) => t.visit_python_owner(visit),
            Repr::Owned(_) | Repr::Shared(_) | Repr::Kept(_) => Ok(()),
        }
    }
    /// What [`visit_python_refs`](Self::visit_python_refs) reports decides it: nothing (owned,
    /// shared, kept memory, a copy) needs no tracking, nor a view's owner that can close no
    /// cycle (`cpython::gc::referent_needs_tracking`: a non-GC object such as a numpy array,
    /// or an untracked instance of the same frozen type); a producer's tensor is tracked.
    #[inline(always)]
    fn __dlbind_needs_tracking(&self, own: impl FnOnce() -> *mut pyo3::ffi::PyTypeObject) -> bool {
        match &self.repr {
            // SAFETY: the view holds a strong reference to its live owner; the GIL is held
            // wherever a new instance is made.
            Repr::View(v) => unsafe {
                crate::cpython::gc::referent_needs_tracking(v.as_ptr(), own)
            },
            Repr::Imported(t) => t.reports_python_owner(),
            Repr::Owned(_) | Repr::Shared(_) | Repr::Kept(_) => false,
        }
    }
}
