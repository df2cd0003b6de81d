//! How a [`PollMachine`] takes an answer: what it means (a terminal
//! state, a pending job, the rejection of the wait parameter, or a failure
//! for the retry rules of [`crate::decide`]) and when the next poll goes,
//! up to the one final poll at the last useful instant before the deadline.

use std::time::{Duration, Instant};

use rand_core::Rng;

use crate::backoff;
use crate::decide::{Spent, Verdict, classified, judge, later, server_instant};
use crate::input::{JobReport, Reply, Response, SendId};
use crate::outcome::Outcome;
use crate::output::Notice;
use crate::record::{AttemptRecord, DelaySource, PlannedDelay, RetryAfterNote};
use crate::retry_after;

use super::{Phase, PollMachine, PollMode};

/// The least lead of the final poll before the deadline (see
/// [`PollMachine`], "the end of the budget").
const FINAL_LEAD_FLOOR: Duration = Duration::from_millis(10);

impl<R: Rng> PollMachine<R> {
    pub(super) fn on_reply(
        &mut self,
        now: Instant,
        id: SendId,
        reply: Reply,
        response: Option<&Response<'_>>,
    ) {
        // Only the answer to the poll in flight counts; anything else is a
        // late or stray answer and is ignored.
        if !matches!(self.phase, Phase::InFlight(a) if a == id.attempt) || id.item != 0 {
            return;
        }
        // Written in place: the record is the machine's (no 120-byte copy
        // at the end).
        self.record = AttemptRecord {
            request: self.request.id,
            id,
            reply,
            class: None,
            retry_after: RetryAfterNote::Absent,
            next: None,
            outcome: None,
        };
        self.record_fresh = true;
        let stale = match (self.request.generation, response.and_then(|r| r.generation)) {
            (Some(mine), Some(current)) => mine != current,
            _ => false,
        };
        let outcome = if now >= self.deadline {
            Some(Outcome::TimedOut { needed: None })
        } else if stale {
            Some(Outcome::Stale)
        } else {
            self.decide(now, reply, response)
        };
        if let Some(o) = outcome {
            self.record.outcome = Some(o);
            self.finish(o);
        }
    }

    /// What an answer before the deadline means; `Some` ends the wait,
    /// `None` has set the next phase.
    #[inline]
    fn decide(
        &mut self,
        now: Instant,
        reply: Reply,
        response: Option<&Response<'_>>,
    ) -> Option<Outcome> {
        let job = response.and_then(|r| r.job);
        match (reply, job) {
            (Reply::Status(status), Some(JobReport::LongPollUnsupported)) => {
                if !(self.mode == PollMode::LongPoll && self.long_in_flight.is_some()) {
                    // Rejected a parameter it was not sent: do not go round.
                    return Some(Outcome::NotRetryable { status });
                }
                self.spent = Spent::default();
                // The rejection is an answer the machine acts on: its
                // Retry-After counts (SPEC §2.1).
                let server = self.server_delay(response);
                if let Some(o) = self.over_cap(now, server) {
                    return Some(o);
                }
                self.mode = PollMode::Backoff;
                self.notice = Some(Notice::LongPollUnsupported);
                let since_send = now.saturating_duration_since(self.last_send_at);
                self.plan_next(now, since_send, Duration::ZERO, server)
            }
            (Reply::Status(status @ 100..=399), job) if !classified(response) => match job {
                Some(JobReport::State(name)) => match self.policy.terminal_states.find(name) {
                    Some(state) => Some(Outcome::Terminal { state }),
                    None => self.pending(now, response),
                },
                _ => Some(Outcome::NotRetryable { status }),
            },
            (Reply::Status(status @ (0..=99 | 600..)), _) => Some(Outcome::NotRetryable { status }),
            _ => {
                let j = judge(
                    &self.policy.retry,
                    &mut self.spent,
                    self.request.is_replayable(),
                    now,
                    self.deadline,
                    reply,
                    response,
                    &mut self.rng,
                );
                self.record.class = j.class;
                self.record.retry_after = j.note;
                match j.verdict {
                    Verdict::Retry(plan) => {
                        self.record.next = Some(plan);
                        self.phase = Phase::Waiting(plan.send_at);
                        None
                    }
                    Verdict::Stop(o) => Some(o),
                }
            }
        }
    }

    /// What the answer's `Retry-After` asks (noted in the record), if it is
    /// valid.
    #[inline]
    fn server_delay(&mut self, response: Option<&Response<'_>>) -> Option<Duration> {
        let r = response?;
        let value = r.retry_after?;
        match retry_after::server_delay_inline(value, r.date, r.wall_clock) {
            Ok(d) => {
                self.record.retry_after = RetryAfterNote::Valid(d);
                Some(d)
            }
            Err(e) => {
                self.record.retry_after = RetryAfterNote::Rejected(e);
                None
            }
        }
    }

    /// A server delay over the automatic wait cap ends the wait
    /// `RateLimited`: never truncated, never polled early.
    #[inline]
    fn over_cap(&self, now: Instant, server: Option<Duration>) -> Option<Outcome> {
        let limits = self.policy.retry.retry_after;
        let d = server.filter(|d| *d > limits.auto_wait_cap)?;
        Some(Outcome::RateLimited {
            retry_at: Some(server_instant(now, d.max(limits.min))),
        })
    }

    /// A pending answer: plan the next poll.
    #[inline]
    fn pending(&mut self, now: Instant, response: Option<&Response<'_>>) -> Option<Outcome> {
        self.spent = Spent::default();
        let server = self.server_delay(response);
        if let Some(o) = self.over_cap(now, server) {
            return Some(o);
        }
        // `now` is never before the send (`handle` clamps time to the
        // latest instant seen), so one subtraction of instants serves the
        // schedule and the latency.
        let since_send = now.saturating_duration_since(self.last_send_at);
        let schedule = match self.mode {
            // What is left of the least interval between two long polls:
            // `(last_send_at + interval) - now`, without a second
            // subtraction of instants (and zero when that instant is not
            // representable, as before).
            PollMode::LongPoll => {
                let interval = self.policy.min_long_poll_interval;
                let left = interval.saturating_sub(since_send);
                if left.is_zero() || later(self.last_send_at, interval).is_some() {
                    left
                } else {
                    Duration::ZERO
                }
            }
            PollMode::Backoff => {
                let b = &self.policy.backoff;
                let rng = &mut self.rng;
                let d = backoff::delay(b, self.scheduled, || rng.next_u64());
                self.scheduled = self.scheduled.saturating_add(1);
                d
            }
        };
        self.plan_next(now, since_send, schedule, server)
    }

    /// The latency an answer `rtt` after its poll was sent shows: its round
    /// trip, less the wait a long poll asked for when the server held it
    /// that long (a long poll that came back sooner counts whole: the split
    /// is unknown, and more is the careful guess).
    #[inline]
    fn latency(&self, rtt: Duration) -> Duration {
        let held = self
            .long_in_flight
            .map_or(Duration::ZERO, |n| Duration::from_secs(u64::from(n)));
        if rtt >= held { rtt - held } else { rtt }
    }

    /// Plans the next poll after a proper answer (pending, or the rejection
    /// of the wait parameter) at `now`: at `max(schedule, server delay)`,
    /// unless that poll could no longer be answered inside the deadline; then
    /// the one final poll is pulled in to the last useful instant, or the
    /// wait ends `TimedOut`. `Some` ends the wait.
    #[inline(always)]
    pub(super) fn plan_next(
        &mut self,
        now: Instant,
        since_send: Duration,
        schedule: Duration,
        server: Option<Duration>,
    ) -> Option<Outcome> {
        let min = self.policy.retry.retry_after.min;
        let mut delay = schedule;
        let mut source = DelaySource::Schedule;
        if let Some(d) = server {
            // Within the cap (checked before), so clamping only raises it.
            let clamped = d.max(min);
            if clamped > delay {
                delay = clamped;
                source = if clamped > d {
                    DelaySource::Clamp
                } else {
                    DelaySource::RetryAfter
                };
            }
        }
        // The latency: a poll sent at `t` is expected back at `t + rtt`. The
        // last useful instant leaves twice that.
        let rtt = self.latency(since_send);
        // `rtt + rtt`, not `rtt * 2`: the same value (both saturate), without
        // the multiply's carry of nanoseconds into seconds by division.
        let lead = rtt.saturating_add(rtt).max(FINAL_LEAD_FLOOR);
        // Most polls: the poll was sent with at least `room` before
        // the deadline, and `since_send + delay + lead` fits in it, so
        // `now + delay <= deadline - lead` (both representable): the
        // schedule's poll is answered in time, as the comparison of instants
        // below would find, without its subtraction (nor, for a poll due at
        // once, the addition).
        if self.roomy_send
            && since_send
                .checked_add(delay)
                .and_then(|d| d.checked_add(lead))
                .is_some_and(|d| d <= self.room)
            && let Some(due) = if delay.is_zero() {
                Some(now)
            } else {
                later(now, delay)
            }
        {
            return self.plan_at(due, delay, source);
        }
        let due = later(now, delay);
        let server_at = server.map(|d| server_instant(now, d.max(min)));
        let last_useful = self.deadline.checked_sub(lead);
        let (send_at, wait) = match (due, last_useful) {
            // `due - now` is `delay`, exactly.
            (Some(due), Some(last)) if due <= last => (due, delay),
            _ => {
                // The schedule's poll would come back too late: poll at the
                // last useful instant instead (never before the server's
                // time), once per wait, if that poll can still be answered
                // inside the deadline.
                let at = [Some(now), server_at, last_useful]
                    .into_iter()
                    .flatten()
                    .max()
                    .unwrap_or(now);
                let early = due.is_none_or(|due| at < due);
                let in_time = at.checked_add(rtt).is_some_and(|t| t < self.deadline);
                if !in_time || (early && self.pulled_in) {
                    return Some(Outcome::TimedOut {
                        needed: due.filter(|_| !delay.is_zero()),
                    });
                }
                self.pulled_in |= early;
                (at, at.saturating_duration_since(now))
            }
        };
        self.plan_at(send_at, wait, source)
    }

    /// The next poll goes at `send_at`, `wait` from now.
    #[inline(always)]
    pub(super) fn plan_at(
        &mut self,
        send_at: Instant,
        wait: Duration,
        source: DelaySource,
    ) -> Option<Outcome> {
        self.record.next = Some(PlannedDelay {
            delay: wait,
            source,
            send_at,
        });
        self.phase = if wait.is_zero() {
            Phase::Ready
        } else {
            Phase::Waiting(send_at)
        };
        None
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant, UNIX_EPOCH};

    use rand_core::Rng;

    use crate::PollPolicy;
    use crate::input::{Event, JobReport, Response, TransportErrorKind};
    use crate::output::Action;
    use crate::request::{Method, RequestId, RequestInfo};
    use crate::rng::SplitMix64;

    use super::PollMachine;

    /// The planning's shortcut (a poll sent with `room` left) decides as
    /// the comparison of instants does: the same machine with the shortcut
    /// off (`roomy_until: None`) answers the same actions and records to
    /// the same inputs, over long waits that cross `deadline - room`.
    #[test]
    fn roomy_planning_decides_as_the_instants_do() {
        // Any instant will do (the machine never reads the clock); a fixed
        // one, as the other unit tests take it.
        static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        #[allow(clippy::disallowed_methods)] // the one clock read: an arbitrary origin
        let t0 = *ORIGIN.get_or_init(Instant::now);
        let mut timed_out = 0;
        for seed in 0..300u64 {
            let mut draw = SplitMix64::new(seed);
            let policy = PollPolicy {
                long_poll_first: seed % 3 != 0,
                ..PollPolicy::default()
            };
            let timeout = Duration::from_millis(draw.next_u64() % 900_000);
            let new = || {
                PollMachine::new(
                    policy,
                    RequestInfo::new(RequestId(1), Method::Get),
                    SplitMix64::new(seed),
                    t0,
                    timeout,
                )
                .unwrap()
            };
            let (mut fast, mut exact) = (new(), new());
            exact.roomy_until = None;
            let mut now = t0;
            for _ in 0..1000 {
                let a = fast.poll_action();
                assert_eq!(a, exact.poll_action(), "seed {seed}");
                let event = match a {
                    Action::Stop(_) => break,
                    Action::SleepUntil(at) => {
                        now = now.max(at);
                        Event::Tick
                    }
                    Action::Send(plan) => {
                        let x = draw.next_u64();
                        // Answered after 0 to ~30 s, mostly pending.
                        now += Duration::from_millis(x % 30_000);
                        let r = Response::new(plan.id, 200, UNIX_EPOCH);
                        match (x >> 20) % 16 {
                            0 => Event::Response(Response::new(plan.id, 503, UNIX_EPOCH)),
                            1 => Event::Response(
                                r.job(JobReport::State("running")).retry_after(b"3"),
                            ),
                            2 => Event::TransportError(plan.id, TransportErrorKind::Timeout),
                            3 if x.is_multiple_of(5) => Event::Response(
                                Response::new(plan.id, 400, UNIX_EPOCH)
                                    .job(JobReport::LongPollUnsupported),
                            ),
                            4 if x.is_multiple_of(7) => {
                                Event::Response(r.job(JobReport::State("passed")))
                            }
                            _ => Event::Response(r.job(JobReport::State("running"))),
                        }
                    }
                };
                fast.handle(now, event);
                exact.handle(now, event);
                assert_eq!(fast.take_record(), exact.take_record(), "seed {seed}");
            }
            if matches!(fast.outcome(), Some(crate::Outcome::TimedOut { .. })) {
                timed_out += 1;
            }
        }
        // Most waits run to their deadline: the planning near it is covered.
        assert!(timed_out > 200, "{timed_out}");
    }
}
