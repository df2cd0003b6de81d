//! The handles a client holds per key: [`RedisPace`] (a
//! [`FleetPace`]) and [`RedisBudget`] (a [`FleetBudget`]). Both answer
//! from the shared state at once and wake the worker when Redis has to be
//! asked or told.

use std::sync::Arc;
use std::time::Instant;

use polite_client::{FleetBudget, FleetGrant, FleetPace};
use polite_core::adaptive::Answered;
use polite_core::budget::{RetryBucket, RetryBudget};
use polite_core::pace::PaceLimit;
use polite_core::ratelimit::RateLimitInfo;
use polite_core::{Reply, RetryClass};

use crate::state::Shared;

/// One key's fleet-wide pace in this process (from
/// [`RedisFleet`](crate::RedisFleet)'s `join`): grants from its lease of
/// permits; without one, asks the worker for more and refuses for a
/// moment (at most the fleet's poll interval), or until the instant Redis
/// named; [`FleetGrant::Unavailable`] while Redis does not answer (or has
/// not answered an ask for longer than the fleet's timeout).
#[derive(Debug)]
pub struct RedisPace {
    pub(crate) shared: Arc<Shared>,
    pub(crate) key: String,
}

impl FleetPace for RedisPace {
    fn acquire(&mut self, now: Instant) -> FleetGrant {
        let tuning = self.shared.tuning;
        let mut st = self.shared.lock();
        let up = st.up;
        let Some(k) = st.keys.get_mut(&self.key) else {
            return FleetGrant::Unavailable;
        };
        while let Some(&(id, until)) = k.stock.front() {
            if until > now {
                break;
            }
            k.returned.push(id);
            k.stock.pop_front();
            k.dirty_since.get_or_insert(now);
        }
        if let Some((until, by)) = k.not_before {
            if now >= until {
                k.not_before = None;
            } else if k.stock.is_empty() || matches!(by, PaceLimit::CoolDown) {
                // A send that waits for the instant (a machine asks again
                // then, or after an answer: at most `max_lease` counted):
                // the step at the instant asks for it too.
                k.waiting = (k.waiting + 1).min(tuning.max_lease);
                return FleetGrant::Refused { until, by };
            }
            // A window's (or the adaptive rate's) refusal is about the
            // permits Redis did not grant: those it did grant with it
            // (a partial grant) stay usable for their lease. Stranded,
            // each held a slot of the window unused (a quota of 5 sent 4
            // per window) and came back with a round trip of its own.
        }
        if k.stock.pop_front().is_some() {
            k.note_send(now, false, &tuning);
            k.used += 1;
            k.asked_since = None;
            // Lease the next permits before they are asked for: when half
            // the last lease is used.
            let left = u32::try_from(k.stock.len()).unwrap_or(u32::MAX);
            // Not while Redis refuses: it would refuse again.
            let refill = up
                && k.not_before.is_none()
                && left.saturating_mul(2) <= k.last_lease.saturating_sub(1);
            if refill {
                k.wanted = k.wanted.max(1);
            }
            st.stats.used += 1;
            drop(st);
            if refill {
                self.shared.wake.notify_all();
            }
            return FleetGrant::Granted;
        }
        // Redis lost the log: no lease until it holds every process's
        // recent sends again (one hold after its rebirth).
        let recovering = up && k.recovering_until.is_some_and(|t| now < t);
        let mut stalled = false;
        if !recovering {
            k.wanted = (k.wanted + 1).min(tuning.max_lease);
            let since = *k.asked_since.get_or_insert(now);
            stalled = now.saturating_duration_since(since) >= tuning.timeout;
        }
        if !up || stalled || recovering {
            if up && stalled {
                // Redis has not answered for the fleet's timeout: every
                // key paces locally until it does, and the observer hears
                // it now, with the first local send.
                tracing::warn!(target: "polite", "fleet: Redis does not answer in time; pacing locally");
                st.up = false;
                st.tell(polite_core::Notice::FleetUnavailable);
            }
            // This process's share, counting what the fleet granted it
            // just before: falling back is no licence to burst.
            let Some(k) = st.keys.get_mut(&self.key) else {
                return FleetGrant::Unavailable;
            };
            if let Some(Err((until, by))) = k.local_share(now, &tuning) {
                drop(st);
                self.shared.wake.notify_all();
                return FleetGrant::Refused { until, by };
            }
            // Counted as sent: the local pace's own log holds no more than
            // this (same share, a shorter window), so it grants too.
            k.note_send(now, true, &tuning);
            st.stats.local += 1;
            drop(st);
            self.shared.wake.notify_all();
            return FleetGrant::Unavailable;
        }
        drop(st);
        self.shared.wake.notify_all();
        FleetGrant::Refused {
            until: now + tuning.poll,
            by: PaceLimit::Unknown,
        }
    }

    fn cool_down(&mut self, until: Instant) {
        let mut st = self.shared.lock();
        if let Some(k) = st.keys.get_mut(&self.key)
            && k.cool_push.is_none_or(|t| t < until)
        {
            k.cool_push = Some(until);
            drop(st);
            self.shared.wake.notify_all();
        }
    }

    fn observe(&mut self, now: Instant, info: &RateLimitInfo) {
        if let Some(pause) = info.pause
            && let Some(until) = now.checked_add(pause)
        {
            self.cool_down(until);
        }
        if let Some(q) = info.quota {
            let mut st = self.shared.lock();
            if let Some(k) = st.keys.get_mut(&self.key) {
                let learnt = Some((q.limit, q.window));
                if k.learnt != learnt {
                    k.learnt = learnt;
                    drop(st);
                    self.shared.wake.notify_all();
                }
            }
        }
    }

    fn on_answer(&mut self, answer: Answered) {
        let mut st = self.shared.lock();
        let Some(k) = st.keys.get_mut(&self.key) else {
            return;
        };
        if !k.adaptive {
            return;
        }
        if answer.throttled {
            k.throttled += 1;
            k.throttled_sent = k.throttled_sent.max(Some(answer.sent));
            k.touch(answer.at);
            drop(st);
            self.shared.wake.notify_all();
        } else {
            k.succeeded += 1;
            k.touch(answer.at);
        }
    }
}

impl Drop for RedisPace {
    /// Gives the unused permits back (the worker tells Redis).
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        if let Some(k) = st.keys.get_mut(&self.key) {
            k.handles = k.handles.saturating_sub(1);
            if k.handles == 0 {
                let ids: Vec<u64> = k.stock.drain(..).map(|(id, _)| id).collect();
                if !ids.is_empty() {
                    k.returned.extend(ids);
                    k.touch(Instant::now());
                }
                k.wanted = 0;
            }
        }
        drop(st);
        self.shared.wake.notify_all();
    }
}

/// One key's fleet-wide retry budget in this process: withdraws and
/// deposits on a local view of the shared bucket at once; the worker adds
/// the net change to the shared tokens (clamped to 0 and the capacity) with
/// the key's next step and refreshes the view. While Redis does not
/// answer, the view is the budget (it keeps what it last heard).
#[derive(Debug)]
pub struct RedisBudget {
    pub(crate) shared: Arc<Shared>,
    pub(crate) key: String,
}

impl RedisBudget {
    /// Applies `f` to the view, counting the tokens it took or gave.
    fn change(&mut self, f: impl FnOnce(&mut RetryBucket) -> Option<u32>) -> Option<u32> {
        let mut st = self.shared.lock();
        let k = st.keys.get_mut(&self.key)?;
        let view = k.budget.as_mut()?;
        let before = i64::from(view.bucket.tokens());
        let r = f(&mut view.bucket);
        view.pending += before - i64::from(view.bucket.tokens());
        k.touch(Instant::now());
        r
    }
}

impl RetryBudget for RedisBudget {
    fn withdraw(&mut self, class: RetryClass, last: Reply) -> Option<u32> {
        self.change(|b| b.withdraw(class, last))
    }

    fn deposit(&mut self, last_cost: Option<u32>) {
        self.change(|b| {
            b.deposit(last_cost);
            None
        });
    }
}

impl FleetBudget for RedisBudget {
    fn tokens(&self) -> u32 {
        let st = self.shared.lock();
        st.keys
            .get(&self.key)
            .and_then(|k| k.budget)
            .map_or(0, |b| b.bucket.tokens())
    }
}

impl Drop for RedisBudget {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        if let Some(k) = st.keys.get_mut(&self.key) {
            k.handles = k.handles.saturating_sub(1);
        }
    }
}
