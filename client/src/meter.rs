//! The client's metrics hooks ([`crate::metrics`] has the names and
//! labels): one [`CallMeter`] per call, cloned into the call's observer,
//! its `Io` (which sees each send go out) and its pace (which sees each
//! refusal and grant). Without feature `metrics` the meter is an empty
//! struct, every method does nothing, and the call's pace is the shared
//! [`ClientPace`] handle itself.

use polite_core::Outcome;

#[cfg(feature = "metrics")]
pub(crate) use on::{CallMeter, Origin};

#[cfg(not(feature = "metrics"))]
pub(crate) use off::{CallMeter, Origin};

#[cfg(not(feature = "metrics"))]
mod off {
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    use polite_core::record::AttemptRecord;
    use polite_core::{Outcome, SendPlan};

    use crate::pace::ClientPace;
    use crate::paces::PaceKey;

    /// Nothing to measure: the feature is off.
    #[derive(Clone, Debug, Default)]
    pub(crate) struct CallMeter;

    /// A key's pace, nothing more: the feature is off.
    #[derive(Clone, Debug)]
    pub(crate) struct Origin(Arc<Mutex<ClientPace>>);

    impl Origin {
        #[inline]
        pub(crate) fn new(_: &PaceKey, pace: Arc<Mutex<ClientPace>>) -> Self {
            Origin(pace)
        }
    }

    impl CallMeter {
        #[inline]
        pub(crate) fn start(
            _: &'static str,
            _: &PaceKey,
            _: &Arc<Mutex<ClientPace>>,
            _: Instant,
        ) -> Self {
            CallMeter
        }
        #[inline]
        pub(crate) fn start_batch(_: Instant) -> Self {
            CallMeter
        }
        /// The call's pace: the shared handle itself.
        #[inline]
        pub(crate) fn pace(&self, pace: Arc<Mutex<ClientPace>>) -> Arc<Mutex<ClientPace>> {
            pace
        }
        /// A batch key's pace: the shared handle itself.
        #[inline]
        pub(crate) fn key_pace(&self, origin: &Origin) -> Arc<Mutex<ClientPace>> {
            Arc::clone(&origin.0)
        }
        #[inline]
        pub(crate) fn item(&self, _: u32, _: &Origin) {}
        #[inline]
        pub(crate) fn record(&self, _: &AttemptRecord) {}
        #[inline]
        pub(crate) fn sent(&self, _: &SendPlan, _: impl FnOnce() -> Instant) {}
        #[inline]
        pub(crate) fn ended(&self, _: u32, _: &Outcome, _: impl FnOnce() -> Instant) {}
        #[inline]
        pub(crate) fn finish(&self, _: Instant) {}
    }
}

/// The label value of an outcome.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) fn outcome_label(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Succeeded { .. } => "succeeded",
        Outcome::Terminal { .. } => "terminal",
        other => crate::trace::error_type(other).unwrap_or("other"),
    }
}

#[cfg(feature = "metrics")]
mod on {
    use std::sync::{Arc, Mutex, OnceLock, PoisonError};
    use std::time::{Duration, Instant};

    use metrics::SharedString;
    use polite_core::adaptive::Answered;
    use polite_core::pace::PaceLimit;
    use polite_core::ratelimit::RateLimitInfo;
    use polite_core::record::{AttemptRecord, DelaySource, PlannedDelay};
    use polite_core::{Outcome, Pace, RetryClass, SendPlan};

    use crate::items::ItemMap;
    use crate::metrics as m;
    use crate::pace::ClientPace;
    use crate::paces::PaceKey;

    /// One call's meter (cheap to clone: one `Arc`).
    #[derive(Clone, Debug)]
    pub(crate) struct CallMeter(Arc<Inner>);

    /// The `origin` label of one pace key, and that key's pace (whose
    /// rate the `polite_pace_requests_per_second` gauge reports). Cheap
    /// to clone.
    #[derive(Clone, Debug)]
    pub(crate) struct Origin {
        label: SharedString,
        pace: Arc<Mutex<ClientPace>>,
    }

    impl Origin {
        pub(crate) fn new(key: &PaceKey, pace: Arc<Mutex<ClientPace>>) -> Self {
            Origin {
                label: SharedString::from(key.shared()),
                pace,
            }
        }

        fn rate(&self) {
            let rate = self
                .pace
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .rate();
            if let Some(rate) = rate {
                metrics::gauge!(m::PACE_REQUESTS_PER_SECOND, "origin" => self.label.clone())
                    .set(rate);
            }
        }
    }

    #[derive(Debug)]
    struct Inner {
        call: &'static str,
        /// The call's key: its request's, or a batch's first item's (the
        /// label of the call-wide duration and in-flight metrics). A batch
        /// whose first request is not there when it starts (one fed from a
        /// stream) has none until that request arrives: it is counted in
        /// flight from then.
        origin: OnceLock<Origin>,
        started: Instant,
        /// A batch's items in progress, by the key each is paced by: the
        /// label of each item's own attempts, waits and outcome.
        items: Mutex<ItemMap<u32, Origin>>,
        /// Per item, the delay its latest record planned, until its next
        /// send (or its end, or the call's) says how much of it passed.
        pending: Mutex<ItemMap<u32, PlannedDelay>>,
    }

    impl Drop for Inner {
        fn drop(&mut self) {
            // Also when the call's future is dropped half-way; nothing for
            // a batch that never had a request (never counted).
            if let Some(origin) = self.origin.get() {
                metrics::gauge!(m::CALLS_IN_FLIGHT, "call" => self.call, "origin" => origin.label.clone())
                    .decrement(1.0);
            }
        }
    }

    /// The label of `origin`; `""` for none (a stream-fed batch that ended
    /// before its first request arrived: it has no origin).
    fn label(origin: Option<&Origin>) -> SharedString {
        origin.map_or(SharedString::const_str(""), |o| o.label.clone())
    }

    /// Counts `call` in flight under `origin`'s label.
    fn in_flight(call: &'static str, origin: &Origin) {
        metrics::gauge!(m::CALLS_IN_FLIGHT, "call" => call, "origin" => origin.label.clone())
            .increment(1.0);
    }

    fn class_label(class: Option<RetryClass>) -> &'static str {
        match class {
            None => "none",
            Some(RetryClass::RateLimited) => "rate_limited",
            Some(RetryClass::ServerError) => "server_error",
            Some(RetryClass::Transport) => "transport",
            Some(_) => "other",
        }
    }

    fn cause_label(source: DelaySource) -> &'static str {
        match source {
            DelaySource::Backoff => "backoff",
            DelaySource::RetryAfter | DelaySource::Clamp => "retry_after",
            DelaySource::Schedule => "schedule",
            _ => "other",
        }
    }

    fn limit_label(limit: PaceLimit) -> &'static str {
        match limit {
            PaceLimit::CoolDown => "cool_down",
            _ => "pace",
        }
    }

    /// How much of a planned delay had passed at `now`.
    fn passed(p: &PlannedDelay, now: Instant) -> Duration {
        let began = p.send_at.checked_sub(p.delay).unwrap_or(p.send_at);
        now.min(p.send_at).saturating_duration_since(began)
    }

    impl CallMeter {
        pub(crate) fn start(
            call: &'static str,
            key: &PaceKey,
            pace: &Arc<Mutex<ClientPace>>,
            now: Instant,
        ) -> Self {
            let origin = Origin::new(key, Arc::clone(pace));
            in_flight(call, &origin);
            CallMeter(Arc::new(Inner {
                call,
                origin: OnceLock::from(origin),
                started: now,
                items: Mutex::default(),
                pending: Mutex::default(),
            }))
        }

        /// A batch's meter when its first request is not there yet (fed
        /// from a stream): the batch takes its first item's key when that
        /// item is numbered ([`item`](Self::item)), and is counted in
        /// flight from then. One that ends before any request arrives
        /// records its duration under origin `""`.
        pub(crate) fn start_batch(now: Instant) -> Self {
            CallMeter(Arc::new(Inner {
                call: "batch",
                origin: OnceLock::new(),
                started: now,
                items: Mutex::default(),
                pending: Mutex::default(),
            }))
        }

        /// The call's pace, metered under the call's key.
        pub(crate) fn pace(&self, pace: Arc<Mutex<ClientPace>>) -> CallPace {
            let origin = Origin {
                label: label(self.0.origin.get()),
                pace,
            };
            self.key_pace(&origin)
        }

        /// A batch key's pace, metered under that key.
        pub(crate) fn key_pace(&self, origin: &Origin) -> CallPace {
            CallPace {
                origin: origin.clone(),
                meter: self.clone(),
                streak: None,
                held: [Duration::ZERO; 2],
            }
        }

        /// A batch's item `item` is paced by `origin` until it ends. The
        /// first item of a batch that started without its key
        /// ([`start_batch`](Self::start_batch)) gives the batch its key.
        pub(crate) fn item(&self, item: u32, origin: &Origin) {
            if self.0.origin.get().is_none() && self.0.origin.set(origin.clone()).is_ok() {
                in_flight(self.0.call, origin);
            }
            self.0
                .items
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(item, origin.clone());
        }

        /// The key item `item` is paced by: its own in a batch, else the
        /// call's (`None` only for a batch that has had no request).
        fn origin_of(&self, item: u32) -> Option<Origin> {
            let i = &self.0;
            i.items
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&item)
                .or_else(|| i.origin.get())
                .cloned()
        }

        fn wait(&self, origin: Option<&Origin>, cause: &'static str, d: Duration) {
            metrics::histogram!(m::WAIT_SECONDS, "call" => self.0.call, "origin" => label(origin), "cause" => cause)
                .record(d.as_secs_f64());
        }

        /// An attempt record: its class, and the delay it plans.
        pub(crate) fn record(&self, r: &AttemptRecord) {
            let i = &self.0;
            let origin = self.origin_of(r.id.item);
            metrics::counter!(m::ATTEMPTS_TOTAL, "call" => i.call, "origin" => label(origin.as_ref()), "class" => class_label(r.class))
                .increment(1);
            if let Some(next) = r.next {
                i.pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(r.id.item, next);
            }
            if let Some(origin) = origin {
                origin.rate();
            }
        }

        /// A send goes out at `now`: a retry, and the planned delay before it.
        pub(crate) fn sent(&self, plan: &SendPlan, now: impl FnOnce() -> Instant) {
            let i = &self.0;
            let origin = self.origin_of(plan.id.item);
            if plan.id.attempt > 0 {
                metrics::counter!(m::RETRIES_TOTAL, "call" => i.call, "origin" => label(origin.as_ref()))
                    .increment(1);
            }
            let planned = i
                .pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&plan.id.item);
            if let Some(p) = planned {
                self.wait(origin.as_ref(), cause_label(p.source), passed(&p, now()));
            }
        }

        /// A logical request (the call's, or a batch's item `item`) ended
        /// at `now`: its outcome, and the delay it ended during (as far as
        /// it went). A batch forgets the item.
        pub(crate) fn ended(&self, item: u32, outcome: &Outcome, now: impl FnOnce() -> Instant) {
            let i = &self.0;
            let origin = i
                .items
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&item)
                .or_else(|| i.origin.get().cloned());
            metrics::counter!(m::OUTCOMES_TOTAL, "call" => i.call, "origin" => label(origin.as_ref()), "outcome" => super::outcome_label(outcome))
                .increment(1);
            let planned = i
                .pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&item);
            if let Some(p) = planned {
                self.wait(origin.as_ref(), cause_label(p.source), passed(&p, now()));
            }
        }

        /// The call ended at `now`: its duration, the planned delays it
        /// ended during (as far as they went), the pace's rate.
        pub(crate) fn finish(&self, now: Instant) {
            let i = &self.0;
            let origin = i.origin.get();
            metrics::histogram!(m::CALL_DURATION_SECONDS, "call" => i.call, "origin" => label(origin))
                .record(now.saturating_duration_since(i.started).as_secs_f64());
            let pending: Vec<(u32, PlannedDelay)> = i
                .pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .drain()
                .collect();
            for (item, p) in pending {
                self.wait(
                    self.origin_of(item).as_ref(),
                    cause_label(p.source),
                    passed(&p, now),
                );
            }
            if let Some(origin) = origin {
                origin.rate();
            }
        }
    }

    /// The call's pace: the shared [`ClientPace`], plus the time its sends
    /// were held, by the limit that refused them.
    #[derive(Debug)]
    pub(crate) struct CallPace {
        /// The key's label and its shared pace.
        origin: Origin,
        meter: CallMeter,
        /// Since when a send is refused, and by which limit.
        streak: Option<(Instant, PaceLimit)>,
        /// The current streak's time so far: `pace`, `cool_down`.
        held: [Duration; 2],
    }

    impl CallPace {
        fn flush(&mut self) {
            for (d, cause) in self.held.iter_mut().zip(["pace", "cool_down"]) {
                if !d.is_zero() {
                    self.meter.wait(Some(&self.origin), cause, *d);
                    *d = Duration::ZERO;
                }
            }
        }
    }

    impl Drop for CallPace {
        /// A call that ends while refused: the time up to the last ask.
        fn drop(&mut self) {
            self.flush();
        }
    }

    impl Pace for CallPace {
        fn acquire(&mut self, now: Instant) -> Result<(), Instant> {
            let (result, by) = {
                let mut pace = self
                    .origin
                    .pace
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                let r = pace.acquire(now);
                (r, r.is_err().then(|| pace.refusal()))
            };
            if let Some((since, limit)) = self.streak.take() {
                let slot = usize::from(limit_label(limit) == "cool_down");
                self.held[slot] += now.saturating_duration_since(since);
            }
            match by {
                Some(limit) => self.streak = Some((now, limit)),
                None => self.flush(),
            }
            result
        }
        fn cool_down(&mut self, until: Instant) {
            self.origin.pace.cool_down(until);
        }
        fn observe(&mut self, now: Instant, info: &RateLimitInfo) {
            self.origin.pace.observe(now, info);
        }
        fn on_answer(&mut self, answer: Answered) {
            self.origin.pace.on_answer(answer);
        }
        fn refusal(&self) -> PaceLimit {
            self.origin.pace.refusal()
        }
    }
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use polite_core::{Pace, RateThrottle};

    use super::CallMeter;
    use crate::pace::ClientPace;
    use crate::paces::PaceKey;

    /// The `polite_wait_seconds` values by cause after `f`.
    fn waits(f: impl FnOnce()) -> Vec<(String, Vec<f64>)> {
        let recorder = DebuggingRecorder::new();
        let snap = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, f);
        let mut out: Vec<(String, Vec<f64>)> = snap
            .snapshot()
            .into_vec()
            .into_iter()
            .filter_map(|(k, _, _, v)| {
                let (_, key) = k.into_parts();
                let cause = key
                    .labels()
                    .find(|l| l.key() == "cause")?
                    .value()
                    .to_owned();
                match v {
                    DebugValue::Histogram(v) => Some((cause, v.iter().map(|x| x.0).collect())),
                    _ => None,
                }
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    #[test]
    fn a_held_send_is_a_wait_by_the_limit_that_refused_it() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        let throttle = RateThrottle::new(1, s(1))
            .unwrap()
            .with_margin(Duration::ZERO);
        let shared = Arc::new(Mutex::new(ClientPace::new(Some(throttle))));
        let got = waits(|| {
            let meter = CallMeter::start("send", &PaceKey::new("http://a:80"), &shared, t0);
            let mut pace = meter.pace(Arc::clone(&shared));
            assert_eq!(pace.acquire(t0), Ok(()));
            // The window refuses from 0.3 s to 1 s: 0.7 s under `pace`.
            assert!(pace.acquire(t0 + ms(300)).is_err());
            assert_eq!(pace.acquire(t0 + s(1)), Ok(()));
            // Another call's 429 cools the pace down to 4 s (2 s under
            // `cool_down`); then the window holds the next send to 5 s.
            shared.lock().unwrap().cool_down(t0 + s(4));
            assert!(pace.acquire(t0 + s(2)).is_err());
            assert_eq!(pace.acquire(t0 + s(4)), Ok(()));
            assert!(pace.acquire(t0 + s(4)).is_err());
            assert_eq!(pace.acquire(t0 + s(5)), Ok(()));
            // Ended while refused: the time up to the last ask.
            assert!(pace.acquire(t0 + s(5)).is_err());
            assert!(pace.acquire(t0 + s(5) + ms(500)).is_err());
            drop(pace);
        });
        assert_eq!(
            got,
            vec![
                ("cool_down".to_owned(), vec![2.0]),
                ("pace".to_owned(), vec![0.7, 1.0, 0.5]),
            ]
        );
    }
}
