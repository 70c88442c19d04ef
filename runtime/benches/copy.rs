//! Criterion benchmarks for the host copy kernels (`dlbind::layout::copy_to_contiguous`) and allocator
//! (`dlbind::alloc`, public under `test-util`): 64 MiB contiguous allocate + copy, 4096×4096 f32 transpose into a fresh
//! buffer, and a row-wise strided copy. Throughput is reported as array bytes per second.
//!
//! Run: `cargo bench -p dlbind --bench copy`.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use dlbind::alloc::AlignedBuffer;
use dlbind::layout::{ElemSize, copy_to_contiguous};
use std::hint::black_box;

const N: usize = 4096;
const BYTES: usize = N * N * 4; // 64 MiB of f32

fn source() -> AlignedBuffer {
    let mut src = AlignedBuffer::uninit(BYTES).expect("allocate source");
    for (i, b) in src.as_mut_slice().iter_mut().enumerate() {
        *b = (i * 7 + 3) as u8;
    }
    src
}

/// Allocate a destination (`AlignedBuffer::uninit`, i.e. huge pages and the reuse pool as in
/// `__dlpack__(copy=True)`) and copy `shape`/`strides` (elements) of `src` into it.
fn alloc_and_copy(
    src: &AlignedBuffer,
    offset_elems: usize,
    shape: &[i64],
    strides: &[i64],
    out_bytes: usize,
) -> AlignedBuffer {
    let dst = AlignedBuffer::uninit(out_bytes).expect("allocate destination");
    // SAFETY: every (shape, strides) used below addresses elements inside `src` (64 MiB of
    // f32 starting at `offset_elems`), `dst` holds `out_bytes` bytes, and they do not overlap.
    unsafe {
        copy_to_contiguous(
            src.as_ptr().add(offset_elems * 4),
            shape,
            strides,
            ElemSize::Bytes(4),
            dst.as_mut_ptr(),
            out_bytes,
        )
        .expect("copy");
    }
    dst
}

fn bench_copy(c: &mut Criterion) {
    let src = source();
    let n = N as i64;
    let mut g = c.benchmark_group("copy");
    g.sample_size(20);

    g.throughput(Throughput::Bytes(BYTES as u64));
    g.bench_function(BenchmarkId::new("contiguous_alloc_copy", "64MiB"), |b| {
        b.iter(|| black_box(alloc_and_copy(&src, 0, &[n, n], &[n, 1], BYTES)))
    });
    g.bench_function(
        BenchmarkId::new("memcpy_preallocated_1thread", "64MiB"),
        |b| {
            let mut dst = AlignedBuffer::zeroed(BYTES).expect("allocate");
            dst.as_mut_slice().fill(1);
            b.iter(|| {
                dst.as_mut_slice().copy_from_slice(src.as_slice());
                black_box(dst.as_ptr());
            })
        },
    );
    g.bench_function(
        BenchmarkId::new("transpose_f32_alloc_copy", "4096x4096"),
        |b| b.iter(|| black_box(alloc_and_copy(&src, 0, &[n, n], &[1, n], BYTES))),
    );

    // Row-wise: the left half of every row (2048 of 4096 columns), 4096 rows → 32 MiB.
    let half = BYTES / 2;
    g.throughput(Throughput::Bytes(half as u64));
    g.bench_function(
        BenchmarkId::new("rows_alloc_copy", "4096x2048_of_4096x4096"),
        |b| b.iter(|| black_box(alloc_and_copy(&src, 0, &[n, n / 2], &[n, 1], half))),
    );
    // Generic: reversed last axis (a[:, ::-1]), 64 MiB.
    g.throughput(Throughput::Bytes(BYTES as u64));
    g.bench_function(
        BenchmarkId::new("reversed_rows_alloc_copy", "4096x4096"),
        |b| b.iter(|| black_box(alloc_and_copy(&src, N - 1, &[n, n], &[n, -1], BYTES))),
    );
    g.finish();
}

criterion_group!(benches, bench_copy);
criterion_main!(benches);
