//! The worker: the one thread of a fleet that talks to Redis. It sleeps on
//! a condition variable until a key is due (an ask, a change to share),
//! runs that key's [`Step`] (one round trip, each call bounded by the
//! fleet's timeout), and writes the answer back into the shared state.

use std::sync::Arc;
use std::time::{Duration, Instant};

use polite_core::Notice;
use polite_core::pace::PaceLimit;

use crate::backend::{Backend, Conn};
use crate::state::{ServerClock, Shared, State, Tuning};
use crate::step::{Step, StepReply};

/// One key's round trip: what was sent (to account for it when the answer
/// comes).
struct Job {
    key: String,
    step: Step,
    /// Whether the step seeds the log with this process's sends (those
    /// made up to `built`).
    reseeding: bool,
    built: Instant,
}

/// Runs until the fleet stops, then shares what is left once (unless
/// Redis is down). `_done` is dropped when it returns: the fleet's `Drop`
/// waits for that, bounded.
pub(crate) fn run(shared: &Arc<Shared>, backend: &Backend, _done: std::sync::mpsc::Sender<()>) {
    let mut conn: Option<Conn> = None;
    loop {
        let (jobs, stopping) = {
            let mut st = shared.lock();
            loop {
                let now = Instant::now();
                let stopping = st.stop;
                // Stopping with Redis down: nothing can be shared, and the
                // fleet's owner must not wait for a retry.
                if stopping && !st.up {
                    break (Vec::new(), true);
                }
                let can_try = st.up
                    || st
                        .down_since
                        .is_none_or(|d| now >= d + shared.tuning.retry_every);
                if can_try {
                    let jobs = collect(&mut st, now, &shared.tuning, stopping);
                    if !jobs.is_empty() || stopping {
                        break (jobs, stopping);
                    }
                }
                let wait = if can_try {
                    shared.tuning.flush_every
                } else {
                    st.down_since.map_or(shared.tuning.retry_every, |d| {
                        (d + shared.tuning.retry_every).saturating_duration_since(now)
                    })
                };
                st = shared
                    .wake
                    .wait_timeout(st, wait.max(Duration::from_millis(1)))
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0;
            }
        };
        for job in jobs {
            let answer = round_trip(&mut conn, backend, &shared.tuning, &job);
            if answer.is_err() {
                conn = None;
            }
            let mut st = shared.lock();
            apply(&mut st, &job, answer, &shared.tuning);
            drop(st);
            shared.wake.notify_all();
        }
        if stopping {
            return;
        }
    }
}

/// The due keys' steps, marked in flight. When stopping: every key with
/// something to share (permits wanted no more).
fn collect(st: &mut State, now: Instant, tuning: &Tuning, stopping: bool) -> Vec<Job> {
    let clock = st.clock;
    let mut jobs = Vec::new();
    st.keys
        .retain(|_, k| k.handles > 0 || k.dirty_since.is_some());
    for (key, k) in &mut st.keys {
        let due = if stopping {
            !k.in_flight && (k.dirty_since.is_some() || !k.stock.is_empty())
        } else {
            k.due(now, tuning.flush_every)
        };
        if !due {
            continue;
        }
        if stopping {
            k.returned.extend(k.stock.drain(..).map(|(id, _)| id));
            k.wanted = 0;
            k.waiting = 0;
            k.used = 0;
        }
        // Expired permits go back with this step.
        while let Some(&(id, until)) = k.stock.front() {
            if until > now {
                break;
            }
            k.returned.push(id);
            k.stock.pop_front();
        }
        let mut step = k.step(clock, tuning);
        if stopping {
            step.want = 0;
        }
        k.in_flight = true;
        jobs.push(Job {
            key: key.clone(),
            step,
            reseeding: k.reseed,
            built: now,
        });
    }
    jobs
}

/// One step on the connection (made first if there is none).
fn round_trip(
    conn: &mut Option<Conn>,
    backend: &Backend,
    tuning: &Tuning,
    job: &Job,
) -> redis::RedisResult<(StepReply, ServerClock)> {
    if conn.is_none() {
        *conn = Some(backend.connect(tuning.timeout)?);
    }
    let Some(c) = conn.as_mut() else {
        return Err(redis::RedisError::from((
            redis::ErrorKind::IoError,
            "no connection",
        )));
    };
    let sent = Instant::now();
    let reply = job.step.invoke(c.as_dyn(), &job.key)?;
    let back = Instant::now();
    let clock = ServerClock::measured(sent, back, reply.server_us);
    Ok((reply, clock))
}

/// Whether Redis answered `e` and refused this process, rather than not
/// answering: a failed authentication (`WRONGPASS`, `NOAUTH`, redis-rs's
/// own check of `AUTH`), no permission (`NOPERM`), a database number the
/// server does not have (`SELECT` at connect). Retrying does not mend
/// these; the fleet still retries every `retry_every`, as for an outage.
fn refuses(e: &redis::RedisError) -> bool {
    if e.is_io_error() || e.is_timeout() || e.is_connection_refusal() {
        return false;
    }
    matches!(e.kind(), redis::ErrorKind::AuthenticationFailed)
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"))
        || e.detail().is_some_and(|d| d.contains("DB index"))
        || e.to_string().contains("DB index")
}

/// Writes an answer (or a failure) into the state.
fn apply(
    st: &mut State,
    job: &Job,
    answer: redis::RedisResult<(StepReply, ServerClock)>,
    tuning: &Tuning,
) {
    let now = Instant::now();
    let (reply, clock) = match answer {
        Ok(a) => a,
        Err(e) => {
            st.stats.failures += 1;
            let refused = refuses(&e);
            if refused && !st.refusal_told {
                // A setting to fix: said as such, even after a stall has
                // said the fleet does not answer.
                tracing::warn!(target: "polite", error = %e, "fleet: Redis refuses this process; pacing locally");
                st.up = false;
                st.refusal_told = true;
                st.tell(Notice::FleetRefused);
            } else if st.up {
                tracing::warn!(target: "polite", error = %e, "fleet: Redis does not answer; pacing locally");
                st.up = false;
                st.tell(Notice::FleetUnavailable);
            }
            st.down_since = Some(now);
            // Redis may come back empty: every key seeds the log with this
            // process's recent sends at its next step (the script keeps the
            // granted ones only if the log was indeed lost).
            for k in st.keys.values_mut() {
                k.reseed = true;
            }
            if let Some(k) = st.keys.get_mut(&job.key) {
                k.in_flight = false;
            }
            return;
        }
    };
    st.stats.steps += 1;
    st.stats.granted += reply.granted.len() as u64;
    st.clock = Some(clock);
    st.down_since = None;
    st.refusal_told = false;
    if !st.up {
        tracing::info!(target: "polite", "fleet: Redis answers again");
        st.up = true;
        st.tell(Notice::FleetRestored);
    }
    let Some(k) = st.keys.get_mut(&job.key) else {
        return;
    };
    let sent = &job.step;
    k.in_flight = false;
    k.asked_since = None;
    k.wanted = 0;
    if sent.want > 0 {
        // Those asks were in this one (a step before their instant asks
        // for nothing).
        k.waiting = 0;
    }
    k.used = 0;
    // What was shared is shared; what came meanwhile waits for the next step.
    k.returned
        .drain(..sent.returned.len().min(k.returned.len()));
    if sent.cool_until_us > 0
        && k.cool_push
            .is_some_and(|t| clock.server(t) <= sent.cool_until_us)
    {
        k.cool_push = None;
    }
    if sent.learnt.is_some() {
        k.learnt_pushed = sent.learnt;
    }
    k.throttled = k.throttled.saturating_sub(sent.throttled);
    if k.throttled == 0 {
        k.throttled_sent = None;
    }
    k.succeeded = k.succeeded.saturating_sub(sent.succeeded);
    if let Some(b) = &mut k.budget {
        b.pending -= sent.budget_delta;
        if let Some(tokens) = reply.budget_tokens {
            let view = i64::from(tokens) - b.pending;
            b.bucket = b
                .bucket
                .with_tokens(u32::try_from(view.max(0)).unwrap_or(u32::MAX));
        }
    }
    let pending = k.throttled > 0
        || k.succeeded > 0
        || !k.returned.is_empty()
        || k.cool_push.is_some()
        || k.budget.is_some_and(|b| b.pending != 0);
    k.dirty_since = if pending { Some(now) } else { None };
    // A permit may be used until its lease ends on the server's clock,
    // less the half round trip this process cannot see.
    // The log this process's permits came from is gone (restart, eviction):
    // they mean nothing now; unless this step seeded it, the next one does.
    let lost = k.epoch != 0 && reply.epoch != k.epoch;
    if lost {
        k.stock.clear();
        // The other processes' sends of the last hold are gone with it and
        // come back only as each one steps again: until one hold after the
        // new log's birth, this process keeps to its local share.
        if let Some((_, window, _)) = k.window_in_force() {
            let hold = window + tuning.lease + tuning.margin;
            k.recovering_until = Some(clock.local(reply.epoch) + hold);
        }
    }
    let recovering = k.recovering_until.is_some_and(|t| now < t);
    if job.reseeding {
        // The local sends up to the step are in the log now, like grants.
        for (t, local) in &mut k.mine {
            if *t <= job.built {
                *local = false;
            }
        }
        k.reseed = k.mine.iter().any(|(_, local)| *local);
        k.epoch = reply.epoch;
    } else if lost {
        k.reseed = true;
    } else {
        k.epoch = reply.epoch;
    }
    let half_trip = now.saturating_duration_since(clock.mid);
    let until = clock.local(reply.server_us) + tuning.lease.saturating_sub(half_trip);
    if k.handles == 0 || recovering {
        k.returned.extend(reply.granted.iter().copied());
        if !k.returned.is_empty() {
            k.dirty_since.get_or_insert(now);
        }
    } else {
        k.stock.extend(reply.granted.iter().map(|id| (*id, until)));
        k.last_lease = u32::try_from(reply.granted.len()).unwrap_or(u32::MAX);
    }
    if !recovering && (reply.granted.len() as u64) < u64::from(sent.want) && reply.next_us > 0 {
        // The server read its clock somewhere in the round trip: the
        // latest local instant the refusal's may be (`mid` + half a trip),
        // so that the ask then is not a few µs early, and refused again.
        let at = clock.local(reply.next_us) + half_trip;
        if at > now {
            k.not_before = Some((at, reply.refused_by));
            if matches!(reply.refused_by, PaceLimit::Window { .. }) {
                // The named instant is when the demand is free: ask for it
                // all then.
                let got = u32::try_from(reply.granted.len()).unwrap_or(u32::MAX);
                k.waiting = k.waiting.max(sent.demand.saturating_sub(got));
            }
        }
    }
}
