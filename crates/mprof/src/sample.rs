//! Sampling by bytes (`mprof --sample-bytes N`): the library's algorithm
//! (c/mprof.c's "sampling") in Rust, so that a test can drive it on a
//! seeded synthetic stream, and the reports' error bound.
//!
//! Each thread counts down a number of bytes drawn from an exponential
//! distribution of mean N (xorshift64, seeded as the library seeds a
//! thread); the allocation that takes the countdown to 0 or below is
//! sampled and a fresh countdown starts after it. An allocation of `s`
//! bytes is then sampled with probability `p = 1 - e^(-s/N)` and stands
//! for `s/p` bytes and `1/p` objects ([`weight`], Go's heap profiler's
//! unbiased weights). The variance of a byte estimate is
//! `Σ w(w - s)` over its sampled allocations; since `w - s = s/(e^(s/N) - 1) ≤ N`,
//! it is at most `N · Σ w`: the standard error of an estimate of `B`
//! bytes is at most `√(N·B)` ([`std_error`]).

/// The environment variable that turns sampling on: its mean, in bytes.
pub const SAMPLE_BYTES_ENV: &str = "PROFDEV_MPROF_SAMPLE_BYTES";
/// The environment variable that fixes the generators' seed (tests).
pub const SAMPLE_SEED_ENV: &str = "PROFDEV_MPROF_SAMPLE_SEED";
/// Objects are counted in the library in units of `1/2^OBJ_SHIFT`.
pub const OBJ_SHIFT: u32 = 8;

/// A count of objects kept in units of `1/2^shift`, rounded to whole ones.
pub fn objects(v: u64, shift: u32) -> u64 {
    if shift == 0 || shift > 32 {
        return v;
    }
    v.saturating_add(1 << (shift - 1)) >> shift
}

/// What a sampled allocation of `s` bytes stands for at mean `n`: bytes
/// `s/(1-e^(-s/n))` and objects `1/(1-e^(-s/n))`.
pub fn weight(s: u64, n: u64) -> (f64, f64) {
    let p = (-(-(s as f64) / n as f64).exp_m1()).max(f64::powi(2.0, -60));
    (s as f64 / p, 1.0 / p)
}

/// The library's rounding of [`weight`]: whole bytes, objects in units of
/// `1/2^OBJ_SHIFT`.
pub fn charged(s: u64, n: u64) -> (u64, u64) {
    let (w, k) = weight(s, n);
    (
        (w + 0.5) as u64,
        (k * f64::from(1u32 << OBJ_SHIFT) + 0.5) as u64,
    )
}

/// At most the standard error of an estimate of `bytes` bytes sampled
/// every `n` bytes on average: `√(n·bytes)`.
pub fn std_error(bytes: u64, n: u64) -> f64 {
    (n as f64 * bytes as f64).sqrt()
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^ (x >> 33)
}

/// One thread's sampler, as the library's.
#[derive(Debug, Clone)]
pub struct Sampler {
    n: u64,
    rng: u64,
    left: i64,
}

impl Sampler {
    /// The sampler of the `thread`-th thread (from 0) with the seed of
    /// [`SAMPLE_SEED_ENV`], at mean `n` bytes.
    pub fn new(n: u64, seed: u64, thread: u64) -> Sampler {
        let mut x = seed.wrapping_add(thread.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        for r in 0..4 {
            x = mix(x.wrapping_add(r));
        }
        let mut s = Sampler {
            n,
            rng: x.max(1),
            left: 0,
        };
        s.left = s.draw();
        s
    }

    fn draw(&mut self) -> i64 {
        let mut v = self.rng;
        v ^= v << 13;
        v ^= v >> 7;
        v ^= v << 17;
        self.rng = v;
        let u = ((v >> 11) as f64 + 0.5) * f64::powi(2.0, -53);
        let d = -u.ln() * self.n as f64;
        if d < 1.0 {
            1
        } else if d > f64::powi(2.0, 62) {
            1 << 62
        } else {
            d as i64 + 1
        }
    }

    /// Whether an allocation of `s` bytes is sampled.
    pub fn hit(&mut self, s: u64) -> bool {
        self.left -= s as i64;
        if self.left > 0 {
            return false;
        }
        self.left = self.draw();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weight_is_gos() {
        let n = 524_288;
        for s in [1u64, 16, 1000, 524_288, 10 << 20] {
            let (w, k) = weight(s, n);
            let p = 1.0 - (-(s as f64) / n as f64).exp();
            assert!((w - s as f64 / p).abs() / w < 1e-9, "{s}");
            assert!((k - 1.0 / p).abs() / k < 1e-9, "{s}");
        }
        // Small blocks stand for about N bytes, huge ones for themselves.
        assert!((weight(16, n).0 - n as f64).abs() < 16.0);
        assert!((weight(1 << 40, n).0 - (1u64 << 40) as f64).abs() < 1.0);
        assert_eq!(charged(1 << 30, n), (1 << 30, 256));
        assert_eq!(objects(256 * 3 + 100, OBJ_SHIFT), 3);
        assert_eq!(objects(256 * 3 + 128, OBJ_SHIFT), 4);
        assert_eq!(objects(7, 0), 7);
    }

    /// A seeded synthetic stream of mixed sizes: the estimate of bytes and
    /// of objects, per size class and in total, is within a few percent of
    /// the truth, and within 4 standard errors by the stated bound.
    #[test]
    fn synthetic_stream_estimates() {
        let n = 524_288u64;
        let mut s = Sampler::new(n, 42, 0);
        let mut rng = 7u64;
        // Sizes: many small, some medium, a few beyond N.
        let classes = [24u64, 200, 4096, 100_000, 2 << 20];
        let mut truth = [(0u64, 0u64); 5];
        let mut est = [(0u64, 0u64); 5];
        let mut samples = 0;
        for _ in 0..2_000_000 {
            rng = mix(rng.wrapping_add(1));
            let c = match rng % 1000 {
                0..=699 => 0,
                700..=949 => 1,
                950..=995 => 2,
                996..=998 => 3,
                _ => 4,
            };
            let size = classes[c] + (rng >> 32) % 8;
            truth[c].0 += size;
            truth[c].1 += 1;
            if s.hit(size) {
                samples += 1;
                let (w, k) = charged(size, n);
                est[c].0 += w;
                est[c].1 += k;
            }
        }
        let total: u64 = truth.iter().map(|t| t.0).sum();
        let total_est: u64 = est.iter().map(|e| e.0).sum();
        let rel = (total_est as f64 - total as f64).abs() / total as f64;
        assert!(
            rel < 0.03,
            "total {total_est} against {total} ({samples} samples)"
        );
        assert!((total_est as f64 - total as f64).abs() < 4.0 * std_error(total_est, n));
        for c in 0..5 {
            let (b, o) = (est[c].0 as f64, objects(est[c].1, OBJ_SHIFT) as f64);
            let d = (b - truth[c].0 as f64).abs();
            assert!(
                d < 4.0 * std_error(est[c].0, n) + 1.0,
                "class {c}: {b} against {:?}",
                truth[c]
            );
            // Objects: bytes over the class's mean size (within 8 bytes).
            assert!(
                (o * classes[c] as f64 - b).abs() / b < 0.01 + 8.0 / classes[c] as f64,
                "{c}"
            );
        }
        // Blocks beyond N are almost all sampled, and stand for themselves.
        assert!((est[4].0 as f64 - truth[4].0 as f64).abs() / (truth[4].0 as f64) < 0.03);
    }

    #[test]
    fn seeded_is_deterministic() {
        let run = |seed| {
            let mut s = Sampler::new(4096, seed, 0);
            (0..10_000).filter(|i| s.hit(16 + i % 64)).count()
        };
        assert_eq!(run(3), run(3));
        assert_ne!(Sampler::new(4096, 3, 0).rng, Sampler::new(4096, 3, 1).rng);
    }
}
