//! `ndarray` integration: `#[dlpack(array)]` export of owned arrays (negative strides
//! included) and import as `ArrayView` / `ArrayViewMut` (read-only respected).
#![cfg(feature = "ndarray")]

mod common;

use dlbind::__private::nd::ndarray::{ArrayD, Axis, IxDyn};
use dlbind::from_dlpack;
use dlbind::prelude::*;
use dlbind::stats::live_exports;

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Nd {
    #[dlpack(array)]
    a: ArrayD<f64>,
}

#[dlbind::pymethods]
impl Nd {}

#[pyclass(frozen)]
#[derive(DLPackExport)]
#[dlpack(readonly)]
struct NdRo {
    #[dlpack(array)]
    a: ArrayD<i32>,
}

#[dlbind::pymethods]
impl NdRo {}

fn sample() -> ArrayD<f64> {
    ArrayD::from_shape_vec(IxDyn(&[2, 3]), (0..6).map(f64::from).collect()).unwrap()
}

#[test]
fn owned_array_round_trip() {
    let _g = common::serial();
    Python::attach(|py| {
        let base = live_exports();
        let o = Bound::new(py, Nd { a: sample() }).unwrap().into_any();
        let t = from_dlpack(&o, None, None).unwrap();
        assert_eq!(t.shape(), &[2, 3]);
        assert_eq!(t.strides(), &[3, 1]);
        assert!(
            t.readonly(),
            "an ndarray field is lent through &: read-only"
        );
        assert_eq!(t.as_ndarray::<f64>().unwrap(), sample().view());
        drop(t);
        assert_eq!(live_exports(), base);
    });
}

#[test]
fn negative_and_transposed_strides() {
    let _g = common::serial();
    Python::attach(|py| {
        let mut a = sample();
        a.invert_axis(Axis(1));
        let expected = a.clone();
        let o = Bound::new(py, Nd { a }).unwrap().into_any();
        let mut t = from_dlpack(&o, None, None).unwrap();
        assert_eq!(t.strides(), &[3, -1]);
        assert_eq!(t.as_ndarray::<f64>().unwrap(), expected.view());
        assert_eq!(t.as_ndarray::<f64>().unwrap()[[0, 0]], 2.0);
        // An ndarray field is lent through `&`: exported read-only, never writable.
        // SAFETY: the test's only handle of this memory; the call is refused before any write.
        assert!(unsafe { t.as_ndarray_mut::<f64>() }.is_err());
        drop(t);
        let tr = Bound::new(
            py,
            Nd {
                a: sample().reversed_axes(),
            },
        )
        .unwrap()
        .into_any();
        let t = from_dlpack(&tr, None, None).unwrap();
        assert_eq!(t.strides(), &[1, 3]);
        assert_eq!(t.as_ndarray::<f64>().unwrap(), sample().t());
        assert!(t.as_ndarray::<f32>().is_err(), "dtype checked");
    });
}

#[test]
fn readonly_refuses_mutable_view() {
    let _g = common::serial();
    Python::attach(|py| {
        let a = ArrayD::from_shape_vec(IxDyn(&[3]), vec![1, 2, 3]).unwrap();
        let o = Bound::new(py, NdRo { a }).unwrap().into_any();
        let mut t = from_dlpack(&o, None, None).unwrap();
        assert!(t.readonly());
        assert_eq!(
            t.as_ndarray::<i32>()
                .unwrap()
                .iter()
                .copied()
                .collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        // SAFETY: the test's only handle of this memory while the result lives.
        assert!(unsafe { t.as_ndarray_mut::<i32>() }.is_err());
    });
}

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct NdHalf {
    #[dlpack(array)]
    a: ArrayD<half::f16>,
}

#[dlbind::pymethods]
impl NdHalf {}

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct VecBf16 {
    #[dlpack(data)]
    v: Vec<half::bf16>,
    #[dlpack(shape)]
    shape: Vec<usize>,
}

#[dlbind::pymethods]
impl VecBf16 {}

#[test]
fn half_element_types() {
    let _g = common::serial();
    Python::attach(|py| {
        let vals: Vec<half::f16> = [0.5f32, -1.0, 2.25]
            .iter()
            .map(|&x| half::f16::from_f32(x))
            .collect();
        let mut a = ArrayD::from_shape_vec(IxDyn(&[3]), vals.clone()).unwrap();
        a.invert_axis(Axis(0));
        let o = Bound::new(py, NdHalf { a }).unwrap().into_any();
        let t = from_dlpack(&o, None, None).unwrap();
        assert_eq!(t.dtype_info().map(|i| i.name), Some("float16"));
        let got: Vec<f32> = t
            .as_ndarray::<half::f16>()
            .unwrap()
            .iter()
            .map(|x| x.to_f32())
            .collect();
        assert_eq!(got, vec![2.25, -1.0, 0.5]);
        assert!(t.as_ndarray::<half::bf16>().is_err());

        let v: Vec<half::bf16> = [1.0f32, 3.0]
            .iter()
            .map(|&x| half::bf16::from_f32(x))
            .collect();
        let o = Bound::new(
            py,
            VecBf16 {
                v: v.clone(),
                shape: vec![2],
            },
        )
        .unwrap()
        .into_any();
        let t = from_dlpack(&o, None, None).unwrap();
        assert_eq!(t.dtype_info().map(|i| i.name), Some("bfloat16"));
        assert_eq!(t.as_slice::<half::bf16>().unwrap(), &v[..]);
    });
}
