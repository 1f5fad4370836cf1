//! How many tokens cover a user's next lease: a quantile of a Poisson count.

/// The least `k` such that a Poisson count of mean `mean` is at most `k` with probability
/// `p` or more. Exact (summing the distribution) up to a mean of 500; beyond that, the
/// Cornish-Fisher expansion to the skewness term (`λ + z√λ + (z² - 1)/6`), within a token
/// there.
pub fn poisson_quantile(mean: f64, p: f64) -> u64 {
    if mean.is_nan() || mean <= 0.0 || !mean.is_finite() {
        return 0;
    }
    let p = p.clamp(0.0, 1.0 - 1e-12);
    if mean > 500.0 {
        let z = normal_quantile(p);
        return (mean + z * mean.sqrt() + (z * z - 1.0) / 6.0)
            .ceil()
            .max(0.0) as u64;
    }
    let mut pmf = (-mean).exp();
    let mut cdf = pmf;
    let mut k = 0u64;
    while cdf < p && k < 100_000 {
        k += 1;
        pmf *= mean / k as f64;
        cdf += pmf;
    }
    k
}

/// The standard normal quantile, by bisection on `erf` (used only past a mean of 500).
fn normal_quantile(p: f64) -> f64 {
    let cdf = |z: f64| 0.5 * (1.0 + erf(z / std::f64::consts::SQRT_2));
    let (mut lo, mut hi) = (-10.0, 10.0);
    for _ in 0..80 {
        let mid = (lo + hi) / 2.0;
        if cdf(mid) < p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

/// The error function, to 1.5e-7 (Abramowitz and Stegun 7.1.26).
fn erf(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let y = 1.0
        - (((((1.061_405_429 * t - 1.453_152_027) * t) + 1.421_413_741) * t - 0.284_496_736) * t
            + 0.254_829_592)
            * t
            * (-x * x).exp();
    if x >= 0.0 { y } else { -y }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_of_small_and_large_means() {
        assert_eq!(poisson_quantile(0.0, 0.999), 0);
        // P(X = 0) at mean 0.001 is 0.999: nothing needed.
        assert_eq!(poisson_quantile(0.001, 0.999), 0);
        assert_eq!(poisson_quantile(0.01, 0.999), 1);
        // Mean 2: P(X <= 7) = 0.99890, P(X <= 8) = 0.99976.
        assert_eq!(poisson_quantile(2.0, 0.999), 8);
        // Mean 100: about 100 + 3.09 * 10.
        let q = poisson_quantile(100.0, 0.999);
        assert!((131..=133).contains(&q), "{q}");
        // The normal approximation joins the exact sums.
        let exact = poisson_quantile(500.0, 0.999);
        let approx = poisson_quantile(500.1, 0.999);
        assert!(approx.abs_diff(exact) <= 1, "{exact} {approx}");
        assert_eq!(poisson_quantile(f64::NAN, 0.999), 0);
    }
}
