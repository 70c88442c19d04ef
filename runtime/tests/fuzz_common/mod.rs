//! Shared harness for the bounded fuzz tests (`fuzz_copy`, `fuzz_dltensor`).
//!
//! `cargo fuzz` needs nightly; these run on stable as plain `#[test]`s. Each iteration gets its
//! own bytes from a splitmix64 stream keyed by `(seed, iteration)` and decodes them with
//! [`arbitrary::Unstructured`], so one `(seed, iteration)` pair reproduces one input exactly.
//!
//! Environment:
//! - `DLBIND_FUZZ_SEED=S` (decimal or `0x…`): the run's seed (default: a fixed seed; `random` seeds from the clock);
//! - `DLBIND_FUZZ_ITERS=N`: run exactly `N` iterations (default: time-bounded, see [`Target`]);
//! - `DLBIND_FUZZ_START=I`: begin at iteration `I` (with `DLBIND_FUZZ_ITERS=1`: replay one input);
//! - `DLBIND_FUZZ_SECS=F`: the time budget per target when `DLBIND_FUZZ_ITERS` is unset.
//!
//! A failing iteration (an `Err` from the property or a panic inside it) fails the test with the
//! seed, the iteration, the command line that replays it and the decoded input.

#![allow(dead_code)]

use std::fmt::Write as _;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use arbitrary::{Result as ArbResult, Unstructured};

/// splitmix64 (Steele, Lea, Flood 2014): tiny, fast, and good enough to feed `Unstructured`.
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    if v == "random" {
        return None; // DLBIND_FUZZ_SEED=random: the caller seeds from the clock
    }
    let v = v.trim().replace('_', "");
    let parsed = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|e| panic!("{name}={v:?}: {e}")))
}

/// One fuzz target: a name, a default time budget, a minimum iteration count for the
/// time-bounded mode and the number of random bytes each input is decoded from.
pub struct Target {
    pub name: &'static str,
    pub budget: Duration,
    pub min_iters: u64,
    pub input_bytes: usize,
}

/// What [`Target::run`] reports back.
#[derive(Debug, Clone, Copy)]
pub struct RunStats {
    pub seed: u64,
    pub iters: u64,
    pub elapsed: Duration,
    /// Whether the iteration count was chosen by `DLBIND_FUZZ_ITERS` (not the time budget).
    pub exact: bool,
}

impl Target {
    pub const fn new(name: &'static str) -> Self {
        Target {
            name,
            budget: Duration::from_secs(3),
            min_iters: 200,
            input_bytes: 1024,
        }
    }

    pub const fn min_iters(mut self, n: u64) -> Self {
        self.min_iters = n;
        self
    }

    pub const fn input_bytes(mut self, n: usize) -> Self {
        self.input_bytes = n;
        self
    }

    /// Runs `property` once per iteration. The property decodes its input from the
    /// `Unstructured`, writes a readable description of it into the `String` (printed on
    /// failure, so write it before doing anything that can fail) and returns `Err(why)` when a
    /// property does not hold. Running out of bytes is not a failure: `Unstructured` then yields
    /// zeros / minimal values, which are valid inputs too.
    pub fn run<F>(&self, mut property: F) -> RunStats
    where
        F: FnMut(&mut Unstructured<'_>, &mut String) -> Result<(), String>,
    {
        let seed = env_u64("DLBIND_FUZZ_SEED").unwrap_or_else(|| {
            // Default: a fixed seed, so the test command is deterministic; `DLBIND_FUZZ_SEED=random`
            // explores new inputs (the seed is printed either way).
            if std::env::var("DLBIND_FUZZ_SEED").as_deref() != Ok("random") {
                return 0x00d1_b1d0_f022_5eed;
            }
            let t = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            let mut m = SplitMix64(t.as_nanos() as u64 ^ ((std::process::id() as u64) << 32));
            m.next_u64()
        });
        let exact = env_u64("DLBIND_FUZZ_ITERS");
        let start = env_u64("DLBIND_FUZZ_START").unwrap_or(0);
        let budget = match std::env::var("DLBIND_FUZZ_SECS") {
            Ok(s) => Duration::from_secs_f64(s.trim().parse().expect("DLBIND_FUZZ_SECS: seconds")),
            Err(_) => self.budget,
        };
        let mut bytes = vec![0u8; self.input_bytes];
        let mut desc = String::new();
        let t0 = Instant::now();
        let mut done = 0u64;
        loop {
            match exact {
                Some(n) if done >= n => break,
                None if done >= self.min_iters && t0.elapsed() >= budget => break,
                _ => {}
            }
            let iter = start + done;
            // Per-iteration stream: (seed, iter) alone determines the input.
            let mut rng = SplitMix64(seed ^ iter.wrapping_mul(0xD1B5_4A32_D192_ED69));
            rng.next_u64();
            rng.fill(&mut bytes);
            desc.clear();
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                let mut u = Unstructured::new(&bytes);
                property(&mut u, &mut desc)
            }));
            let why = match outcome {
                Ok(Ok(())) => None,
                Ok(Err(why)) => Some(why),
                Err(payload) => Some(format!("panicked: {}", panic_message(&*payload))),
            };
            if let Some(why) = why {
                let mut msg = String::new();
                let _ = writeln!(
                    msg,
                    "fuzz target `{}` failed at iteration {iter} (seed {seed:#x})",
                    self.name
                );
                let _ = writeln!(msg, "  why:   {why}");
                let _ = writeln!(msg, "  input: {desc}");
                let _ = writeln!(
                    msg,
                    "  replay: DLBIND_FUZZ_SEED={seed:#x} DLBIND_FUZZ_START={iter} DLBIND_FUZZ_ITERS=1 \
                     cargo test --release -p dlbind --test {} {} -- --nocapture",
                    env!("CARGO_CRATE_NAME"),
                    self.name
                );
                panic!("{msg}");
            }
            done += 1;
        }
        let elapsed = t0.elapsed();
        let secs = elapsed.as_secs_f64().max(1e-9);
        println!(
            "fuzz {}: seed {seed:#x}, {done} iterations in {secs:.2} s ({:.0} iterations/s){}",
            self.name,
            done as f64 / secs,
            if start > 0 {
                format!(", starting at {start}")
            } else {
                String::new()
            }
        );
        RunStats {
            seed,
            iters: done,
            elapsed,
            exact: exact.is_some(),
        }
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "<non-string panic payload>".to_string()
    }
}

/// Picks one of `choices` (the first when the bytes run out).
pub fn pick<T: Copy>(u: &mut Unstructured<'_>, choices: &[T]) -> ArbResult<T> {
    Ok(*u.choose(choices)?)
}

/// `true` with probability about `num / den`.
pub fn chance(u: &mut Unstructured<'_>, num: u8, den: u8) -> ArbResult<bool> {
    u.ratio(num, den)
}

/// A signed 64-bit value from a mix meant to hit edges: small values, 0/±1, `i64::MIN/MAX`,
/// powers of two (and their neighbours) up to the top bit, and uniform values.
pub fn edgy_i64(u: &mut Unstructured<'_>) -> ArbResult<i64> {
    Ok(match u.int_in_range(0u8..=9)? {
        0 | 1 => u.int_in_range(-8i64..=8)?,
        2 => pick(
            u,
            &[0, 1, -1, i64::MIN, i64::MAX, i64::MIN + 1, i64::MAX - 1],
        )?,
        3 | 4 => {
            let k = u.int_in_range(0u32..=63)?;
            let p = (1u64 << k) as i64; // k = 63: i64::MIN
            let v = p.wrapping_add(u.int_in_range(-1i64..=1)?);
            if u.arbitrary()? { v } else { v.wrapping_neg() }
        }
        5 => {
            // Near isize::MAX / small factor: the interesting overflow boundary for byte sizes.
            let div = pick(u, &[1i64, 2, 3, 4, 8, 16])?;
            let v = (i64::MAX / div).wrapping_add(u.int_in_range(-2i64..=2)?);
            if u.arbitrary()? { v } else { v.wrapping_neg() }
        }
        6 => u.int_in_range(0i64..=100_000)?,
        _ => u.arbitrary()?,
    })
}
