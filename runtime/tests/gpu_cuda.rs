//! CUDA integration tests (feature `cuda`). Without a driver they check that every entry
//! point reports `DeviceUnavailable` (BufferError) without panicking, print why the GPU part is
//! skipped, and pass. With a GPU they exercise allocation, H2D/D2H/D2D copies, events and
//! stream waits, the NVRTC strided-copy kernel and the export executor.
#![cfg(feature = "cuda")]

use std::sync::Arc;

use dlbind::Device;
use dlbind::gpu::cuda::CudaRuntime;
use dlbind::gpu::kernels::reference_strided_copy;
use dlbind::gpu::{
    AllocKind, CopyKind, DeviceAllocation, DeviceRuntime, StreamHandle, TensorLayout, TransferKind,
    TransferRequest, default_runtime, execute_transfer, plan_transfer, zeros_with,
};
use dlbind::spec::errors::{FailureKind, PyExceptionKind};

/// The runtime, or `None` after printing why the GPU tests are skipped.
fn runtime(test: &str) -> Option<Arc<CudaRuntime>> {
    match CudaRuntime::shared() {
        Ok(rt) => Some(rt),
        Err(e) => {
            eprintln!("SKIPPED {test}: no usable CUDA driver ({})", e.message());
            None
        }
    }
}

fn upload(rt: &CudaRuntime, dev: Device, data: &[u8]) -> DeviceAllocation {
    let a = rt.alloc(AllocKind::Device, dev, data.len()).expect("alloc");
    rt.copy(
        dev,
        CopyKind::H2D,
        a.ptr,
        data.as_ptr() as u64,
        data.len(),
        StreamHandle::LEGACY,
    )
    .expect("H2D");
    rt.synchronize_stream(dev, StreamHandle::LEGACY)
        .expect("sync");
    a
}

fn download(rt: &CudaRuntime, dev: Device, ptr: u64, bytes: usize) -> Vec<u8> {
    let mut out = vec![0u8; bytes];
    rt.copy(
        dev,
        CopyKind::D2H,
        out.as_mut_ptr() as u64,
        ptr,
        bytes,
        StreamHandle::LEGACY,
    )
    .expect("D2H");
    rt.synchronize_stream(dev, StreamHandle::LEGACY)
        .expect("sync");
    out
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 + 7) as u8).collect()
}

#[test]
fn without_a_usable_driver_everything_is_device_unavailable() {
    let e = match CudaRuntime::try_new() {
        Ok(rt) => {
            eprintln!(
                "SKIPPED without_a_usable_driver_everything_is_device_unavailable: CUDA works ({} GPU(s))",
                rt.device_count()
            );
            return;
        }
        Err(e) => e,
    };
    // no libcuda, a stub libcuda, no GPU: all the same clear error, never a panic
    assert_eq!(e.kind(), FailureKind::DeviceUnavailable, "{}", e.message());
    assert_eq!(e.kind().exception(), PyExceptionKind::BufferError);
    assert!(e.message().contains("CUDA"), "{}", e.message());
    let e = default_runtime().unwrap_err();
    assert_eq!(e.kind(), FailureKind::DeviceUnavailable);
    assert_eq!(
        CudaRuntime::shared().unwrap_err().kind(),
        FailureKind::DeviceUnavailable
    );
    // the consumer helper still answers (defaults)
    assert_eq!(dlbind::gpu::consumer_stream_for(Device::cuda(0)), Some(1));
    eprintln!(
        "CUDA unusable on this machine (driver library present: {}): GPU integration tests skipped, error path checked: {}",
        CudaRuntime::driver_present(),
        e.message()
    );
}

#[test]
fn alloc_h2d_d2h_round_trip() {
    let Some(rt) = runtime("alloc_h2d_d2h_round_trip") else {
        return;
    };
    let dev = Device::cuda(0);
    for n in [0usize, 1, 4097, 1 << 20] {
        let data = pattern(n);
        let a = upload(&rt, dev, &data);
        assert_ne!(a.ptr, 0);
        assert_eq!(a.dl_device(), dev);
        // D2D then back
        let b = rt.alloc(AllocKind::Device, dev, n).unwrap();
        rt.copy(
            dev,
            CopyKind::D2D,
            b.ptr,
            a.ptr,
            n,
            StreamHandle::PER_THREAD,
        )
        .unwrap();
        rt.synchronize_stream(dev, StreamHandle::PER_THREAD)
            .unwrap();
        assert_eq!(download(&rt, dev, b.ptr, n), data);
        rt.free(&a).unwrap();
        rt.free(&b).unwrap();
    }
}

#[test]
fn pinned_and_managed_zeros_are_host_readable() {
    let Some(rt) = runtime("pinned_and_managed_zeros_are_host_readable") else {
        return;
    };
    let rt_dyn: Arc<dyn DeviceRuntime> = rt.clone();
    for dev in [Device::CUDA_HOST, Device::CUDA_MANAGED, Device::cuda(0)] {
        let z = zeros_with(&rt_dyn, dev, 1000).unwrap();
        assert_eq!(z.dl_device(), dev);
        let bytes = if dev.is_host_accessible() {
            // SAFETY: pinned / managed memory of 1000 bytes, no pending device work (zeros
            // synchronised its stream).
            unsafe { std::slice::from_raw_parts(z.ptr() as usize as *const u8, 1000) }.to_vec()
        } else {
            download(&rt, Device::cuda(0), z.ptr(), 1000)
        };
        assert!(bytes.iter().all(|&b| b == 0), "{dev}");
    }
    let e = zeros_with(&rt_dyn, Device::CPU, 8).unwrap_err();
    assert_eq!(e.kind(), FailureKind::UnsupportedDevice);
    let e = rt
        .alloc(AllocKind::Device, Device::cuda(rt.device_count()), 8)
        .unwrap_err();
    assert_eq!(e.kind(), FailureKind::UnsupportedDevice);
}

#[test]
fn events_order_two_streams() {
    let Some(rt) = runtime("events_order_two_streams") else {
        return;
    };
    let dev = Device::cuda(0);
    let a = rt.create_stream(dev).unwrap();
    let b = rt.create_stream(dev).unwrap();
    let n = 8 << 20;
    let data = pattern(n);
    let src = upload(&rt, dev, &data);
    let mid = rt.alloc(AllocKind::Device, dev, n).unwrap();
    let dst = rt.alloc(AllocKind::Device, dev, n).unwrap();
    // producer work on A, consumer work on B ordered by an event only
    rt.copy(dev, CopyKind::D2D, mid.ptr, src.ptr, n, a).unwrap();
    let ev = rt.record_event(dev, a).unwrap();
    rt.wait_event(dev, b, ev).unwrap();
    rt.destroy_event(dev, ev).unwrap();
    rt.copy(dev, CopyKind::D2D, dst.ptr, mid.ptr, n, b).unwrap();
    rt.synchronize_stream(dev, b).unwrap();
    assert_eq!(download(&rt, dev, dst.ptr, n), data);
    for x in [src, mid, dst] {
        rt.free(&x).unwrap();
    }
    rt.destroy_stream(dev, a).unwrap();
    rt.destroy_stream(dev, b).unwrap();
    // special handles work too
    for s in [StreamHandle::LEGACY, StreamHandle::PER_THREAD] {
        let ev = rt.record_event(dev, s).unwrap();
        rt.wait_event(dev, StreamHandle::LEGACY, ev).unwrap();
        rt.destroy_event(dev, ev).unwrap();
    }
}

#[test]
fn strided_kernel_matches_reference() {
    let Some(rt) = runtime("strided_kernel_matches_reference") else {
        return;
    };
    let dev = Device::cuda(0);
    let pool = pattern(1 << 16);
    let src = upload(&rt, dev, &pool);
    // (shape, strides in elements, elem bytes, byte offset)
    let cases: &[(&[i64], &[i64], usize, usize)] = &[
        (&[64, 48], &[1, 64], 4, 0),                         // transpose f32
        (&[7, 5, 3], &[1, 7, 35], 2, 2),                     // reversed axes, f16, offset
        (&[6, 4], &[-4, 1], 8, 8 * 20),                      // negative outer stride
        (&[5, 9], &[0, 1], 16, 32),                          // broadcast, complex128
        (&[3, 4, 5], &[20, 5, 1], 4, 0),                     // contiguous → memcpy path
        (&[9, 9], &[1, 9], 8, 3),                            // misaligned base → byte units
        (&[2, 3, 2, 3, 2, 3], &[1, 2, 6, 12, 36, 72], 1, 0), // rank 6 permutation
        (&[10, 10], &[20, 2], 12, 0),                        // width 12
        (&[0, 5], &[1, 1], 4, 0),                            // empty
    ];
    let compiled_before = rt.compiled_kernels();
    for &(shape, strides, w, off) in cases {
        let n: usize = shape.iter().product::<i64>() as usize;
        let mut expect = vec![0u8; n * w];
        reference_strided_copy(&pool, off, shape, strides, w, &mut expect);
        let dst = rt.alloc(AllocKind::Device, dev, n * w).unwrap();
        let s = rt.create_stream(dev).unwrap();
        rt.strided_copy_to_contiguous(dev, src.ptr + off as u64, shape, strides, w, dst.ptr, s)
            .unwrap();
        rt.synchronize_stream(dev, s).unwrap();
        rt.destroy_stream(dev, s).unwrap();
        assert_eq!(
            download(&rt, dev, dst.ptr, n * w),
            expect,
            "shape {shape:?} strides {strides:?} w {w}"
        );
        rt.free(&dst).unwrap();
    }
    // cached: running the same cases again compiles nothing new
    let compiled = rt.compiled_kernels();
    assert!(compiled > compiled_before);
    let dst = rt.alloc(AllocKind::Device, dev, 64 * 48 * 4).unwrap();
    rt.strided_copy_to_contiguous(
        dev,
        src.ptr,
        &[64, 48],
        &[1, 64],
        4,
        dst.ptr,
        StreamHandle::LEGACY,
    )
    .unwrap();
    rt.synchronize_stream(dev, StreamHandle::LEGACY).unwrap();
    assert_eq!(rt.compiled_kernels(), compiled);
    rt.free(&dst).unwrap();
    rt.free(&src).unwrap();
}

#[test]
fn export_plans_run_on_the_gpu() {
    let Some(rt) = runtime("export_plans_run_on_the_gpu") else {
        return;
    };
    let rt_dyn: Arc<dyn DeviceRuntime> = rt.clone();
    let dev = Device::cuda(0);
    let pool = pattern(4 * 32 * 16);
    let src = upload(&rt, dev, &pool);
    let producer = rt.create_stream(dev).unwrap();
    let consumer = rt.create_stream(dev).unwrap();
    let shape = [16i64, 32];
    let t_strides = [1i64, 16];
    for contiguous in [true, false] {
        let strides: Vec<i64> = if contiguous {
            vec![32, 1]
        } else {
            t_strides.to_vec()
        };
        let layout = TensorLayout {
            shape: &shape,
            strides: Some(&strides),
            elem_bytes: 4,
        };
        let mut expect = vec![0u8; layout.nbytes()];
        reference_strided_copy(&pool, 0, &shape, &strides, 4, &mut expect);

        // dl_device=(kDLCPU, 0), stream=None
        let req = TransferRequest {
            device: dev,
            producer_stream: Some(producer),
            dl_device: Some(Device::CPU),
            stream: None,
            copy: None,
            contiguous,
            bytes: layout.nbytes(),
        };
        let plan = plan_transfer(&req).unwrap();
        assert_eq!(plan.kind, TransferKind::DeviceToHost);
        let out = execute_transfer(&rt_dyn, &plan, src.ptr, &layout).unwrap();
        let host = out.allocation.as_ref().unwrap();
        assert_eq!(out.target, Device::CPU);
        // SAFETY: pinned host buffer of nbytes, its D2H copy synchronised by the plan.
        let got = unsafe {
            std::slice::from_raw_parts(host.ptr() as usize as *const u8, layout.nbytes())
        };
        assert_eq!(got, &expect[..]);

        // copy=True on the same device, consumer stream
        let req = TransferRequest {
            dl_device: None,
            stream: Some(consumer.0 as i64),
            copy: Some(true),
            ..req
        };
        let plan = plan_transfer(&req).unwrap();
        assert_eq!(plan.kind, TransferKind::SameDevice);
        let out = execute_transfer(&rt_dyn, &plan, src.ptr, &layout).unwrap();
        rt.synchronize_stream(dev, consumer).unwrap();
        assert_eq!(
            download(
                &rt,
                dev,
                out.allocation.as_ref().unwrap().ptr(),
                layout.nbytes()
            ),
            expect
        );
    }
    rt.destroy_stream(dev, producer).unwrap();
    rt.destroy_stream(dev, consumer).unwrap();
    rt.free(&src).unwrap();
}
