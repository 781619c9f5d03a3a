//! Generalized Pareto inversion, as db_bench's mixgraph draws value sizes
//! and scan lengths.

/// Inverse CDF of the generalized Pareto distribution at `u` in (0, 1]:
/// `theta + sigma * (u^-k - 1) / k` (or `theta - sigma * ln u` when `k = 0`),
/// rounded up.
pub fn pareto_cdf_inversion(u: f64, theta: f64, k: f64, sigma: f64) -> i64 {
    let u = u.max(f64::MIN_POSITIVE);
    let ret = if k == 0.0 {
        theta - sigma * u.ln()
    } else {
        theta + sigma * (u.powf(-k) - 1.0) / k
    };
    let r = ret.ceil();
    if r >= i64::MAX as f64 {
        i64::MAX
    } else {
        r as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_closed_form() {
        assert_eq!(pareto_cdf_inversion(1.0, 0.0, 0.923, 226.409), 0);
        let v = pareto_cdf_inversion(0.5, 0.0, 0.923, 226.409);
        let expect = (226.409 * (0.5f64.powf(-0.923) - 1.0) / 0.923).ceil() as i64;
        assert_eq!(v, expect);
        assert_eq!(pareto_cdf_inversion(0.5, 0.0, 0.0, 10.0), 7);
    }
}
