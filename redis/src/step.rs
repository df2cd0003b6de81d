//! [`Step`]: one atomic decision for one key, the Lua script
//! `step.lua` run by `EVALSHA` (redis-rs falls back to `EVAL` on
//! `NOSCRIPT`, e.g. after a restart).

use std::sync::LazyLock;
use std::time::Duration;

use polite_core::pace::PaceLimit;

/// The script, loaded once per process (its SHA1 computed once).
static SCRIPT: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("step.lua")));

/// What one round trip asks for one key: permits, and every change this
/// process has to share. All instants are the Redis server's, in
/// microseconds since the Unix epoch.
///
/// ```no_run
/// use polite_redis::Step;
/// use std::time::Duration;
/// let client = redis::Client::open("redis://127.0.0.1:6379/").unwrap();
/// let mut conn = client.get_connection().unwrap();
/// let step = Step { want: 1, limit: 10, window: Duration::from_secs(1), ..Step::default() };
/// let reply = step.invoke(&mut conn, "polite:{example}").unwrap();
/// assert!(reply.granted.len() <= 1);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// Permits wanted now (0: only share changes and read the state).
    pub want: u32,
    /// The configured window's limit (0: none configured).
    pub limit: u32,
    /// The configured window.
    pub window: Duration,
    /// How much longer than the window each grant is held: the lease time
    /// (a permit may be used that much after its grant) plus a margin.
    pub hold_extra: Duration,
    /// How much later than the first slot that frees a refusal may name
    /// ([`StepReply::next_us`]), so that all the permits wanted (or
    /// [`demand`](Self::demand)ed) are free then and come in one round
    /// trip (0: the first slot's instant).
    pub gather: Duration,
    /// How many permits the process expects to want once the window
    /// refuses (its sends of the last hold): a refusal names the instant
    /// by which that many are free (up to [`gather`](Self::gather) after
    /// the first slot). At most `want` counts when smaller.
    pub demand: u32,
    /// A cool-down to share: no grant before this server instant (0: none).
    pub cool_until_us: u64,
    /// A quota learnt from the server (`RateLimit-Policy`): limit and window (0: none).
    pub learnt: Option<(u64, Duration)>,
    /// Learn quotas up to this limit (0: never use a learnt quota).
    pub learn_max: u32,
    /// Rate-limited answers without a server time since the last step.
    pub throttled: u32,
    /// The latest send (server µs) among those `throttled` answers: only
    /// a send made after the fleet's last cut cuts its rate again.
    pub throttled_sent_us: u64,
    /// Other answers since the last step.
    pub succeeded: u32,
    /// Whether the fleet's send rate adapts to rate-limited answers.
    pub adaptive: bool,
    /// The retry budget's capacity (0: no shared budget).
    pub budget_cap: u32,
    /// Tokens this process took from the budget since the last step, less
    /// what it gave back (negative: a net deposit).
    pub budget_delta: i64,
    /// Idle keys expire after this long.
    pub ttl: Duration,
    /// Permits given back unused.
    pub returned: Vec<u64>,
    /// The key's epoch ([`StepReply::epoch`]) this process last saw (0:
    /// none yet): another one means the log is lost.
    pub epoch: u64,
    /// Sends (server µs) this process made on its local pace while Redis
    /// did not answer: the log counts them as grants made then.
    pub seed_local: Vec<u64>,
    /// This process's sends (server µs) granted by the fleet, counted
    /// again only if the log was lost since [`epoch`](Self::epoch).
    pub seed_granted: Vec<u64>,
}

/// What the script answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepReply {
    /// The server's clock when it decided, µs since the Unix epoch.
    pub server_us: u64,
    /// The permits granted (ids in the send log).
    pub granted: Vec<u64>,
    /// When fewer were granted than wanted: the server instant (µs) before
    /// which no further grant can come, or, up to [`Step::gather`] after
    /// it, the one by which the permits wanted are all free (0 when all
    /// were granted).
    pub next_us: u64,
    /// Which limit refused.
    pub refused_by: PaceLimit,
    /// The retry budget's tokens after this step (`None` without one).
    pub budget_tokens: Option<u32>,
    /// The key state's birth (server µs): it changes only when Redis lost
    /// the key (restarted empty, evicted, expired).
    pub epoch: u64,
}

impl Step {
    /// Runs the step on `key`'s state (`{key}:log`, `{key}:st`): one
    /// round trip, atomic on the server.
    ///
    /// # Errors
    ///
    /// Whatever redis-rs reports (I/O, timeout, a script error), or a
    /// reply of the wrong shape.
    pub fn invoke(
        &self,
        conn: &mut dyn redis::ConnectionLike,
        key: &str,
    ) -> redis::RedisResult<StepReply> {
        let mut inv = SCRIPT.prepare_invoke();
        inv.key(format!("{key}:log")).key(format!("{key}:st"));
        let (ll, lw) = self.learnt.map_or((0, 0), |(l, w)| (l, micros(w)));
        inv.arg(self.want)
            .arg(self.limit)
            .arg(micros(self.window))
            .arg(micros(self.hold_extra))
            .arg(self.cool_until_us)
            .arg(ll)
            .arg(lw)
            .arg(self.learn_max)
            .arg(self.throttled)
            .arg(self.succeeded)
            .arg(u8::from(self.adaptive))
            .arg(self.budget_cap)
            .arg(self.budget_delta)
            .arg(
                u64::try_from(self.ttl.as_millis())
                    .unwrap_or(u64::MAX)
                    .max(1),
            )
            .arg(self.throttled_sent_us)
            .arg(self.epoch)
            .arg(self.seed_local.len())
            .arg(self.seed_granted.len())
            .arg(micros(self.gather))
            .arg(self.demand);
        for at in self.seed_local.iter().chain(&self.seed_granted) {
            inv.arg(*at);
        }
        for id in &self.returned {
            inv.arg(*id);
        }
        let raw: Vec<i64> = inv.invoke(conn)?;
        parse(&raw).ok_or_else(|| {
            redis::RedisError::from((
                redis::ErrorKind::TypeError,
                "polite-redis: the step script answered an unexpected shape",
            ))
        })
    }
}

fn parse(raw: &[i64]) -> Option<StepReply> {
    let head = raw.get(..9)?;
    let secs = u64::try_from(head[0]).ok()?;
    let micros_part = u64::try_from(head[1]).ok()?;
    let next_us = u64::try_from(head[2]).ok()?;
    let limit = u32::try_from(head[4]).unwrap_or(u32::MAX);
    let window = Duration::from_micros(u64::try_from(head[5]).unwrap_or(0));
    let interval = Duration::from_micros(u64::try_from(head[6]).unwrap_or(0));
    let refused_by = match head[3] {
        1 => PaceLimit::Window {
            limit,
            window,
            learned: false,
        },
        2 => PaceLimit::Window {
            limit,
            window,
            learned: true,
        },
        3 => PaceLimit::Adaptive { interval },
        4 => PaceLimit::CoolDown,
        _ => PaceLimit::Unknown,
    };
    let granted = raw[9..]
        .iter()
        .map(|id| u64::try_from(*id).ok())
        .collect::<Option<Vec<u64>>>()?;
    Some(StepReply {
        server_us: secs.checked_mul(1_000_000)?.checked_add(micros_part)?,
        granted,
        next_us,
        refused_by,
        budget_tokens: u32::try_from(head[7]).ok(),
        epoch: u64::try_from(head[8]).ok()?,
    })
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse_and_bad_shapes_do_not() {
        let r = parse(&[1_700_000_000, 250, 0, 1, 10, 1_000_000, 0, -1, 42, 7, 8]).unwrap();
        assert_eq!(r.epoch, 42);
        assert_eq!(r.server_us, 1_700_000_000_000_250);
        assert_eq!(r.granted, vec![7, 8]);
        assert_eq!(r.budget_tokens, None);
        assert_eq!(
            r.refused_by,
            PaceLimit::Window {
                limit: 10,
                window: Duration::from_secs(1),
                learned: false
            }
        );
        assert_eq!(parse(&[1, 2, 3]), None);
        assert_eq!(parse(&[-1, 0, 0, 0, 0, 0, 0, 5, 1]), None);
        assert_eq!(parse(&[1, 0, 0, 0, 0, 0, 0, 5]), None, "no epoch");
        let cool = parse(&[1, 0, 9, 4, 0, 0, 0, 300, 1]).unwrap();
        assert_eq!(
            (cool.refused_by, cool.budget_tokens),
            (PaceLimit::CoolDown, Some(300))
        );
    }
}
