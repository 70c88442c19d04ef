//! `image` both ways (feature `image`; the `image` crate without its codecs).
//!
//! **Export.** [`export`] turns an [`ImageBuffer`] into a height × width × channels (HWC)
//! tensor of its subpixel type, writable, without a copy: the buffer moves into the tensor.
//! [`export_flat`] does the same for [`FlatSamples`], keeping their strides (planar, padded
//! rows, a shrunken view: any layout whose samples lie in the buffer). [`export_sub_image`]
//! exports a [`SubImage`] of an image that a frozen `#[pyclass]` holds, read-only, with the
//! parent's strides, the object kept alive by the tensor.
//!
//! **Import.** [`import`] (read-only) and [`import_mut`] (writable data only; `unsafe`: the
//! producer's memory may have other handles) give an
//! `ImageBuffer` whose container is the tensor itself ([`TensorSamples`],
//! [`TensorSamplesMut`]: the producer stays alive as long as the image): a C-contiguous host
//! tensor of shape `(height, width, channels)` with `channels == P::CHANNEL_COUNT` (or
//! `(height, width)` for one channel) and dtype `P::Subpixel`. Anything else is refused with
//! the spec's error: another dtype (`UnsupportedDtype`), another shape or a strided layout
//! (`UnsupportedLayout`: `np.ascontiguousarray` first), device memory (`UnsupportedDevice`).
//!
//! ```
//! use dlbind::adapters::image::{export, import};
//! use image::{Rgb, RgbImage};
//!
//! let img = RgbImage::from_fn(4, 2, |x, y| Rgb([x as u8, y as u8, 7]));
//! let t = export(img).unwrap();
//! assert_eq!((t.shape(), t.strides()), (&[2i64, 4, 3][..], &[12i64, 3, 1][..]));
//! let back = import::<Rgb<u8>>(t).unwrap();           // the same memory, no copy
//! assert_eq!(back.get_pixel(3, 1), &Rgb([3, 1, 7]));
//! assert!(import::<image::Rgba<u8>>(export(RgbImage::new(1, 1)).unwrap()).is_err());
//! ```

/// The `image` crate this adapter is built against (for a matching version).
pub use ::image;

use std::ffi::c_void;
use std::ops::{Deref, DerefMut};

use image::flat::SampleLayout;
use image::{FlatSamples, GenericImageView, ImageBuffer, Pixel, SubImage};
use pyo3::PyClass;
use pyo3::prelude::*;
use pyo3::pyclass::boolean_struct::True;

use super::rust_owned::{self, Layout, check_inside};
use crate::error::DlpackError;
use crate::import::ImportedTensor;
use crate::spec::elements::DLPackElement;
use crate::spec::errors::FailureKind;

fn layout_error(msg: String) -> DlpackError {
    DlpackError::new(FailureKind::UnsupportedLayout, msg)
}

/// An `i64` of a size or stride, refused when it does not fit.
fn dim(what: &str, v: usize) -> Result<i64, DlpackError> {
    i64::try_from(v).map_err(|_| layout_error(format!("image: {what} {v}, wanted one within i64")))
}

/// Exports an [`ImageBuffer`] as a writable `(height, width, channels)` tensor of its
/// subpixels, without a copy (the buffer moves into the tensor).
pub fn export<P, C>(img: ImageBuffer<P, C>) -> Result<ImportedTensor, DlpackError>
where
    P: Pixel + Send + 'static,
    P::Subpixel: DLPackElement,
    C: DerefMut<Target = [P::Subpixel]> + Send + 'static,
{
    // SAFETY: the samples are the container's, reached once through `DerefMut` with the image
    // in its final place; they stay valid while the container lives, nobody else holds it
    // (moved in) and nothing calls it again. `check_inside` keeps the shape inside them.
    unsafe {
        rust_owned::export(img, |img| {
            let (w, h) = img.dimensions();
            let shape = vec![i64::from(h), i64::from(w), i64::from(P::CHANNEL_COUNT)];
            let samples: &mut [P::Subpixel] = img;
            let strides = crate::layout::c_strides(&shape);
            check_inside("image: ImageBuffer", &shape, &strides, 0, samples.len())?;
            Ok(Layout {
                data: samples.as_mut_ptr().cast::<c_void>(),
                shape,
                strides: None,
                dtype: P::Subpixel::DTYPE,
                readonly: false,
                copied: false,
            })
        })
    }
}

/// The `(height, width, channels)` shape and strides of a sample layout.
fn flat_dims(l: &SampleLayout) -> Result<(Vec<i64>, Vec<i64>), DlpackError> {
    Ok((
        vec![
            i64::from(l.height),
            i64::from(l.width),
            i64::from(l.channels),
        ],
        vec![
            dim("height_stride", l.height_stride)?,
            dim("width_stride", l.width_stride)?,
            dim("channel_stride", l.channel_stride)?,
        ],
    ))
}

/// Exports [`FlatSamples`] as a writable `(height, width, channels)` tensor with the layout's
/// strides (`height_stride`, `width_stride`, `channel_stride`), without a copy. A layout that
/// reaches past the buffer is refused (`UnsupportedLayout`).
///
/// ```
/// use dlbind::adapters::image::export_flat;
/// use image::{FlatSamples, flat::SampleLayout};
///
/// // Planar (channel-major) RGB, 2 × 3 pixels.
/// let flat = FlatSamples {
///     samples: (0u16..18).collect::<Vec<_>>(),
///     layout: SampleLayout { channels: 3, channel_stride: 6, width: 3, width_stride: 1,
///                            height: 2, height_stride: 3 },
///     color_hint: None,
/// };
/// let t = export_flat(flat).unwrap();
/// assert_eq!((t.shape(), t.strides()), (&[2i64, 3, 3][..], &[3i64, 1, 6][..]));
/// ```
pub fn export_flat<S, B>(flat: FlatSamples<B>) -> Result<ImportedTensor, DlpackError>
where
    S: DLPackElement,
    B: DerefMut<Target = [S]> + Send + 'static,
{
    let (shape, strides) = flat_dims(&flat.layout)?;
    // SAFETY: as for `export`: the samples are reached once, in place; `check_inside` keeps
    // every addressed sample inside them.
    unsafe {
        rust_owned::export(flat.samples, move |samples| {
            let samples: &mut [S] = samples;
            check_inside("image: FlatSamples", &shape, &strides, 0, samples.len())?;
            Ok(Layout {
                data: samples.as_mut_ptr().cast::<c_void>(),
                shape,
                strides: Some(strides),
                dtype: S::DTYPE,
                readonly: false,
                copied: false,
            })
        })
    }
}

/// Exports a [`SubImage`] of an [`ImageBuffer`] that `owner`, a frozen `#[pyclass]`, holds:
/// `sub` picks it from the object's value. The tensor is a read-only `(height, width, channels)`
/// view with the parent's strides (`(parent_width * channels, channels, 1)`), keeping a strong
/// reference to the object. A sub-image that reaches outside its parent is refused
/// (`UnsupportedLayout`).
pub fn export_sub_image<O, P, C>(
    owner: &Bound<'_, O>,
    sub: impl for<'a> FnOnce(&'a O) -> SubImage<&'a ImageBuffer<P, C>>,
) -> Result<ImportedTensor, DlpackError>
where
    O: PyClass<Frozen = True> + Sync,
    P: Pixel + 'static,
    P::Subpixel: DLPackElement,
    C: Deref<Target = [P::Subpixel]>,
{
    let s = sub(owner.get());
    let (x, y) = s.offsets();
    let (w, h) = GenericImageView::dimensions(&*s);
    let parent = s.inner();
    let (pw, ph) = parent.dimensions();
    if u64::from(x) + u64::from(w) > u64::from(pw) || u64::from(y) + u64::from(h) > u64::from(ph) {
        return Err(layout_error(format!(
            "image: SubImage at ({x}, {y}) of {w} x {h}, wanted one inside its {pw} x {ph} parent"
        )));
    }
    let ch = i64::from(P::CHANNEL_COUNT);
    let shape = vec![i64::from(h), i64::from(w), ch];
    let strides = vec![i64::from(pw) * ch, ch, 1];
    let samples: &[P::Subpixel] = parent;
    let offset = (i64::from(y) * i64::from(pw) + i64::from(x)) * ch;
    check_inside("image: SubImage", &shape, &strides, offset, samples.len())?;
    // In bounds (checked), or one past the end for an empty sub-image, never dereferenced.
    let data = samples.as_ptr().wrapping_add(offset as usize) as *mut c_void;
    let keep: Py<O> = owner.clone().unbind();
    // SAFETY: the samples belong to the parent image, which the object's value borrows from:
    // a frozen class's value is never mutably borrowed while the object lives, and the tensor
    // keeps the object alive. Read-only: other Rust code reads the image through `&O`.
    unsafe {
        rust_owned::export(keep, move |_| {
            Ok(Layout {
                data,
                shape,
                strides: Some(strides),
                dtype: P::Subpixel::DTYPE,
                readonly: true,
                copied: false,
            })
        })
    }
}

/// The checks of [`import`]: width, height and the samples' slice of a compatible tensor.
fn check_image<P: Pixel>(
    t: &ImportedTensor,
) -> Result<(u32, u32, *mut P::Subpixel, usize), DlpackError>
where
    P::Subpixel: DLPackElement,
{
    let ch = i64::from(P::CHANNEL_COUNT);
    let (h, w) = match *t.shape() {
        [h, w, c] if c == ch => (h, w),
        [h, w] if ch == 1 => (h, w),
        _ => {
            return Err(layout_error(format!(
                "image: shape {:?}, wanted (height, width, {ch}){}",
                t.shape(),
                if ch == 1 { " or (height, width)" } else { "" }
            )));
        }
    };
    let (Ok(w32), Ok(h32)) = (u32::try_from(w), u32::try_from(h)) else {
        return Err(layout_error(format!(
            "image: {w} x {h} pixels, wanted dimensions within image's u32"
        )));
    };
    // dtype, host memory, C-contiguous, aligned.
    let s = t
        .as_slice::<P::Subpixel>()
        .map_err(|e| super::reword("image", e))?;
    let len = s.len();
    // The tensor's own pointer (not one derived from the shared slice, which may not be
    // written through): element 0, or dangling-aligned for no samples.
    let data = if len == 0 {
        std::ptr::NonNull::<P::Subpixel>::dangling().as_ptr()
    } else {
        t.data_ptr().cast::<P::Subpixel>()
    };
    Ok((w32, h32, data, len))
}

/// An imported tensor's elements as an image container (`Deref<Target = [S]>`): the tensor is
/// kept, so the producer stays alive as long as the image. Made by [`import`].
pub struct TensorSamples<S> {
    tensor: ImportedTensor,
    data: *const S,
    len: usize,
}

/// [`TensorSamples`] that may be written (`DerefMut`), made by [`import_mut`] from writable
/// data only.
pub struct TensorSamplesMut<S> {
    tensor: ImportedTensor,
    data: *mut S,
    len: usize,
}

// SAFETY: the pointer is into the tensor's memory, which the (Send + Sync) handle owns;
// `&self` gives shared slices only, `&mut self` (TensorSamplesMut) an exclusive one.
unsafe impl<S: Send + Sync> Send for TensorSamples<S> {}
// SAFETY: as above.
unsafe impl<S: Send + Sync> Sync for TensorSamples<S> {}
// SAFETY: as above.
unsafe impl<S: Send + Sync> Send for TensorSamplesMut<S> {}
// SAFETY: as above.
unsafe impl<S: Send + Sync> Sync for TensorSamplesMut<S> {}

impl<S> Deref for TensorSamples<S> {
    type Target = [S];
    fn deref(&self) -> &[S] {
        // SAFETY: `len` elements of type `S` from `data` (checked by `as_slice` at import: dtype,
        // host memory, contiguous, aligned; dangling-aligned when empty), alive as long as the
        // tensor this value owns.
        unsafe { std::slice::from_raw_parts(self.data, self.len) }
    }
}

impl<S> Deref for TensorSamplesMut<S> {
    type Target = [S];
    fn deref(&self) -> &[S] {
        // SAFETY: as for `TensorSamples`.
        unsafe { std::slice::from_raw_parts(self.data, self.len) }
    }
}

impl<S> DerefMut for TensorSamplesMut<S> {
    fn deref_mut(&mut self) -> &mut [S] {
        // SAFETY: as for `deref`, plus writable data (checked at import) and exclusivity
        // (`&mut self`; the tensor is private to this value).
        unsafe { std::slice::from_raw_parts_mut(self.data, self.len) }
    }
}

impl<S> TensorSamples<S> {
    /// The tensor (shape, device, flags).
    pub fn tensor(&self) -> &ImportedTensor {
        &self.tensor
    }
}

impl<S> TensorSamplesMut<S> {
    /// The tensor (shape, device, flags).
    pub fn tensor(&self) -> &ImportedTensor {
        &self.tensor
    }
}

impl<S> std::fmt::Debug for TensorSamples<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("TensorSamples").field(&self.tensor).finish()
    }
}

impl<S> std::fmt::Debug for TensorSamplesMut<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("TensorSamplesMut")
            .field(&self.tensor)
            .finish()
    }
}

/// The image a `(height, width, channels)` tensor holds, read-only and without a copy: see
/// the [module docs](self) for what is refused.
pub fn import<P: Pixel>(
    t: ImportedTensor,
) -> Result<ImageBuffer<P, TensorSamples<P::Subpixel>>, DlpackError>
where
    P::Subpixel: DLPackElement,
{
    let (w, h, data, len) = check_image::<P>(&t)?;
    let samples = TensorSamples {
        tensor: t,
        data,
        len,
    };
    ImageBuffer::from_raw(w, h, samples)
        .ok_or_else(|| layout_error(format!("image: {w} x {h} pixels, wanted as many samples")))
}

/// [`import`] for writable data: the image may be written, and the producer sees the writes.
/// Read-only data is refused (`UnsupportedLayout`).
///
/// # Safety
/// The samples are the producer's memory, which more than `t` may reach: another import of the
/// same object, the producer itself, Python code. While the image lives nothing else may read
/// or write them (the image hands out `&mut [S]`).
pub unsafe fn import_mut<P: Pixel>(
    t: ImportedTensor,
) -> Result<ImageBuffer<P, TensorSamplesMut<P::Subpixel>>, DlpackError>
where
    P::Subpixel: DLPackElement,
{
    if t.readonly() {
        return Err(layout_error(
            "image: a read-only tensor, wanted writable data (import_mut)".to_string(),
        ));
    }
    let (w, h, data, len) = check_image::<P>(&t)?;
    let samples = TensorSamplesMut {
        tensor: t,
        data,
        len,
    };
    ImageBuffer::from_raw(w, h, samples)
        .ok_or_else(|| layout_error(format!("image: {w} x {h} pixels, wanted as many samples")))
}
