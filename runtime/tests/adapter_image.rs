//! The image adapter (`dlbind::adapters::image`) against the real crate: `ImageBuffer` exports
//! as HWC, `FlatSamples` with their strides, a frozen class's `SubImage` as a strided read-only
//! view; imports back as `ImageBuffer`s over the tensor; empty images (0 wide, 0 high) of every
//! subpixel type both ways; every refusal (0-d, a dimension beyond `u32`) with its spec kind.
#![cfg(feature = "image")]

mod common;

use dlbind::adapters::image::image::flat::SampleLayout;
use dlbind::adapters::image::image::{
    FlatSamples, GenericImageView, ImageBuffer, Luma, LumaA, Rgb, RgbImage, Rgba,
};
use dlbind::adapters::image::{export, export_flat, export_sub_image, import, import_mut};
use dlbind::adapters::live_rust_owned_tensors;
use dlbind::prelude::*;
use dlbind::spec::errors::{FailureKind, PyExceptionKind};

fn rgb() -> RgbImage {
    RgbImage::from_fn(5, 3, |x, y| Rgb([x as u8, y as u8, (10 * y + x) as u8]))
}

fn refs<T>(o: &Bound<'_, T>) -> isize {
    let sys = o.py().import("sys").unwrap();
    sys.call_method1("getrefcount", (o.as_any(),))
        .unwrap()
        .extract::<isize>()
        .unwrap()
        - 1
}

#[test]
fn image_buffer_exports_hwc_and_imports_back_without_a_copy() {
    let _g = common::serial();
    let img = rgb();
    let t = export(img.clone()).unwrap();
    assert_eq!(t.shape(), &[3, 5, 3]);
    assert_eq!(t.strides(), &[15, 3, 1]);
    assert_eq!(t.dtype_info().unwrap().name, "uint8");
    assert!(!t.readonly());
    assert_eq!(t.as_slice::<u8>().unwrap(), img.as_raw().as_slice());
    let p = t.data_ptr();
    let back = import::<Rgb<u8>>(t).unwrap();
    assert_eq!(
        back.as_raw().as_ptr() as *mut std::ffi::c_void,
        p,
        "no copy"
    );
    assert_eq!(back.dimensions(), (5, 3));
    for (x, y, px) in img.enumerate_pixels() {
        assert_eq!(back.get_pixel(x, y), px);
    }
    // 16-bit and float subpixels, one channel.
    let l = ImageBuffer::<Luma<u16>, Vec<u16>>::from_fn(2, 4, |x, y| Luma([(x * 1000 + y) as u16]));
    let t = export(l.clone()).unwrap();
    assert_eq!(
        (t.shape(), t.dtype_info().unwrap().name),
        (&[4i64, 2, 1][..], "uint16")
    );
    let f = ImageBuffer::<Rgba<f32>, Vec<f32>>::from_pixel(2, 2, Rgba([0.5, 0.25, 1.0, 1.0]));
    let t = export(f).unwrap();
    assert_eq!(
        (t.shape(), t.dtype_info().unwrap().name),
        (&[2i64, 2, 4][..], "float32")
    );
}

#[test]
fn import_mut_writes_reach_the_producer_and_read_only_is_refused() {
    let _g = common::serial();
    let t = export(rgb()).unwrap();
    // SAFETY: the test's only handle of this memory while the result lives.
    let mut img = unsafe { import_mut::<Rgb<u8>>(t) }.unwrap();
    img.put_pixel(0, 0, Rgb([9, 9, 9]));
    assert_eq!(
        img.as_raw().tensor().as_slice::<u8>().unwrap()[..3],
        [9, 9, 9]
    );

    // A read-only tensor (a shared ArcArray through the ndarray adapter): `import` yes,
    // `import_mut` no.
    #[cfg(feature = "ndarray")]
    {
        use dlbind::adapters::ndarray::ndarray::{ArcArray, Ix3};
        let a: ArcArray<u8, Ix3> = ArcArray::zeros((2, 2, 3));
        let t = dlbind::adapters::ndarray::export(a.clone()).unwrap();
        assert!(t.readonly());
        // SAFETY: the test's only handle of this memory while the result lives.
        let e = unsafe { import_mut::<Rgb<u8>>(t) }.unwrap_err();
        assert_eq!(e.kind(), FailureKind::UnsupportedLayout);
        assert!(e.message().contains("read-only"), "{}", e.message());
        let t = dlbind::adapters::ndarray::export(a).unwrap();
        assert_eq!(import::<Rgb<u8>>(t).unwrap().dimensions(), (2, 2));
    }
}

#[test]
fn incompatible_tensors_are_refused_with_the_spec_kinds() {
    let _g = common::serial();
    // Channels.
    let e = import::<Rgba<u8>>(export(rgb()).unwrap()).unwrap_err();
    assert_eq!(e.kind(), FailureKind::UnsupportedLayout);
    assert_eq!(e.exception(), PyExceptionKind::BufferError);
    assert!(
        e.message().contains("(height, width, 4)"),
        "{}",
        e.message()
    );
    // Subpixel dtype.
    let e = import::<Rgb<u16>>(export(rgb()).unwrap()).unwrap_err();
    assert_eq!(e.kind(), FailureKind::UnsupportedDtype);
    // Rank: (H, W) only for one channel.
    let l = ImageBuffer::<Luma<u8>, Vec<u8>>::new(3, 2);
    let flat = FlatSamples {
        samples: vec![1u8; 6],
        layout: SampleLayout {
            channels: 1,
            channel_stride: 1,
            width: 3,
            width_stride: 1,
            height: 2,
            height_stride: 3,
        },
        color_hint: None,
    };
    let t = export_flat(flat).unwrap();
    assert_eq!(import::<Luma<u8>>(t).unwrap().dimensions(), (3, 2));
    let _ = l;
    // Layout: a strided (planar) tensor is not an ImageBuffer.
    let planar = FlatSamples {
        samples: (0u8..18).collect::<Vec<_>>(),
        layout: SampleLayout {
            channels: 3,
            channel_stride: 6,
            width: 3,
            width_stride: 1,
            height: 2,
            height_stride: 3,
        },
        color_hint: None,
    };
    let t = export_flat(planar).unwrap();
    let e = import::<Rgb<u8>>(t).unwrap_err();
    assert_eq!(e.kind(), FailureKind::UnsupportedLayout);
    assert!(e.message().contains("contiguous"), "{}", e.message());
}

#[test]
fn flat_samples_keep_their_strides_and_stay_inside_the_buffer() {
    let _g = common::serial();
    let planar = FlatSamples {
        samples: (0u16..18).collect::<Vec<_>>(),
        layout: SampleLayout {
            channels: 3,
            channel_stride: 6,
            width: 3,
            width_stride: 1,
            height: 2,
            height_stride: 3,
        },
        color_hint: None,
    };
    let expect: Vec<u16> = (0..2u16)
        .flat_map(|y| (0..3u16).flat_map(move |x| (0..3u16).map(move |c| c * 6 + y * 3 + x)))
        .collect();
    let t = export_flat(planar).unwrap();
    assert_eq!(t.shape(), &[2, 3, 3]);
    assert_eq!(t.strides(), &[3, 1, 6]);
    let c = t.to_contiguous_copy().unwrap();
    assert_eq!(c.as_slice::<u16>().unwrap(), expect.as_slice());

    // Reaching past the buffer: refused, the buffer dropped.
    let base = live_rust_owned_tensors();
    let bad = FlatSamples {
        samples: vec![0u8; 17],
        layout: SampleLayout::row_major_packed(3, 3, 2),
        color_hint: None,
    };
    let e = export_flat(bad).unwrap_err();
    assert_eq!(e.kind(), FailureKind::UnsupportedLayout);
    assert_eq!(live_rust_owned_tensors(), base);
}

#[pyclass(frozen)]
struct Photo {
    img: RgbImage,
}

#[cfg_attr(miri, ignore = "calls Python, which Miri cannot run")]
#[test]
fn sub_image_of_a_frozen_class_is_a_strided_read_only_view() {
    let _g = common::serial();
    Python::attach(|py| {
        let obj = Bound::new(py, Photo { img: rgb() }).unwrap();
        let rc = refs(&obj);
        let t = export_sub_image(&obj, |p| p.img.view(1, 1, 3, 2)).unwrap();
        assert_eq!(refs(&obj), rc + 1);
        assert!(t.readonly());
        assert_eq!(t.shape(), &[2, 3, 3]);
        assert_eq!(t.strides(), &[15, 3, 1]);
        let c = t.to_contiguous_copy().unwrap();
        let sub = obj.get().img.view(1, 1, 3, 2).to_image();
        assert_eq!(c.as_slice::<u8>().unwrap(), sub.as_raw().as_slice());
        drop(t);
        assert_eq!(refs(&obj), rc);

        // A SubImage that reaches outside its parent (SubImage::new does not check).
        let e = export_sub_image(&obj, |p| {
            dlbind::adapters::image::image::SubImage::new(&p.img, 4, 0, 2, 1)
        })
        .unwrap_err();
        assert_eq!(e.kind(), FailureKind::UnsupportedLayout);
        assert_eq!(refs(&obj), rc);
    });
}

#[cfg_attr(miri, ignore = "calls Python, which Miri cannot run")]
#[test]
fn numpy_arrays_import_as_images() {
    let _g = common::serial();
    Python::attach(|py| {
        let Some(np) = common::numpy(py) else {
            eprintln!("numpy not installed: skipped");
            return;
        };
        let a = np
            .call_method1("arange", (24,))
            .unwrap()
            .call_method1("astype", ("uint8",))
            .unwrap()
            .call_method1("reshape", ((2, 4, 3),))
            .unwrap();
        let t = dlbind::from_dlpack(&a, None, None).unwrap();
        let img = import::<Rgb<u8>>(t).unwrap();
        assert_eq!(img.dimensions(), (4, 2));
        assert_eq!(img.get_pixel(1, 1), &Rgb([15, 16, 17]));
        // A transposed view is not contiguous.
        let tr = a.call_method1("transpose", ((1, 0, 2),)).unwrap();
        let t = dlbind::from_dlpack(&tr, None, None).unwrap();
        assert_eq!(
            import::<Rgb<u8>>(t).unwrap_err().kind(),
            FailureKind::UnsupportedLayout
        );
    });
}

#[test]
fn every_export_is_dropped_once() {
    let _g = common::serial();
    let base = live_rust_owned_tensors();
    let imgs: Vec<_> = (0..4)
        .map(|k| import::<Rgb<u8>>(export(RgbImage::new(k + 1, 2)).unwrap()).unwrap())
        .collect();
    assert_eq!(live_rust_owned_tensors(), base + 4);
    drop(imgs);
    assert_eq!(live_rust_owned_tensors(), base);
}

/// For one subpixel type: images 0 wide, 0 high or both go out (`export`, `export_flat`) as
/// empty tensors and come back (`import`, `import_mut`) with their dimensions.
/// (A macro: image's pixel types need a bound, `Enlargeable`, that the crate does not export.)
macro_rules! empty_images_both_ways {
    ($s:ty) => {{
        type S = $s;
        for (w, h) in [(0u32, 0u32), (0, 3), (4, 0)] {
            let what = format!("{} {w} x {h}", S::NAME);
            let t = export(ImageBuffer::<Rgb<S>, Vec<S>>::new(w, h)).unwrap();
            assert_eq!(t.shape(), &[i64::from(h), i64::from(w), 3], "{what}");
            assert_eq!((t.numel(), t.dtype()), (0, S::DTYPE), "{what}");
            let back = import::<Rgb<S>>(t).unwrap();
            assert_eq!(back.dimensions(), (w, h), "{what}");
            assert!(back.as_raw().is_empty());
            assert_eq!(back.pixels().count(), 0);

            let t = export(ImageBuffer::<LumaA<S>, Vec<S>>::new(w, h)).unwrap();
            // SAFETY: the test's only handle of this (empty) memory.
            let mut back = unsafe { import_mut::<LumaA<S>>(t) }.unwrap();
            assert_eq!(back.dimensions(), (w, h), "{what}");
            assert_eq!(back.pixels_mut().count(), 0);

            // Planar samples with no pixels: any strides, nothing addressed.
            let flat = FlatSamples {
                samples: Vec::<S>::new(),
                layout: SampleLayout {
                    channels: 4,
                    channel_stride: (w * h) as usize,
                    width: w,
                    width_stride: 1,
                    height: h,
                    height_stride: w as usize,
                },
                color_hint: None,
            };
            let t = export_flat(flat).unwrap();
            assert_eq!(t.shape(), &[i64::from(h), i64::from(w), 4], "{what}");
            assert_eq!(import::<Rgba<S>>(t).unwrap().dimensions(), (w, h), "{what}");
        }
        // No channels: a pixel type has at least one, so (h, w, 0) is refused by name.
        let flat = FlatSamples {
            samples: Vec::<S>::new(),
            layout: SampleLayout {
                channels: 0,
                channel_stride: 1,
                width: 2,
                width_stride: 0,
                height: 2,
                height_stride: 0,
            },
            color_hint: None,
        };
        let e = import::<Luma<S>>(export_flat(flat).unwrap()).unwrap_err();
        assert_eq!(e.kind(), FailureKind::UnsupportedLayout);
        assert!(e.message().contains("[2, 2, 0]"), "{e}");
    }};
}

#[test]
fn empty_images_of_every_subpixel_type_go_both_ways() {
    let _g = common::serial();
    let base = live_rust_owned_tensors();
    empty_images_both_ways!(u8);
    empty_images_both_ways!(u16);
    empty_images_both_ways!(u32);
    empty_images_both_ways!(u64);
    empty_images_both_ways!(i8);
    empty_images_both_ways!(i16);
    empty_images_both_ways!(i32);
    empty_images_both_ways!(i64);
    empty_images_both_ways!(f32);
    empty_images_both_ways!(f64);
    assert_eq!(live_rust_owned_tensors(), base, "every owner dropped once");
}

/// What an image cannot be is refused with a typed error naming it, never a panic: a 0-d or
/// 1-d tensor, and an empty one with a dimension beyond image's `u32`.
#[cfg(feature = "ndarray")]
#[test]
fn tensors_no_image_can_be_are_refused_by_name() {
    use dlbind::adapters::ndarray::{export as nd_export, ndarray};
    let _g = common::serial();
    let e = import::<Luma<f32>>(nd_export(ndarray::arr0(1.5f32)).unwrap()).unwrap_err();
    assert_eq!(e.kind(), FailureKind::UnsupportedLayout);
    assert_eq!(
        e.message(),
        "image: shape [], wanted (height, width, 1) or (height, width)"
    );
    let e = import::<Rgb<u8>>(nd_export(ndarray::Array1::<u8>::zeros(0)).unwrap()).unwrap_err();
    assert_eq!(e.kind(), FailureKind::UnsupportedLayout);
    // 2^33 rows of no pixels: a valid empty tensor, but not an image.
    let big = ndarray::Array2::<u8>::zeros((1 << 33, 0));
    let e = import::<Luma<u8>>(nd_export(big).unwrap()).unwrap_err();
    assert_eq!(e.kind(), FailureKind::UnsupportedLayout);
    assert!(e.message().contains("8589934592"), "{e}");
    // And an empty 2-D tensor is a one-channel image.
    let l = import::<Luma<i16>>(nd_export(ndarray::Array2::<i16>::zeros((0, 7))).unwrap()).unwrap();
    assert_eq!(l.dimensions(), (7, 0));
}
