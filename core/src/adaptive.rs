//! [`AdaptiveRate`]: a send rate learnt from rate-limited answers, for
//! servers that give no hints (SPEC §4.1).
//!
//! Most rate limiters (nginx `limit_req`, many gateways) answer 429 with no
//! `Retry-After` and no `RateLimit` fields. A client that only backs off
//! the refused request keeps sending everything else at full speed; one
//! that waits a fixed time wastes the quota. The AWS SDKs' *adaptive*
//! retry mode answers this with a client-side token bucket whose fill rate
//! is cut multiplicatively on every throttle (to 0.7 × the rate the client
//! was sending at) and grown back with CUBIC (the congestion-control curve
//! of TCP CUBIC) while answers succeed. `AdaptiveRate` is that algorithm,
//! number for number: it passes the AWS conformance vectors
//! (`core/tests/aws_adaptive.rs`: the CUBIC tables of the specification and
//! of the Go and Rust SDKs' harnesses, the end-to-end table of measured and
//! fill rates, and the TypeScript SDK's send delays).
//!
//! Three refinements, outside anything the vectors exercise (each is
//! regression-tested in `core/tests/adaptive_properties.rs`, and measured
//! in BENCHMARKS.md: against nginx `limit_req`, 40 URLs, 5 × 429 at 1.09×
//! the ideal time, where the SDKs' rules gave 1.5×):
//!
//! * **A throttle before anything was measured** (in the first half
//!   second) cuts to 0.7 × the answers the server accepted so far, per
//!   second over at least one second, instead of the SDKs' 0 → the 0.5/s
//!   floor, which left a client that was sending hundreds a second
//!   sending one every two seconds while CUBIC regrew.
//! * **One burst is one cut** ([`answered`](AdaptiveRate::answered)): a
//!   throttle for a send granted before the last cut only counts in the
//!   measured rate, as TCP cuts its window once per round trip; the SDKs
//!   cut once per refused answer, so eight refusals in flight cut to
//!   0.7⁸ ≈ 6 %.
//! * **A cut never goes below 0.7 × the answers the server accepted in the
//!   last second**, and CUBIC regrows towards that rate: against a
//!   fixed-window quota every send after the window is spent is refused,
//!   however right the rate, and cutting on each left the next windows a
//!   third full.
//!
//! ([`on_answer`](AdaptiveRate::on_answer) keeps the SDKs' rules but the
//! first; [`answered`](AdaptiveRate::answered), which the paces use, adds
//! the other two.)
//!
//! Sans-IO like everything in this crate: every call takes `now`, and
//! times are seconds since the instant the rate was created.
//!
//! * **Off until the first throttle.** A server that never answers
//!   rate-limited never sees polite slow down: the bucket is enabled by the
//!   first throttled answer and only then refuses sends.
//! * **Measured rate.** Answers are counted in buckets of 0.5 s; the
//!   measured send rate is an exponential average (weight 0.8 on the newest
//!   bucket).
//! * **On a throttle**: `last_max = min(measured, fill)` (just `measured`
//!   before the first one), the new rate is `0.7 × last_max`.
//! * **On a success**: the rate follows
//!   `0.4 × (t − t_throttle − K)³ + last_max` with
//!   `K = ∛(last_max × 0.3 / 0.4)`: it climbs back to `last_max` in `K`
//!   seconds, stays near it, then probes beyond.
//! * The bucket's fill rate is `max(min(rate, 2 × measured), 0.5)` sends
//!   per second; it holds at most `max(fill, 1)` tokens.
//!
//! It is one part of a pace: [`RateThrottle::adaptive`](crate::RateThrottle::adaptive)
//! combines it with a configured or learnt sliding window (the ceiling)
//! and the shared cool-down.
//!
//! ```
//! use polite_core::adaptive::AdaptiveRate;
//! use std::time::{Duration, Instant};
//!
//! let t0 = Instant::now();
//! let ms = Duration::from_millis;
//! let mut rate = AdaptiveRate::new(t0);
//! // Never throttled: never refuses.
//! for i in 0..100 {
//!     rate.on_answer(t0 + ms(10 * i), false);
//!     assert_eq!(rate.acquire(t0 + ms(10 * i)), Ok(()));
//! }
//! // A rate-limited answer: the bucket is on, at 0.7 × the measured rate.
//! rate.on_answer(t0 + ms(1000), true);
//! assert!(rate.is_enabled());
//! assert!(rate.fill_rate() < rate.measured_rate());
//! ```

use std::time::{Duration, Instant};

/// CUBIC's multiplicative decrease: the rate after a throttle is this
/// fraction of the rate before it.
pub const BETA: f64 = 0.7;
/// CUBIC's scale constant.
pub const SCALE: f64 = 0.4;
/// Weight of the newest 0.5 s bucket in the measured send rate.
pub const SMOOTH: f64 = 0.8;
/// The lowest fill rate, in sends per second.
pub const MIN_FILL_RATE: f64 = 0.5;
/// The smallest bucket, in tokens.
pub const MIN_CAPACITY: f64 = 1.0;
/// Tolerance for float rounding when a caller comes back exactly when told.
/// (A millionth of a token: nothing a caller could use, and far more than
/// the rounding of a `Duration` to whole nanoseconds can lose.)
const EPSILON: f64 = 1e-6;

/// The CUBIC curve of the AWS adaptive mode: pure maths on times in
/// seconds.
///
/// ```
/// use polite_core::adaptive::Cubic;
/// let c = Cubic { last_max_rate: 10.0, last_throttle_time: 5.0 };
/// // Right after the throttle the curve starts at 0.7 × 10 ...
/// assert!((c.success(5.0) - 7.0).abs() < 1e-9);
/// // ... and is back at 10 once the time window has passed.
/// assert!((c.success(5.0 + c.time_window()) - 10.0).abs() < 1e-9);
/// assert!((Cubic::throttle(10.0) - 7.0).abs() < 1e-12);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cubic {
    /// The rate at the last throttle (sends per second).
    pub last_max_rate: f64,
    /// When the last throttle happened (seconds).
    pub last_throttle_time: f64,
}

impl Cubic {
    /// `K`: how long after a throttle the curve is back at
    /// `last_max_rate`.
    #[must_use]
    pub fn time_window(&self) -> f64 {
        (self.last_max_rate * (1.0 - BETA) / SCALE).cbrt()
    }

    /// The rate the curve allows at `t` (seconds) while answers succeed.
    #[must_use]
    pub fn success(&self, t: f64) -> f64 {
        let dt = t - self.last_throttle_time - self.time_window();
        SCALE * dt * dt * dt + self.last_max_rate
    }

    /// The rate after a throttle while sending at `rate`.
    #[must_use]
    pub fn throttle(rate: f64) -> f64 {
        rate * BETA
    }
}

/// What a pace hears about one answered attempt: when its send was
/// granted, when the answer came, and whether it was a throttle (classed
/// rate-limited, with no server time of its own).
///
/// ```
/// use polite_core::adaptive::Answered;
/// use std::time::Instant;
/// let t = Instant::now();
/// let a = Answered::new(t, t, true);
/// assert!(a.throttled);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Answered {
    /// When the pace granted the send.
    pub sent: Instant,
    /// When the answer (or transport error) arrived.
    pub at: Instant,
    /// Rate-limited without a server time.
    pub throttled: bool,
}

impl Answered {
    /// The facts of one answered attempt.
    #[must_use]
    pub fn new(sent: Instant, at: Instant, throttled: bool) -> Answered {
        Answered {
            sent,
            at,
            throttled,
        }
    }
}

/// A send rate learnt from rate-limited answers: the AWS SDKs' adaptive
/// client rate limiter (see the [module docs](self)).
///
/// **Inputs**: [`on_answer`](Self::on_answer)`(now, throttled)` after every
/// answer (or transport error) of a send it paced; **outputs**:
/// [`acquire`](Self::acquire)`(now)`, `Ok` (one token taken) or `Err(t)`:
/// no token before `t`, nothing taken. Time going backwards is clamped to
/// the latest `now` seen. No allocation; a few floating-point operations
/// per call.
///
/// **Invariants** (property-tested in `core/tests/pace_properties.rs`): it
/// never refuses before its first throttled answer; over any interval it
/// grants at most `capacity + fill × length` sends (a token bucket); after
/// a throttle, steady successes bring the fill rate back above what it
/// was cut to.
///
/// ```
/// use polite_core::adaptive::AdaptiveRate;
/// use std::time::{Duration, Instant};
/// let t0 = Instant::now();
/// let mut rate = AdaptiveRate::new(t0);
/// // One throttled answer 2 s in: measured 0.4 sends/s, cut to 0.28,
/// // raised to the 0.5/s floor: the next token comes 2 s later.
/// let t = t0 + Duration::from_secs(2);
/// rate.on_answer(t, true);
/// assert_eq!(rate.acquire(t), Err(t + Duration::from_secs(2)));
/// assert_eq!(rate.acquire(t + Duration::from_secs(2)), Ok(()));
/// ```
#[derive(Clone, Debug)]
pub struct AdaptiveRate {
    origin: Instant,
    /// Latest time seen, seconds since `origin`.
    latest: f64,
    fill_rate: f64,
    max_capacity: f64,
    current_capacity: f64,
    /// Last refill, seconds; `None` before the first.
    last_timestamp: Option<f64>,
    enabled: bool,
    measured_tx_rate: f64,
    last_tx_rate_bucket: f64,
    request_count: u64,
    cubic: Cubic,
    calculated_rate: f64,
    /// When [`answered`](Self::answered) last cut the rate.
    last_cut: Option<Instant>,
    /// Answers not rate-limited, until the first bucket closes.
    accepted: u64,
    /// Answers not rate-limited seen by [`answered`](Self::answered), per
    /// 100 ms slot over the last second: (slot number, count).
    accepted_slots: [(u64, u32); 10],
}

impl AdaptiveRate {
    /// A rate created at `now` (time 0 of its buckets), off until the
    /// first throttled answer.
    ///
    /// ```
    /// use polite_core::adaptive::AdaptiveRate;
    /// use std::time::Instant;
    /// let rate = AdaptiveRate::new(Instant::now());
    /// assert!(!rate.is_enabled());
    /// ```
    #[must_use]
    pub fn new(now: Instant) -> AdaptiveRate {
        AdaptiveRate {
            origin: now,
            latest: 0.0,
            fill_rate: 0.0,
            max_capacity: 0.0,
            current_capacity: 0.0,
            last_timestamp: None,
            enabled: false,
            measured_tx_rate: 0.0,
            last_tx_rate_bucket: 0.0,
            request_count: 0,
            cubic: Cubic {
                last_max_rate: 0.0,
                last_throttle_time: 0.0,
            },
            calculated_rate: 0.0,
            last_cut: None,
            accepted: 0,
            accepted_slots: [(0, 0); 10],
        }
    }

    /// Seconds since creation, clamped so time never goes backwards.
    fn secs(&mut self, now: Instant) -> f64 {
        let t = now.saturating_duration_since(self.origin).as_secs_f64();
        if t > self.latest {
            self.latest = t;
        }
        self.latest
    }

    fn at(&self, secs: f64) -> Instant {
        // A caller that comes back at this instant finds its token: `acquire`
        // accepts a deficit of `EPSILON` for the nanosecond rounding.
        let d = Duration::try_from_secs_f64(secs.max(0.0)).unwrap_or(Duration::MAX);
        crate::decide::deadline_after(self.origin, d)
    }

    fn refill(&mut self, t: f64) {
        if let Some(last) = self.last_timestamp {
            let fill = (t - last) * self.fill_rate;
            self.current_capacity = (self.current_capacity + fill).min(self.max_capacity);
        }
        self.last_timestamp = Some(t);
    }

    /// Asks for one send at `now`: `Ok(())` (a token taken; always, before
    /// the first throttle) or `Err(t)`, the instant a token will be there.
    ///
    /// # Errors
    ///
    /// `Err(t)` with `t > now`: nothing taken; ask again at `t`.
    ///
    /// ```
    /// use polite_core::adaptive::AdaptiveRate;
    /// use std::time::Instant;
    /// let t0 = Instant::now();
    /// assert_eq!(AdaptiveRate::new(t0).acquire(t0), Ok(()));
    /// ```
    pub fn acquire(&mut self, now: Instant) -> Result<(), Instant> {
        if !self.enabled {
            return Ok(());
        }
        let t = self.secs(now);
        self.refill(t);
        if self.current_capacity + EPSILON >= 1.0 {
            self.current_capacity = (self.current_capacity - 1.0).max(0.0);
            Ok(())
        } else {
            let wait = (1.0 - self.current_capacity) / self.fill_rate;
            Err(self.at(t + wait))
        }
    }

    /// An answer arrived at `now` for a send this rate paced: `throttled`
    /// when it was rate-limited (by the retry policy's classification, not
    /// a fixed status). Updates the measured rate and the fill rate.
    ///
    /// ```
    /// use polite_core::adaptive::AdaptiveRate;
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let mut rate = AdaptiveRate::new(t0);
    /// rate.on_answer(t0 + Duration::from_millis(200), false);
    /// assert_eq!(rate.fill_rate(), 0.5); // the floor; not enforced until a throttle
    /// assert!(!rate.is_enabled());
    /// ```
    pub fn on_answer(&mut self, now: Instant, throttled: bool) {
        let t = self.secs(now);
        self.measure(t);
        if !throttled {
            self.accepted += 1;
        }
        let measured = self.measured_or_first(t);
        let calculated = if throttled {
            let rate_to_use = if self.enabled {
                measured.min(self.fill_rate)
            } else {
                measured
            };
            self.cubic = Cubic {
                last_max_rate: rate_to_use,
                last_throttle_time: t,
            };
            self.enabled = true;
            Cubic::throttle(rate_to_use)
        } else {
            self.cubic.success(t)
        };
        self.calculated_rate = calculated;
        let new_rate = calculated.min(2.0 * measured);
        self.refill(t);
        self.fill_rate = new_rate.max(MIN_FILL_RATE);
        self.max_capacity = self.fill_rate.max(MIN_CAPACITY);
        self.current_capacity = self.current_capacity.min(self.max_capacity);
    }

    /// An answered attempt, with when its send was granted: as
    /// [`on_answer`](Self::on_answer), except that a throttle for a send
    /// granted **before the last cut** only counts in the measured rate.
    /// Concurrent sends that left before the client slowed down say nothing
    /// new when they come back refused: one burst is one cut, as TCP cuts
    /// its window once per round trip. (The SDKs cut once per refused
    /// answer, so a client with eight requests in flight is cut to
    /// 0.7⁸ ≈ 6 % of its rate by one burst.)
    ///
    /// ```
    /// use polite_core::adaptive::{AdaptiveRate, Answered};
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let t = t0 + Duration::from_secs(2);
    /// let mut rate = AdaptiveRate::new(t0);
    /// rate.answered(Answered::new(t0, t, true));
    /// let cut = rate.fill_rate();
    /// // Three more refusals of sends made before that cut: no further cut.
    /// for _ in 0..3 {
    ///     rate.answered(Answered::new(t0, t, true));
    /// }
    /// assert_eq!(rate.fill_rate(), cut);
    /// ```
    ///
    /// And a cut never goes below 0.7 × the answers the server accepted
    /// in the last second (the CUBIC curve then regrows towards that
    /// rate): against a fixed-window quota every send after the window is
    /// spent is refused, however right the rate, and cutting on each of
    /// them would leave the next windows a third full.
    pub fn answered(&mut self, a: Answered) {
        let t = self.secs(a.at);
        if a.throttled && self.last_cut.is_some_and(|cut| a.sent < cut) {
            self.measure(t);
            return;
        }
        if !a.throttled {
            self.note_accepted(t);
        }
        self.on_answer(a.at, a.throttled);
        if a.throttled {
            self.last_cut = Some(a.at);
            let accepted = self.accepted_last_second(t);
            let floor = BETA * accepted;
            if self.fill_rate < floor {
                self.fill_rate = floor;
                self.max_capacity = floor.max(MIN_CAPACITY);
                self.calculated_rate = floor;
            }
            if self.cubic.last_max_rate < accepted {
                self.cubic.last_max_rate = accepted;
            }
        }
    }

    fn note_accepted(&mut self, t: f64) {
        let slot = (t * 10.0) as u64;
        let entry = &mut self.accepted_slots[(slot % 10) as usize];
        if entry.0 != slot {
            *entry = (slot, 0);
        }
        entry.1 = entry.1.saturating_add(1);
    }

    /// Accepted answers in the last second (the current 100 ms slot and
    /// the nine before it).
    fn accepted_last_second(&self, t: f64) -> f64 {
        let slot = (t * 10.0) as u64;
        self.accepted_slots
            .iter()
            .filter(|(s, _)| *s <= slot && *s + 10 > slot)
            .map(|(_, n)| f64::from(*n))
            .sum()
    }

    /// Counts one answer in the current 0.5 s bucket; a new bucket folds
    /// the last one's rate into the measured rate.
    fn measure(&mut self, t: f64) {
        let bucket = (t * 2.0).floor() / 2.0;
        self.request_count += 1;
        if bucket > self.last_tx_rate_bucket {
            let current = self.request_count as f64 / (bucket - self.last_tx_rate_bucket);
            self.measured_tx_rate = current * SMOOTH + self.measured_tx_rate * (1.0 - SMOOTH);
            self.request_count = 0;
            self.last_tx_rate_bucket = bucket;
        }
    }

    /// The measured send rate; before the first 0.5 s bucket has closed
    /// (nothing measured yet), the answers accepted so far (not
    /// rate-limited) per second, counted over at least one second: a server
    /// that took `k` sends in its first moments is assumed to take `k` a
    /// second, and CUBIC probes above from there. The SDKs use the
    /// measured rate as it is, 0, and so cut a client throttled in its
    /// first half second to the 0.5/s floor whatever the server accepts —
    /// seconds of near silence before CUBIC regrows. No published vector
    /// throttles that early, and the vectors' early successes compute
    /// rates far under the floor either way.
    fn measured_or_first(&self, t: f64) -> f64 {
        if self.measured_tx_rate > 0.0 {
            return self.measured_tx_rate;
        }
        self.accepted as f64 / (t - self.last_tx_rate_bucket).max(1.0)
    }

    /// Whether the bucket refuses sends (after the first throttle).
    #[must_use]
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// The bucket's fill rate, sends per second (enforced once enabled).
    #[must_use]
    pub fn fill_rate(&self) -> f64 {
        self.fill_rate
    }

    /// The measured send rate, sends per second.
    #[must_use]
    pub fn measured_rate(&self) -> f64 {
        self.measured_tx_rate
    }

    /// The rate CUBIC computed at the last answer, before the
    /// `2 × measured` cap and the floor.
    #[must_use]
    pub fn calculated_rate(&self) -> f64 {
        self.calculated_rate
    }

    /// The interval between sends at the current fill rate (for messages:
    /// "one send every 1.4 s").
    ///
    /// ```
    /// use polite_core::adaptive::AdaptiveRate;
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let mut rate = AdaptiveRate::new(t0);
    /// rate.on_answer(t0 + Duration::from_secs(2), true);
    /// assert_eq!(rate.interval(), Duration::from_secs(2));
    /// ```
    #[must_use]
    pub fn interval(&self) -> Duration {
        if self.fill_rate > 0.0 {
            Duration::try_from_secs_f64(1.0 / self.fill_rate).unwrap_or(Duration::MAX)
        } else {
            Duration::MAX
        }
    }
}
