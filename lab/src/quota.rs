//! Quota accounting (fixed and sliding windows).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::config::{Quota, WindowKind};

/// One quota's counter.
#[derive(Debug)]
pub(crate) struct QuotaState {
    pub(crate) quota: Quota,
    /// Fixed window: index of the current window and requests counted in it.
    window_index: u128,
    count: u64,
    /// Sliding window: arrival instants of counted requests, oldest first.
    arrivals: VecDeque<Instant>,
}

/// What a quota says about a request (after it was counted or not).
#[derive(Clone, Debug)]
pub(crate) struct QuotaView {
    pub(crate) limit: u32,
    pub(crate) window: Duration,
    pub(crate) name: String,
    pub(crate) remaining: u64,
    /// Time until the window frees (fixed: the next boundary; sliding: the
    /// oldest counted request ages out; zero when nothing is counted).
    pub(crate) reset: Duration,
}

/// The decision for one request over every quota that matches it.
#[derive(Clone, Debug)]
pub(crate) struct Admission {
    /// `Some(wait)` when refused: the longest wait among the refusing quotas.
    pub(crate) refused_for: Option<Duration>,
    /// The quota whose numbers go into the headers: the refusing one with the
    /// longest wait, else the one with the fewest remaining.
    pub(crate) binding: Option<QuotaView>,
}

impl QuotaState {
    pub(crate) fn new(quota: Quota) -> Self {
        QuotaState {
            quota,
            window_index: 0,
            count: 0,
            arrivals: VecDeque::new(),
        }
    }

    /// Rolls the window forward to `now`; returns the requests counted in it.
    fn used(&mut self, now: Instant, started: Instant) -> u64 {
        let window = self.quota.window;
        match self.quota.kind {
            WindowKind::Fixed => {
                let index =
                    now.saturating_duration_since(started).as_nanos() / window.as_nanos().max(1);
                if index != self.window_index {
                    self.window_index = index;
                    self.count = 0;
                }
                self.count
            }
            WindowKind::Sliding => {
                while self.arrivals.front().is_some_and(|t| *t + window <= now) {
                    self.arrivals.pop_front();
                }
                self.arrivals.len() as u64
            }
        }
    }

    /// Time until one more request would fit (only meaningful when full).
    fn wait(&self, now: Instant, started: Instant) -> Duration {
        let window = self.quota.window;
        match self.quota.kind {
            WindowKind::Fixed => self.fixed_end(started).saturating_duration_since(now),
            WindowKind::Sliding => {
                // The request at index len - limit must age out.
                let len = self.arrivals.len();
                let idx = len.saturating_sub(self.quota.limit as usize);
                match self.arrivals.get(idx) {
                    Some(t) => (*t + window).saturating_duration_since(now),
                    None => window,
                }
            }
        }
    }

    fn fixed_end(&self, started: Instant) -> Instant {
        let window = self.quota.window;
        let nanos = window.as_nanos().saturating_mul(self.window_index + 1);
        let end = Duration::new(
            u64::try_from(nanos / 1_000_000_000).unwrap_or(u64::MAX / 2),
            u32::try_from(nanos % 1_000_000_000).unwrap_or(0),
        );
        started.checked_add(end).unwrap_or(started)
    }

    fn record(&mut self, now: Instant) {
        match self.quota.kind {
            WindowKind::Fixed => self.count += 1,
            WindowKind::Sliding => self.arrivals.push_back(now),
        }
    }

    fn view(&mut self, now: Instant, started: Instant) -> QuotaView {
        let used = self.used(now, started);
        let reset = match self.quota.kind {
            WindowKind::Fixed => self.fixed_end(started).saturating_duration_since(now),
            WindowKind::Sliding => self.arrivals.front().map_or(Duration::ZERO, |t| {
                (*t + self.quota.window).saturating_duration_since(now)
            }),
        };
        QuotaView {
            limit: self.quota.limit,
            window: self.quota.window,
            name: self.quota.name.clone(),
            remaining: u64::from(self.quota.limit).saturating_sub(used),
            reset,
        }
    }
}

/// Decides a request on `path` arriving at `now` and counts it.
pub(crate) fn admit(
    states: &mut [QuotaState],
    path: &str,
    now: Instant,
    started: Instant,
    count_refused: bool,
) -> Admission {
    let matching: Vec<usize> = states
        .iter()
        .enumerate()
        .filter(|(_, s)| s.quota.scope.matches(path))
        .map(|(i, _)| i)
        .collect();
    if matching.is_empty() {
        return Admission {
            refused_for: None,
            binding: None,
        };
    }
    let mut refusals: Vec<(usize, Duration)> = Vec::new();
    for &i in &matching {
        let s = &mut states[i];
        if s.used(now, started) >= u64::from(s.quota.limit) {
            refusals.push((i, s.wait(now, started)));
        }
    }
    let refused = !refusals.is_empty();
    if !refused || count_refused {
        for &i in &matching {
            states[i].record(now);
        }
    }
    let longest = refusals.iter().max_by_key(|(_, w)| *w).copied();
    let binding = match longest {
        Some((i, _)) => states[i].view(now, started),
        None => {
            let mut views: Vec<QuotaView> = matching
                .iter()
                .map(|&i| states[i].view(now, started))
                .collect();
            // Fewest remaining first; ties keep configuration order.
            views.sort_by_key(|v| v.remaining);
            views.swap_remove(0)
        }
    };
    Admission {
        refused_for: longest.map(|(_, w)| w),
        binding: Some(binding),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PathMatch;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn fixed_window_counts_and_resets_at_boundaries() {
        let t0 = Instant::now();
        let mut qs = vec![QuotaState::new(Quota::fixed(2, ms(100)))];
        assert!(admit(&mut qs, "/a", t0, t0, false).refused_for.is_none());
        assert!(
            admit(&mut qs, "/a", t0 + ms(10), t0, false)
                .refused_for
                .is_none()
        );
        let third = admit(&mut qs, "/a", t0 + ms(30), t0, false);
        assert_eq!(third.refused_for, Some(ms(70)));
        assert_eq!(third.binding.map(|b| b.remaining), Some(0));
        // Next window.
        let fourth = admit(&mut qs, "/a", t0 + ms(100), t0, false);
        assert!(fourth.refused_for.is_none());
        assert_eq!(fourth.binding.map(|b| b.remaining), Some(1));
    }

    #[test]
    fn sliding_window_frees_when_the_oldest_ages_out() {
        let t0 = Instant::now();
        let mut qs = vec![QuotaState::new(Quota::sliding(2, ms(100)))];
        assert!(admit(&mut qs, "/a", t0, t0, false).refused_for.is_none());
        assert!(
            admit(&mut qs, "/a", t0 + ms(40), t0, false)
                .refused_for
                .is_none()
        );
        assert_eq!(
            admit(&mut qs, "/a", t0 + ms(60), t0, false).refused_for,
            Some(ms(40))
        );
        assert!(
            admit(&mut qs, "/a", t0 + ms(100), t0, false)
                .refused_for
                .is_none()
        );
        assert_eq!(
            admit(&mut qs, "/a", t0 + ms(120), t0, false).refused_for,
            Some(ms(20))
        );
    }

    #[test]
    fn refused_requests_count_only_when_configured() {
        let t0 = Instant::now();
        let mut qs = vec![QuotaState::new(Quota::sliding(1, ms(100)))];
        admit(&mut qs, "/a", t0, t0, true);
        // Refused at 50 ms but counted: it holds the window until 150 ms.
        assert!(
            admit(&mut qs, "/a", t0 + ms(50), t0, true)
                .refused_for
                .is_some()
        );
        assert_eq!(
            admit(&mut qs, "/a", t0 + ms(110), t0, true).refused_for,
            Some(ms(40))
        );
    }

    #[test]
    fn scope_limits_a_quota() {
        let t0 = Instant::now();
        let mut qs = vec![QuotaState::new(
            Quota::fixed(1, ms(100)).on(PathMatch::prefix("/items/")),
        )];
        admit(&mut qs, "/items/a", t0, t0, false);
        assert!(
            admit(&mut qs, "/items/b", t0, t0, false)
                .refused_for
                .is_some()
        );
        let other = admit(&mut qs, "/runs/x", t0, t0, false);
        assert!(other.refused_for.is_none() && other.binding.is_none());
    }
}
