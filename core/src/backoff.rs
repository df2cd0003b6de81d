//! Pure backoff and jitter arithmetic.
//!
//! No state and no randomness of its own: the jitter functions take the raw
//! `u64` drawn by the machine. Mapping `x` onto a range uses a widening
//! multiply (`(d * x) >> 64`), which is exact, unbiased for the purpose and
//! needs no floating point and no `rand` crate.

use std::time::Duration;

use crate::policy::{Backoff, Jitter};

/// The un-jittered delay before retry number `n + 1` of a class, where `n` is
/// the number of retries that class has already used: `base * multiplier^n`,
/// capped at `cap`. Saturates instead of overflowing.
///
/// ```
/// use polite_core::backoff::exponential;
/// use polite_core::policy::Backoff;
/// use std::time::Duration;
/// let b = Backoff::default(); // 250 ms doubling, cap 4 s
/// let ms = |n| exponential(&b, n).as_millis();
/// assert_eq!([ms(0), ms(1), ms(2), ms(3), ms(4), ms(5), ms(60)], [250, 500, 1000, 2000, 4000, 4000, 4000]);
/// ```
#[must_use]
#[inline]
pub fn exponential(backoff: &Backoff, n: u32) -> Duration {
    let factor = backoff.multiplier.saturating_pow(n);
    backoff.base.saturating_mul(factor).min(backoff.cap)
}

/// Applies `jitter` to `delay`, with `x` a uniform random `u64` standing for
/// `u = x / 2^64` in `[0, 1)`.
///
/// ```
/// use polite_core::backoff::jitter;
/// use polite_core::policy::Jitter;
/// use std::time::Duration;
/// let d = Duration::from_secs(2);
/// assert_eq!(jitter(d, Jitter::None, 12345), d);
/// assert_eq!(jitter(d, Jitter::Full, 0), Duration::ZERO);
/// assert_eq!(jitter(d, Jitter::Equal, 0), Duration::from_secs(1));
/// assert_eq!(jitter(d, Jitter::Equal, 1 << 63), Duration::from_millis(1500));
/// assert_eq!(jitter(d, Jitter::Percent(20), 0), Duration::from_millis(1600));
/// assert_eq!(jitter(d, Jitter::Percent(20), 1 << 63), d);
/// ```
#[must_use]
#[inline]
pub fn jitter(delay: Duration, jitter: Jitter, x: u64) -> Duration {
    Duration::from_nanos(jitter_nanos(nanos(delay), jitter, x))
}

/// [`jitter`] over nanoseconds.
#[inline(always)]
fn jitter_nanos(d: u64, jitter: Jitter, x: u64) -> u64 {
    match jitter {
        Jitter::None => d,
        Jitter::Full => scale(d, x),
        Jitter::Equal => {
            let half = d / 2;
            (d - half) + scale(half, x)
        }
        Jitter::Percent(p) => {
            let p = u64::from(p.min(100));
            // low = d * (1 - p/100); spread = d * 2p/100; result in [low, low + spread).
            let cut = mul_div(d, p, 100);
            let spread = mul_div(d, 2 * p, 100);
            (d - cut).saturating_add(scale(spread, x))
        }
    }
}

/// What a machine waits before retry (or scheduled poll) number `n + 1`:
/// [`exponential`], then [`jitter`] with one value from `draw` when the
/// jitter draws at all. The same value as those two, computed in 64-bit
/// nanoseconds when `base` and `cap` fit (under ~584 years: every real
/// policy), without the `Duration` arithmetic in between (issue 22).
#[inline]
pub(crate) fn delay(b: &Backoff, n: u32, draw: impl FnOnce() -> u64) -> Duration {
    let (Some(base), Some(cap)) = (small_nanos(b.base), small_nanos(b.cap)) else {
        let d = exponential(b, n);
        return if draws(b.jitter) {
            jitter(d, b.jitter, draw())
        } else {
            d
        };
    };
    // As `exponential`: below 2^64 ns the product is exact in both; at or
    // above it, both give `cap` (< 2^64 ns).
    let d = base
        .saturating_mul(u64::from(b.multiplier.saturating_pow(n)))
        .min(cap);
    if draws(b.jitter) {
        Duration::from_nanos(jitter_nanos(d, b.jitter, draw()))
    } else {
        Duration::from_nanos(d)
    }
}

/// [`delay`] in nanoseconds for a backoff whose `base` and `cap` are
/// already in nanoseconds (both under 2^64 ns, and `base` at most `cap`:
/// `min(base, cap)` gives the same delays), with the default jitter
/// inline: what `RetryMachine`'s fast path computes from the constants it
/// keeps (issue 22). The same value as `delay` (`delay` itself stays as it
/// was: its callers counted more instructions with this body inlined).
#[inline(always)]
pub(crate) fn delay_nanos(
    base: u64,
    cap: u64,
    multiplier: u32,
    jitter: Jitter,
    full: bool,
    n: u32,
    draw: impl FnOnce() -> u64,
) -> u64 {
    // As `exponential`: below 2^64 ns the product is exact in both; at or
    // above it, both give `cap` (< 2^64 ns).
    // The first retry of a class (the common case) without the multiply
    // (nor the cap: `base <= cap`).
    let d = if n == 0 {
        base
    } else {
        base.saturating_mul(u64::from(multiplier.saturating_pow(n)))
            .min(cap)
    };
    // The default jitter inline (`full`: the caller's flag for
    // `Jitter::Full`, a test of one byte rather than a switch over the
    // kinds); the others through `jitter_nanos`.
    if full {
        scale(d, draw())
    } else if draws(jitter) {
        jitter_nanos(d, jitter, draw())
    } else {
        d
    }
}

/// How many exponents [`Steps`] keeps.
const STEPS: usize = 4;

/// The first [`STEPS`] delays of a backoff as what its jitter maps a draw
/// onto, worked out once (issue 22): for exponent `n`, the least delay
/// `low` and the `spread` a draw scales, so that the delay is
/// `low + spread * x / 2^64` (saturating), or `low` for a jitter that
/// does not draw. The same value as [`delay`] for every exponent it
/// [`covers`](Self::covers), without the exponent, the jitter's dispatch
/// or `Percent`'s two multiplies and divisions per draw.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Steps {
    steps: [(u64, u64); STEPS],
    /// The cap in nanoseconds.
    cap: u64,
    draws: bool,
    /// Every exponent from `STEPS - 1` on has the same delay (the cap is
    /// reached by then, or the multiplier is 1).
    stable: bool,
}

impl Steps {
    /// The steps of `b`, when its base and cap are under 2^64 ns.
    pub(crate) fn new(b: &Backoff) -> Option<Steps> {
        let (base, cap) = (small_nanos(b.base)?, small_nanos(b.cap)?);
        // As `delay`: below 2^64 ns the product is exact; at or above it,
        // `cap`.
        let ceiling = |n: u32| {
            base.saturating_mul(u64::from(b.multiplier.saturating_pow(n)))
                .min(cap)
        };
        let mut steps = [(0, 0); STEPS];
        for (n, step) in (0u32..).zip(steps.iter_mut()) {
            let d = ceiling(n);
            // As `jitter_nanos`, with the draw's share left out.
            *step = match b.jitter {
                Jitter::None => (d, 0),
                Jitter::Full => (0, d),
                Jitter::Equal => {
                    let half = d / 2;
                    (d - half, half)
                }
                Jitter::Percent(p) => {
                    let p = u64::from(p.min(100));
                    (d - mul_div(d, p, 100), mul_div(d, 2 * p, 100))
                }
            };
        }
        Some(Steps {
            steps,
            cap,
            draws: draws(b.jitter),
            stable: b.multiplier == 1 || ceiling(STEPS as u32 - 1) == cap,
        })
    }

    /// The cap in nanoseconds.
    #[inline(always)]
    pub(crate) fn cap(&self) -> u64 {
        self.cap
    }

    /// Whether [`delay_nanos`](Self::delay_nanos) knows exponent `n`.
    #[inline(always)]
    pub(crate) fn covers(&self, n: u32) -> bool {
        (n as usize) < STEPS || self.stable
    }

    /// [`delay`] in nanoseconds for an exponent `n` it
    /// [`covers`](Self::covers), with one value from `draw` when the
    /// jitter draws at all.
    #[inline(always)]
    pub(crate) fn delay_nanos(&self, n: u32, draw: impl FnOnce() -> u64) -> u64 {
        let (low, spread) = self.steps[(n as usize).min(STEPS - 1)];
        if self.draws {
            low.saturating_add(scale(spread, draw()))
        } else {
            low
        }
    }
}

/// Whether a jitter kind draws from the random source at all.
#[must_use]
#[inline]
pub(crate) const fn draws(jitter: Jitter) -> bool {
    !matches!(jitter, Jitter::None | Jitter::Percent(0))
}

/// Whole seconds below which a `Duration` in nanoseconds always fits 64
/// bits (`u64::MAX` ns is 18,446,744,073.7 s).
const SMALL_SECS: u64 = u64::MAX / 1_000_000_000;

/// `d` in nanoseconds when it is under [`SMALL_SECS`] seconds (every real
/// backoff): a 64-bit multiply instead of `as_nanos`'s 128-bit one and its
/// range check. `None` above: the caller takes the `Duration` path.
#[inline]
pub(crate) fn small_nanos(d: Duration) -> Option<u64> {
    (d.as_secs() < SMALL_SECS).then(|| d.as_secs() * 1_000_000_000 + u64::from(d.subsec_nanos()))
}

#[inline]
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `d * x / 2^64`, exact.
#[inline]
fn scale(d: u64, x: u64) -> u64 {
    ((u128::from(d) * u128::from(x)) >> 64) as u64
}

#[inline]
fn mul_div(d: u64, num: u64, den: u64) -> u64 {
    match d.checked_mul(num) {
        // Every delay under ~2.9 years at `num <= 200`: a 64-bit division
        // (by a constant, once inlined) instead of a call to the 128-bit
        // one; the same value.
        Some(x) => x / den,
        None => {
            u64::try_from(u128::from(d) * u128::from(num) / u128::from(den)).unwrap_or(u64::MAX)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_in_range_at_the_extremes() {
        let d = Duration::from_millis(4000);
        for x in [0, 1, u64::MAX / 2, u64::MAX - 1, u64::MAX] {
            let full = jitter(d, Jitter::Full, x);
            assert!(full < d, "{full:?}");
            let eq = jitter(d, Jitter::Equal, x);
            assert!(eq >= d / 2 && eq < d, "{eq:?}");
            let pc = jitter(d, Jitter::Percent(20), x);
            assert!(
                pc >= Duration::from_millis(3200) && pc < Duration::from_millis(4800),
                "{pc:?}"
            );
            let whole = jitter(d, Jitter::Percent(100), x);
            assert!(whole < d * 2, "{whole:?}");
        }
    }

    #[test]
    fn huge_delays_saturate_instead_of_overflowing() {
        let b = Backoff {
            base: Duration::from_secs(u64::MAX / 4),
            multiplier: u32::MAX,
            cap: Duration::MAX,
            jitter: Jitter::None,
        };
        assert_eq!(exponential(&b, u32::MAX), Duration::MAX);
        let j = jitter(Duration::MAX, Jitter::Percent(100), u64::MAX);
        assert!(j > Duration::ZERO);
    }

    /// `delay` is `exponential` then `jitter`, drawing exactly when
    /// `draws`, at the extremes too; `delay_nanos` and `Steps` (for the
    /// exponents it covers) give the same.
    #[test]
    fn delay_is_exponential_then_jitter() {
        let durations = [
            Duration::from_nanos(1),
            Duration::from_millis(250),
            Duration::from_secs(4),
            Duration::from_secs(u64::MAX / 1_000_000_000 - 1),
            Duration::from_secs(u64::MAX / 1_000_000_000 + 1),
            Duration::MAX,
        ];
        let jitters = [
            Jitter::None,
            Jitter::Full,
            Jitter::Equal,
            Jitter::Percent(0),
            Jitter::Percent(20),
            Jitter::Percent(100),
        ];
        for base in durations {
            for cap in durations.into_iter().filter(|c| *c >= base) {
                for multiplier in [1, 2, 3, u32::MAX] {
                    for jitter in jitters {
                        let b = Backoff {
                            base,
                            multiplier,
                            cap,
                            jitter,
                        };
                        let steps = Steps::new(&b);
                        assert_eq!(
                            steps.is_some(),
                            small_nanos(base).is_some() && small_nanos(cap).is_some()
                        );
                        for n in [0, 1, 2, 3, 4, 5, 31, 64, u32::MAX] {
                            for x in [0, 1, 1 << 63, u64::MAX] {
                                let mut drawn = 0;
                                let got = delay(&b, n, || {
                                    drawn += 1;
                                    x
                                });
                                let mut want = exponential(&b, n);
                                if draws(jitter) {
                                    want = super::jitter(want, jitter, x);
                                }
                                assert_eq!(got, want, "{b:?} n={n} x={x}");
                                if let (Some(base), Some(cap)) =
                                    (small_nanos(base), small_nanos(cap))
                                {
                                    let fast = delay_nanos(
                                        base,
                                        cap,
                                        multiplier,
                                        jitter,
                                        jitter == Jitter::Full,
                                        n,
                                        || x,
                                    );
                                    assert_eq!(Duration::from_nanos(fast), want, "{b:?} n={n}");
                                }
                                if let Some(steps) = steps.filter(|s| s.covers(n)) {
                                    let mut drawn = 0;
                                    let fast = steps.delay_nanos(n, || {
                                        drawn += 1;
                                        x
                                    });
                                    assert_eq!(Duration::from_nanos(fast), want, "{b:?} n={n}");
                                    assert_eq!(drawn, u32::from(draws(jitter)), "{b:?}");
                                    assert_eq!(steps.cap(), small_nanos(cap).unwrap());
                                }
                                assert_eq!(drawn, u32::from(draws(jitter)), "{b:?}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn multiplier_one_is_constant() {
        let b = Backoff {
            base: Duration::from_millis(300),
            multiplier: 1,
            cap: Duration::from_secs(1),
            jitter: Jitter::None,
        };
        for n in [0, 1, 9, u32::MAX] {
            assert_eq!(exponential(&b, n), Duration::from_millis(300), "n = {n}");
        }
    }
}
