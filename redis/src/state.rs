//! What a process knows of the fleet: one [`KeyState`] per key (its lease
//! of permits, the refusal it last heard, the changes it has still to
//! share), whether Redis answers, and the server clock's mapping onto this
//! process's monotonic clock. Shared by the pace handles (which answer
//! from it at once) and the worker (which talks to Redis).

use std::collections::{HashMap, VecDeque};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use polite_core::Notice;
use polite_core::budget::RetryBucket;
use polite_core::pace::PaceLimit;

use crate::step::Step;

/// The Redis server's clock mapped onto the monotonic clock, from one round
/// trip: `server_us` was read at about `mid` (the midpoint of the trip).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ServerClock {
    pub(crate) mid: Instant,
    pub(crate) server_us: u64,
}

impl ServerClock {
    /// The round trip that started at `sent` and ended at `back`, whose
    /// server answered at `server_us`.
    pub(crate) fn measured(sent: Instant, back: Instant, server_us: u64) -> ServerClock {
        ServerClock {
            mid: sent + back.saturating_duration_since(sent) / 2,
            server_us,
        }
    }

    /// The monotonic instant of a server instant.
    pub(crate) fn local(&self, us: u64) -> Instant {
        if us >= self.server_us {
            self.mid + Duration::from_micros(us - self.server_us)
        } else {
            let back = Duration::from_micros(self.server_us - us);
            self.mid.checked_sub(back).unwrap_or(self.mid)
        }
    }

    /// A guess without a round trip: the server's clock is this host's
    /// wall clock (Redis' `TIME` is the Unix time of its host). Used only to
    /// seed sends made before Redis ever answered.
    pub(crate) fn from_wall() -> ServerClock {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        ServerClock {
            mid: Instant::now(),
            server_us: u64::try_from(since.as_micros()).unwrap_or(u64::MAX),
        }
    }

    /// The server instant of a monotonic instant.
    pub(crate) fn server(&self, t: Instant) -> u64 {
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        if t >= self.mid {
            self.server_us.saturating_add(us(t - self.mid))
        } else {
            self.server_us.saturating_sub(us(self.mid - t))
        }
    }
}

/// The settings every handle and the worker share.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tuning {
    pub(crate) timeout: Duration,
    pub(crate) lease: Duration,
    pub(crate) max_lease: u32,
    pub(crate) margin: Duration,
    pub(crate) retry_every: Duration,
    pub(crate) ttl: Duration,
    pub(crate) poll: Duration,
    pub(crate) flush_every: Duration,
    /// How many processes share the quota (the local fallback's share).
    pub(crate) size: u32,
}

/// A key's view of the shared retry budget.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BudgetView {
    pub(crate) bucket: RetryBucket,
    /// Tokens taken here since the last step, less those given back.
    pub(crate) pending: i64,
}

/// One key, as this process knows it.
#[derive(Debug, Default)]
pub(crate) struct KeyState {
    /// Pace and budget handles alive.
    pub(crate) handles: u32,
    pub(crate) limit: u32,
    pub(crate) window: Duration,
    pub(crate) learn_max: u32,
    pub(crate) adaptive: bool,
    /// Leased permits: id in the send log, and when they may no longer be used.
    pub(crate) stock: VecDeque<(u64, Instant)>,
    /// Permits asked for since the last step.
    pub(crate) wanted: u32,
    /// Permits to ask for at the instant a window's refusal named
    /// ([`not_before`](Self::not_before)): the process's demand of the
    /// window before (its sends of the last hold, less the permits the
    /// refused step did grant), and the asks refused meanwhile (a batch
    /// asks again only then). The first ask then leases them all.
    pub(crate) waiting: u32,
    /// Since when an ask is waiting for the worker.
    pub(crate) asked_since: Option<Instant>,
    /// Permits granted here since the last step (sizes the next lease).
    pub(crate) used: u32,
    /// Permits the last step granted.
    pub(crate) last_lease: u32,
    pub(crate) in_flight: bool,
    /// No grant before this instant (the fleet said so).
    pub(crate) not_before: Option<(Instant, PaceLimit)>,
    pub(crate) returned: Vec<u64>,
    pub(crate) cool_push: Option<Instant>,
    pub(crate) learnt: Option<(u64, Duration)>,
    pub(crate) learnt_pushed: Option<(u64, Duration)>,
    pub(crate) throttled: u32,
    /// The latest send among the `throttled` answers.
    pub(crate) throttled_sent: Option<Instant>,
    pub(crate) succeeded: u32,
    pub(crate) budget: Option<BudgetView>,
    /// When the oldest change not shared yet was made.
    pub(crate) dirty_since: Option<Instant>,
    /// This process's recent sends while a window may be in force (newest
    /// last): fleet grants (`false`) and local sends Redis does not know of
    /// yet (`true`). They bound the local fallback (this process's share
    /// counts its sends just before Redis failed) and seed the log when
    /// Redis answers again.
    pub(crate) mine: VecDeque<(Instant, bool)>,
    /// The key's epoch on Redis as last seen (0: none yet).
    pub(crate) epoch: u64,
    /// The next step must seed the log with [`mine`](Self::mine).
    pub(crate) reseed: bool,
    /// Redis lost the log: pace on the local share until then.
    pub(crate) recovering_until: Option<Instant>,
}

/// The most sends [`KeyState::mine`] keeps (a window's worth is enough).
const MINE_MAX: usize = 10_000;

impl KeyState {
    /// Whether the key must go to Redis now (an ask, a cool-down, a new
    /// quota, a throttle), or soon (answers, returns, budget changes that
    /// wait to ride along with an ask, at most `flush_every`).
    pub(crate) fn due(&self, now: Instant, flush_every: Duration) -> bool {
        if self.in_flight {
            return false;
        }
        self.wanted > 0
            || self.reseed
            || self.cool_push.is_some()
            || self.learnt != self.learnt_pushed
            || self.throttled > 0
            || self
                .dirty_since
                .is_some_and(|d| now.saturating_duration_since(d) >= flush_every)
            || (self.handles == 0 && self.dirty_since.is_some())
    }

    /// The window in force and whether it was learnt: configured, else
    /// learnt from the server (capped), as the step decides.
    pub(crate) fn window_in_force(&self) -> Option<(u32, Duration, bool)> {
        if self.limit > 0 && !self.window.is_zero() {
            return Some((self.limit, self.window, false));
        }
        let (l, w) = self.learnt.filter(|_| self.learn_max > 0)?;
        let l = u32::try_from(l).unwrap_or(u32::MAX).min(self.learn_max);
        (l > 0 && !w.is_zero()).then_some((l, w, true))
    }

    /// Whether the fleet logs this key's grants (see `step.lua`).
    fn logged(&self) -> bool {
        self.limit > 0 || self.learn_max > 0
    }

    /// Notes a send at `now` (`local`: on the local pace), dropping the
    /// sends that have aged out of every window the fleet holds them for.
    pub(crate) fn note_send(&mut self, now: Instant, local: bool, tuning: &Tuning) {
        if !self.logged() {
            return;
        }
        self.forget_old(now, tuning);
        // No window holds more: the configured or the largest learnable.
        let cap = usize::try_from(self.limit.max(self.learn_max))
            .unwrap_or(MINE_MAX)
            .clamp(1, MINE_MAX);
        while self.mine.len() >= cap {
            self.mine.pop_front();
        }
        self.mine.push_back((now, local));
        if local {
            self.reseed = true;
        }
    }

    /// Drops the sends older than the hold of the window in force.
    pub(crate) fn forget_old(&mut self, now: Instant, tuning: &Tuning) {
        if let Some((_, window, _)) = self.window_in_force() {
            let hold = window + tuning.lease + tuning.margin;
            while self.mine.front().is_some_and(|(t, _)| *t + hold <= now) {
                self.mine.pop_front();
            }
        }
    }

    /// While Redis does not answer: whether this process may send at `now`
    /// on its share of the window in force (the quota divided by the fleet
    /// size, its sends granted by the fleet just before counted), or the
    /// instant it may. `None`: no window, the local pace alone decides.
    pub(crate) fn local_share(
        &mut self,
        now: Instant,
        tuning: &Tuning,
    ) -> Option<Result<(), (Instant, PaceLimit)>> {
        let (limit, window, learned) = self.window_in_force()?;
        self.forget_old(now, tuning);
        let share = limit.div_ceil(tuning.size.max(1)).max(1) as usize;
        if self.mine.len() < share {
            return Some(Ok(()));
        }
        let hold = window + tuning.lease + tuning.margin;
        let frees = self.mine[self.mine.len() - share].0 + hold;
        let by = PaceLimit::Window {
            limit: u32::try_from(share).unwrap_or(u32::MAX),
            window,
            learned,
        };
        Some(if frees > now {
            Err((frees, by))
        } else {
            Ok(())
        })
    }

    pub(crate) fn touch(&mut self, now: Instant) {
        self.dirty_since.get_or_insert(now);
    }

    /// The step that shares this key's changes and asks for its permits.
    pub(crate) fn step(&self, clock: Option<ServerClock>, tuning: &Tuning) -> Step {
        let now = Instant::now();
        let recovering = self.recovering_until.is_some_and(|t| now < t);
        // Redis named an instant before which it grants nothing: a step
        // before it only shares (asked then, it would be refused again,
        // and the asks waiting for the instant would be spent on it),
        // unless it brings a new quota, which may grant sooner.
        let held_back =
            self.not_before.is_some_and(|(t, _)| now < t) && self.learnt == self.learnt_pushed;
        let want = if self.handles == 0 || recovering || held_back {
            0
        } else {
            self.wanted
                .max(self.waiting)
                .max(self.used)
                .max(self.last_lease)
                .min(tuning.max_lease)
        };
        Step {
            want,
            limit: self.limit,
            window: self.window,
            hold_extra: tuning.lease + tuning.margin,
            gather: tuning.lease,
            demand: self.demand(now, tuning).max(want),
            cool_until_us: match (self.cool_push, clock) {
                (Some(t), Some(c)) => c.server(t),
                _ => 0,
            },
            learnt: self.learnt.filter(|_| self.learnt != self.learnt_pushed),
            learn_max: self.learn_max,
            throttled: self.throttled,
            throttled_sent_us: match (self.throttled_sent, clock) {
                (Some(t), Some(c)) => c.server(t),
                // No clock yet: the send was made before any cut this process saw.
                _ => u64::MAX,
            },
            succeeded: self.succeeded,
            adaptive: self.adaptive,
            budget_cap: self.budget.map_or(0, |b| b.bucket.capacity()),
            budget_delta: self.budget.map_or(0, |b| b.pending),
            ttl: tuning.ttl,
            returned: self.returned.clone(),
            epoch: self.epoch,
            seed_local: self.seeds(clock, true),
            seed_granted: self.seeds(clock, false),
        }
    }

    /// The fleet's grants this process used in the last hold of the window
    /// in force (at most `max_lease`): what it will likely want again
    /// once a window refuses.
    fn demand(&self, now: Instant, tuning: &Tuning) -> u32 {
        let Some((_, window, _)) = self.window_in_force() else {
            return 0;
        };
        let hold = window + tuning.lease + tuning.margin;
        let n = self
            .mine
            .iter()
            .filter(|(t, local)| !*local && *t + hold > now)
            .count();
        u32::try_from(n).unwrap_or(u32::MAX).min(tuning.max_lease)
    }

    /// The sends of [`mine`](Self::mine) to seed the log with (`local`
    /// ones, or granted ones), in server µs; none unless
    /// [`reseed`](Self::reseed).
    fn seeds(&self, clock: Option<ServerClock>, local: bool) -> Vec<u64> {
        if !self.reseed {
            return Vec::new();
        }
        let clock = clock.unwrap_or_else(ServerClock::from_wall);
        self.mine
            .iter()
            .filter(|(_, l)| *l == local)
            .map(|(t, _)| clock.server(*t))
            .collect()
    }
}

/// Counters for tests and benchmarks.
///
/// ```
/// let s = polite_redis::FleetStats::default();
/// assert_eq!((s.steps, s.failures, s.granted), (0, 0, 0));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FleetStats {
    /// Round trips that answered (one Lua step each).
    pub steps: u64,
    /// Round trips (or connects) that failed.
    pub failures: u64,
    /// Permits granted by Redis.
    pub granted: u64,
    /// Permits used for a send.
    pub used: u64,
    /// Asks answered by the local fallback while Redis did not answer.
    pub local: u64,
}

/// Everything the handles and the worker share.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) keys: HashMap<String, KeyState>,
    /// Whether Redis answered the last round trip.
    pub(crate) up: bool,
    /// When the last round trip failed.
    pub(crate) down_since: Option<Instant>,
    /// Whether the observer has heard [`Notice::FleetRefused`] since Redis
    /// last answered (a refusal is told even when a stall said
    /// `FleetUnavailable` first).
    pub(crate) refusal_told: bool,
    /// Notices not yet taken, oldest first (they alternate: unavailable,
    /// restored, ...; at most a few flaps are kept, see [`State::tell`]).
    pub(crate) notices: VecDeque<Notice>,
    pub(crate) stop: bool,
    pub(crate) clock: Option<ServerClock>,
    pub(crate) stats: FleetStats,
}

impl State {
    /// Queues a notice for the observer. A change is never overwritten by
    /// the next one before anyone took it (Redis paused and back between
    /// two records must still say it was unavailable); a Redis that flaps
    /// while nobody listens keeps at most two flaps (the oldest pair goes).
    pub(crate) fn tell(&mut self, notice: Notice) {
        self.notices.push_back(notice);
        while self.notices.len() > 4 {
            self.notices.pop_front();
            self.notices.pop_front();
        }
    }
}

/// [`State`] behind a lock, and the worker's wake-up.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) state: Mutex<State>,
    pub(crate) wake: Condvar,
    pub(crate) tuning: Tuning,
}

impl Shared {
    pub(crate) fn new(tuning: Tuning) -> Shared {
        Shared {
            state: Mutex::new(State {
                keys: HashMap::new(),
                up: true,
                down_since: None,
                refusal_told: false,
                notices: VecDeque::new(),
                stop: false,
                clock: None,
                stats: FleetStats::default(),
            }),
            wake: Condvar::new(),
            tuning,
        }
    }

    /// The state, a poisoned lock recovered (every update leaves it valid).
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_clock_maps_both_ways_around_the_midpoint() {
        let t0 = Instant::now();
        let c = ServerClock::measured(t0, t0 + Duration::from_millis(2), 5_000_000);
        assert_eq!(c.mid, t0 + Duration::from_millis(1));
        assert_eq!(c.local(5_000_000), c.mid);
        assert_eq!(c.local(5_250_000), c.mid + Duration::from_millis(250));
        assert_eq!(c.local(4_999_000), t0);
        assert_eq!(c.server(c.mid + Duration::from_secs(1)), 6_000_000);
        assert_eq!(c.server(t0), 4_999_000);
    }

    #[test]
    fn a_notice_is_not_overwritten_before_it_is_taken() {
        let shared = Shared::new(Tuning {
            timeout: Duration::from_millis(200),
            lease: Duration::from_millis(100),
            max_lease: 8,
            margin: Duration::from_millis(50),
            retry_every: Duration::from_millis(500),
            ttl: Duration::from_secs(600),
            poll: Duration::from_millis(2),
            flush_every: Duration::from_millis(100),
            size: 1,
        });
        let mut st = shared.lock();
        st.tell(Notice::FleetUnavailable);
        st.tell(Notice::FleetRestored);
        assert_eq!(st.notices.pop_front(), Some(Notice::FleetUnavailable));
        assert_eq!(st.notices.pop_front(), Some(Notice::FleetRestored));
        assert_eq!(st.notices.pop_front(), None);
        // Ten flaps nobody heard: the last two, still alternating.
        for _ in 0..10 {
            st.tell(Notice::FleetUnavailable);
            st.tell(Notice::FleetRestored);
        }
        let left: Vec<_> = st.notices.drain(..).collect();
        assert_eq!(
            left,
            [Notice::FleetUnavailable, Notice::FleetRestored].repeat(2)
        );
    }
}
