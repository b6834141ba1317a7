//! Targets: the ratios a suite promises, checked against the figures of the same run.

use super::*;

/// How a [`Target`] compares its two figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bound {
    /// `num / den <= limit`.
    RatioAtMost(f64),
    /// `num / den >= limit`.
    RatioAtLeast(f64),
    /// `num - den <= limit`, in the figures' unit.
    ExcessAtMost(f64, &'static str),
    /// `num >= limit`, in the figures' unit: an absolute floor (`den` is shown beside it).
    AtLeast(f64, &'static str),
}

/// One of an issue's targets: figure `num` compared with figure `den` of the same run.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// What is compared, for the output.
    pub what: &'static str,
    /// (implementation, case) of the figure compared.
    pub num: (&'static str, &'static str),
    /// (implementation, case) of the figure it is compared with.
    pub den: (&'static str, &'static str),
    /// The comparison and its limit.
    pub bound: Bound,
}

/// The targets checked against `figures`, one line each: the value from the medians, and the
/// median of the values of each round (steadier when the machine's speed shifts between
/// rounds); the verdict goes by the latter when both exist.
pub fn render_targets(targets: &[Target], figures: &[Figure], out: &Collector) -> String {
    let mut s =
        String::from("targets (within this run: from the medians | median of per-round values):\n");
    for t in targets {
        let num = find(figures, t.num.0, t.num.1);
        let den = find(figures, t.den.0, t.den.1);
        let (of_medians, paired) = match t.bound {
            Bound::RatioAtMost(_) | Bound::RatioAtLeast(_) => (
                match (num, den) {
                    (Some(n), Some(d)) if d > 0.0 => Some(n / d),
                    _ => None,
                },
                out.paired_ratio(t.num, t.den),
            ),
            Bound::ExcessAtMost(..) => (
                num.zip(den).map(|(n, d)| n - d),
                out.paired_difference(t.num, t.den),
            ),
            // An absolute floor has no pairing: the median of `num` is the value, and the
            // second column shows `den` for scale.
            Bound::AtLeast(..) => (num, den),
        };
        let (show, limit_text, met): (fn(f64) -> String, String, bool) = match t.bound {
            Bound::RatioAtMost(l) => (
                |r| format!("{r:.3}"),
                format!("<= {l:.2}"),
                paired.or(of_medians).is_some_and(|r| r <= l),
            ),
            Bound::RatioAtLeast(l) => (
                |r| format!("{r:.3}"),
                format!(">= {l:.2}"),
                paired.or(of_medians).is_some_and(|r| r >= l),
            ),
            Bound::ExcessAtMost(l, unit) => (
                |d| format!("{d:+.0}"),
                format!("<= +{l:.0} {unit}"),
                paired.or(of_medians).is_some_and(|d| d <= l),
            ),
            Bound::AtLeast(l, unit) => (
                |v| format!("{v:.3e}"),
                format!(">= {l:.0} {unit}"),
                of_medians.is_some_and(|v| v >= l),
            ),
        };
        let show = |v: Option<f64>| v.map_or_else(|| "n/a".to_string(), show);
        let verdict = match (of_medians.or(paired), met) {
            (None, _) => "figure missing",
            (Some(_), true) => "met",
            (Some(_), false) => "MISSED",
        };
        s.push_str(&format!(
            "  {:<38} {:>6} | {:>6}  (target {limit_text})  {verdict}\n",
            t.what,
            show(of_medians),
            show(paired),
        ));
    }
    s
}

/// Looks up the value of `case` for `implementation`.
pub fn find(figures: &[Figure], implementation: &str, case: &str) -> Option<f64> {
    figures
        .iter()
        .find(|f| f.implementation == implementation && f.case == case)
        .and_then(|f| f.value)
}
