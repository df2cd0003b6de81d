//! What a caller configures for a wait: the terminal states and the
//! [`PollPolicy`].

use std::time::Duration;

use crate::outcome::StateName;
use crate::policy::{Backoff, Jitter, PolicyError, RetryPolicy};

use super::ONE_SECOND;

/// The set of job states that end a wait, stored inline (at most
/// [`TerminalStates::CAPACITY`] names of at most
/// [`StateName::CAPACITY`] bytes each): `Copy`, no heap, and looking a
/// state up allocates nothing.
///
/// Names match exactly (byte for byte, case-sensitive): a classifier that
/// meets a server spelling `PASSED` normalises it, or the policy lists that
/// spelling.
///
/// ```
/// use polite_core::poll::TerminalStates;
/// let d = TerminalStates::default();
/// assert!(d.contains("passed") && d.contains("failed") && d.contains("cancelled"));
/// assert!(d.contains("done") && d.contains("succeeded") && d.contains("error"));
/// assert!(!d.contains("running") && !d.contains("pending") && !d.contains("queued"));
/// assert!(!d.contains("PASSED"));
///
/// let mut mine = TerminalStates::of(&["done", "error"]).unwrap();
/// assert!(mine.insert("timeout"));
/// assert_eq!(mine.iter().map(|s| s.to_string()).collect::<Vec<_>>(), ["done", "error", "timeout"]);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TerminalStates {
    /// Per slot, [`key`] of its name, or 0 for an empty slot (empty slots
    /// come last): a lookup compares these 32 bytes at once and the names'
    /// bytes only where the key matches (issue 22: a pending state used to
    /// compare against every stored name, 33 bytes each).
    keys: [u16; TerminalStates::CAPACITY],
    /// Per slot, the name's bytes, zero-padded.
    names: [[u8; StateName::CAPACITY]; TerminalStates::CAPACITY],
    /// One bit per stored key ([`filter_bit`]): a state whose bit is clear
    /// is not terminal, without looking at the keys (most pending states:
    /// `running`, `pending`, `in_progress`, ... against the defaults).
    filter: u64,
}

/// The bit of a key in [`TerminalStates::filter`] (Fibonacci hashing).
#[inline]
fn filter_bit(key: u16) -> u64 {
    1 << (u64::from(key).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58)
}

/// A name's length and first byte, never 0 for a non-empty name.
#[inline]
fn key(name: &[u8]) -> u16 {
    // Lengths are at most `StateName::CAPACITY` (31) when stored; longer
    // names are never looked up.
    (name.len() as u16) << 8 | u16::from(name.first().copied().unwrap_or(0))
}

impl TerminalStates {
    /// The most states a set holds.
    pub const CAPACITY: usize = 16;

    /// The default set: the names job APIs commonly end with (CI systems,
    /// exports, batch jobs, cloud operations), so a wait on a job that ends
    /// `done` or `succeeded` ends when it does rather than at its timeout.
    pub const DEFAULT_NAMES: [&'static str; 14] = [
        "passed",
        "failed",
        "cancelled",
        "canceled",
        "done",
        "succeeded",
        "success",
        "completed",
        "complete",
        "finished",
        "error",
        "errored",
        "failure",
        "aborted",
    ];

    /// The empty set (not a valid policy on its own: a wait needs at least
    /// one terminal state).
    ///
    /// ```
    /// use polite_core::poll::TerminalStates;
    /// assert!(TerminalStates::EMPTY.is_empty());
    /// ```
    pub const EMPTY: TerminalStates = TerminalStates {
        keys: [0; TerminalStates::CAPACITY],
        names: [[0; StateName::CAPACITY]; TerminalStates::CAPACITY],
        filter: 0,
    };

    /// A set of these names, or `None` when one is empty or longer than
    /// [`StateName::CAPACITY`], or there are more than
    /// [`Self::CAPACITY`] distinct names.
    ///
    /// ```
    /// use polite_core::poll::TerminalStates;
    /// assert!(TerminalStates::of(&["succeeded", "failed"]).is_some());
    /// assert!(TerminalStates::of(&[""]).is_none());
    /// ```
    #[must_use]
    pub fn of(names: &[&str]) -> Option<TerminalStates> {
        let mut set = TerminalStates::EMPTY;
        names.iter().all(|n| set.insert(n)).then_some(set)
    }

    /// Adds a state; returns `false` (and changes nothing) when the name is
    /// empty, longer than [`StateName::CAPACITY`], or the set is full.
    /// Adding a name already present is a no-op that returns `true`.
    ///
    /// ```
    /// use polite_core::poll::TerminalStates;
    /// let mut s = TerminalStates::EMPTY;
    /// assert!(s.insert("done"));
    /// assert!(s.insert("done"));
    /// assert_eq!(s.len(), 1);
    /// assert!(!s.insert(&"x".repeat(40)));
    /// ```
    pub fn insert(&mut self, name: &str) -> bool {
        if name.is_empty() {
            return false;
        }
        if self.contains(name) {
            return true;
        }
        let Some(slot) = self.keys.iter().position(|k| *k == 0) else {
            return false;
        };
        if name.len() > StateName::CAPACITY {
            return false;
        }
        self.keys[slot] = key(name.as_bytes());
        self.filter |= filter_bit(self.keys[slot]);
        self.names[slot][..name.len()].copy_from_slice(name.as_bytes());
        true
    }

    /// Whether `state` is one of the terminal states.
    ///
    /// ```
    /// use polite_core::poll::TerminalStates;
    /// assert!(TerminalStates::default().contains("failed"));
    /// ```
    #[must_use]
    #[inline]
    pub fn contains(&self, state: &str) -> bool {
        self.find(state).is_some()
    }

    /// The stored name equal to `state`, if it is terminal: the slots
    /// whose key matches, as a bit mask (a loop without exits, which the
    /// compiler turns into a few vector compares), then their bytes.
    #[inline(always)]
    pub(crate) fn find(&self, state: &str) -> Option<StateName> {
        let bytes = state.as_bytes();
        if bytes.is_empty() || bytes.len() > StateName::CAPACITY {
            return None;
        }
        let k = key(bytes);
        if self.filter & filter_bit(k) == 0 {
            return None;
        }
        let mut hits = 0u32;
        for (i, slot) in self.keys.iter().enumerate() {
            hits |= u32::from(*slot == k) << i;
        }
        while hits != 0 {
            let i = hits.trailing_zeros() as usize;
            if self.names[i][..bytes.len()] == *bytes {
                return StateName::new(state);
            }
            hits &= hits - 1;
        }
        None
    }

    /// The name in slot `i`, if the slot is taken.
    fn name(&self, i: usize) -> Option<StateName> {
        let len = usize::from(self.keys[i] >> 8);
        if len == 0 {
            return None;
        }
        // Stored from a `&str` cut at its own length: valid UTF-8.
        std::str::from_utf8(&self.names[i][..len])
            .ok()
            .and_then(StateName::new)
    }

    /// How many states the set holds.
    ///
    /// ```
    /// use polite_core::poll::TerminalStates;
    /// assert_eq!(TerminalStates::default().len(), TerminalStates::DEFAULT_NAMES.len());
    /// ```
    #[must_use]
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// Whether the set is empty.
    ///
    /// ```
    /// use polite_core::poll::TerminalStates;
    /// assert!(!TerminalStates::default().is_empty());
    /// ```
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.keys[0] == 0
    }

    /// The states, in insertion order.
    ///
    /// ```
    /// use polite_core::poll::TerminalStates;
    /// let first = TerminalStates::default().iter().next().unwrap();
    /// assert_eq!(first.as_str(), "passed");
    /// ```
    pub fn iter(&self) -> impl Iterator<Item = StateName> + '_ {
        (0..TerminalStates::CAPACITY).map_while(|i| self.name(i))
    }
}

impl Default for TerminalStates {
    /// [`TerminalStates::DEFAULT_NAMES`]: `passed`, `failed`, `cancelled`,
    /// `canceled`, `done`, `succeeded`, `success`, `completed`, `complete`,
    /// `finished`, `error`, `errored`, `failure`, `aborted`.
    fn default() -> Self {
        let mut set = TerminalStates::EMPTY;
        for name in TerminalStates::DEFAULT_NAMES {
            let _ = set.insert(name);
        }
        set
    }
}

impl std::fmt::Debug for TerminalStates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

/// Everything [`PollMachine`](crate::PollMachine) decides by. Plain data: `Copy`, no heap.
///
/// Every number of SPEC §3 is a default here:
///
/// | field | default |
/// |---|---|
/// | `retry` | [`RetryPolicy::default()`]: the rules for failed polls |
/// | `long_poll_first` | `true` |
/// | `max_long_poll` | 25 s |
/// | `wait_param` | `"waitSeconds"` |
/// | `min_long_poll_interval` | 1 s |
/// | `backoff` | 2 s, ×2, cap 15 s, ±20 % → 2, 4, 8, 15, 15, … s |
/// | `terminal_states` | `passed`, `failed`, `cancelled`, `done`, `succeeded`, `completed`, `error`, … ([`TerminalStates::DEFAULT_NAMES`]) |
///
/// ```
/// use polite_core::PollPolicy;
/// use polite_core::policy::Jitter;
/// use polite_core::poll::TerminalStates;
/// use std::time::Duration;
///
/// let mut policy = PollPolicy::default();
/// assert_eq!(policy.max_long_poll, Duration::from_secs(25));
/// assert_eq!(policy.backoff.jitter, Jitter::Percent(20));
/// // A CI server whose jobs end in `success` or `failure`, and that
/// // calls its wait parameter `timeout`:
/// policy.terminal_states = TerminalStates::of(&["success", "failure"]).unwrap();
/// policy.wait_param = "timeout";
/// assert!(policy.validate().is_ok());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollPolicy {
    /// The transport retry rules for failed polls (429, 5xx, transport
    /// errors): budgets per class, backoff, `Retry-After` limits, and the
    /// transport cushion added to the deadline for `abort_at`.
    pub retry: RetryPolicy,
    /// Start in long-poll mode. Default `true`. With `false` the machine
    /// polls on the backoff schedule from the start and never sends the
    /// wait parameter.
    pub long_poll_first: bool,
    /// The longest wait one long poll asks the server for (whole seconds;
    /// a fraction is dropped). Default 25 s. At least 1 s.
    pub max_long_poll: Duration,
    /// The name of the wait query parameter, for the adapter (the machine
    /// never builds URLs). Default `"waitSeconds"`. Must be a non-empty
    /// URL-safe name: ASCII letters, digits, `-`, `_`, `.`, `~`.
    pub wait_param: &'static str,
    /// The least time between the starts of two long polls. Default 1 s.
    ///
    /// A long poll that comes back pending *early* (the job moved from
    /// `queued` to `running`, or a server ignores the wait parameter without
    /// rejecting it, as many do with unknown query parameters) would
    /// otherwise be re-sent at once, in a hot loop until the deadline. A
    /// server that held the poll for at least this long is polled again at
    /// once. `Duration::ZERO` re-polls at once always.
    pub min_long_poll_interval: Duration,
    /// The backoff-mode schedule: the delay after the `n`-th pending answer
    /// in backoff mode is `base * multiplier^n`, capped, then jittered.
    /// Default base 2 s, multiplier 2, cap 15 s, [`Jitter::Percent`]`(20)`.
    pub backoff: Backoff,
    /// The states that end the wait. Default [`TerminalStates::DEFAULT_NAMES`]
    /// (`passed`, `failed`, `cancelled`, `done`, `succeeded`, `error`, …).
    pub terminal_states: TerminalStates,
}

impl Default for PollPolicy {
    fn default() -> Self {
        PollPolicy {
            retry: RetryPolicy::default(),
            long_poll_first: true,
            max_long_poll: Duration::from_secs(25),
            wait_param: "waitSeconds",
            min_long_poll_interval: ONE_SECOND,
            backoff: Backoff {
                base: Duration::from_secs(2),
                multiplier: 2,
                cap: Duration::from_secs(15),
                jitter: Jitter::Percent(20),
            },
            terminal_states: TerminalStates::default(),
        }
    }
}

const fn invalid(field: &'static str, reason: &'static str) -> PolicyError {
    PolicyError::Invalid { field, reason }
}

/// Names a field of the nested retry policy by its path from `PollPolicy`.
fn in_retry(e: PolicyError) -> PolicyError {
    let PolicyError::Invalid { field, reason } = e;
    let field = match field {
        "backoff.base" => "retry.backoff.base",
        "backoff.multiplier" => "retry.backoff.multiplier",
        "backoff.cap" => "retry.backoff.cap",
        "backoff.jitter" => "retry.backoff.jitter",
        "retry_after.min" => "retry.retry_after.min",
        "retry_after.max" => "retry.retry_after.max",
        "retry_after.auto_wait_cap" => "retry.retry_after.auto_wait_cap",
        "server_error_statuses" => "retry.server_error_statuses",
        _ => "retry",
    };
    invalid(field, reason)
}

impl PollPolicy {
    /// The time a long poll leaves between the wait it asks for and the
    /// deadline, for the held answer to come back: 1 s. A server that holds
    /// a poll as long as asked answers after that time plus the trip back,
    /// and an answer after the deadline is discarded (SPEC §1), so a poll
    /// asking for all the time left could only end the wait `TimedOut`.
    /// The wait asked is `min(whole seconds of (time left − this),
    /// max_long_poll)`; under one such second, a plain poll.
    ///
    /// ```
    /// use polite_core::{Action, Method, PollMachine, PollPolicy, RequestId, RequestInfo};
    /// use polite_core::SplitMix64;
    /// use std::time::{Duration, Instant};
    /// let t0 = Instant::now();
    /// let mut m = PollMachine::new(PollPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
    ///                              SplitMix64::new(1), t0, Duration::from_secs(4)).unwrap();
    /// // 4 s left: the server is asked to hold the poll 3 s, not 4.
    /// let Action::Send(plan) = m.poll_action() else { unreachable!() };
    /// assert_eq!(PollPolicy::ANSWER_ROOM, Duration::from_secs(1));
    /// assert_eq!(plan.long_poll, Some(3));
    /// ```
    pub const ANSWER_ROOM: Duration = Duration::from_secs(1);

    /// Checks that the policy makes sense; [`PollMachine`](crate::PollMachine) calls this at
    /// construction.
    ///
    /// Rejected: anything [`RetryPolicy::validate`] rejects in `retry`
    /// (named `retry.…`), the same backoff faults in `backoff`, a
    /// `max_long_poll` under one second, an empty or non-URL-safe
    /// `wait_param`, and empty `terminal_states`.
    ///
    /// # Errors
    ///
    /// [`PolicyError::Invalid`] naming the first field at fault.
    ///
    /// ```
    /// use polite_core::PollPolicy;
    /// use polite_core::policy::PolicyError;
    /// use std::time::Duration;
    /// let mut p = PollPolicy::default();
    /// p.max_long_poll = Duration::from_millis(500);
    /// assert!(matches!(p.validate(), Err(PolicyError::Invalid { field: "max_long_poll", .. })));
    /// let mut p = PollPolicy::default();
    /// p.retry.backoff.cap = Duration::ZERO;
    /// assert!(matches!(p.validate(), Err(PolicyError::Invalid { field: "retry.backoff.cap", .. })));
    /// ```
    pub fn validate(&self) -> Result<(), PolicyError> {
        self.retry.validate().map_err(in_retry)?;
        // The schedule obeys the same rules as a retry backoff; the other
        // fields of a default retry policy are valid, so any error names a
        // `backoff.*` field, which is this policy's own field path too.
        RetryPolicy {
            backoff: self.backoff,
            ..RetryPolicy::default()
        }
        .validate()?;
        if self.max_long_poll < ONE_SECOND {
            return Err(invalid(
                "max_long_poll",
                "must be at least one second (the wait parameter counts whole seconds)",
            ));
        }
        if self.wait_param.is_empty() {
            return Err(invalid("wait_param", "must not be empty"));
        }
        if !self
            .wait_param
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~'))
        {
            return Err(invalid(
                "wait_param",
                "must be URL-safe: ASCII letters, digits, '-', '_', '.', '~'",
            ));
        }
        if self.terminal_states.is_empty() {
            return Err(invalid("terminal_states", "must name at least one state"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_policy_is_valid() {
        assert_eq!(PollPolicy::default().validate(), Ok(()));
    }

    #[test]
    fn each_bad_field_is_named() {
        type Mutate = fn(&mut PollPolicy);
        let cases: [(Mutate, &str); 15] = [
            (
                |p| p.retry.backoff.base = Duration::ZERO,
                "retry.backoff.base",
            ),
            (
                |p| p.retry.backoff.multiplier = 0,
                "retry.backoff.multiplier",
            ),
            (
                |p| p.retry.backoff.cap = Duration::from_millis(1),
                "retry.backoff.cap",
            ),
            (
                |p| p.retry.backoff.jitter = Jitter::Percent(101),
                "retry.backoff.jitter",
            ),
            (
                |p| p.retry.retry_after.min = Duration::ZERO,
                "retry.retry_after.min",
            ),
            (
                |p| {
                    p.retry.retry_after.min = Duration::from_secs(10);
                    p.retry.retry_after.max = Duration::from_secs(5);
                },
                "retry.retry_after.max",
            ),
            (
                |p| p.retry.retry_after.auto_wait_cap = Duration::from_secs(301),
                "retry.retry_after.auto_wait_cap",
            ),
            (
                |p| {
                    p.retry.server_error_statuses.insert(429);
                },
                "retry.server_error_statuses",
            ),
            (|p| p.backoff.base = Duration::ZERO, "backoff.base"),
            (|p| p.backoff.cap = Duration::from_secs(1), "backoff.cap"),
            (
                |p| p.backoff.jitter = Jitter::Percent(200),
                "backoff.jitter",
            ),
            (
                |p| p.max_long_poll = Duration::from_millis(999),
                "max_long_poll",
            ),
            (|p| p.wait_param = "", "wait_param"),
            (|p| p.wait_param = "wait seconds", "wait_param"),
            (
                |p| p.terminal_states = TerminalStates::EMPTY,
                "terminal_states",
            ),
        ];
        for (mutate, field) in cases {
            let mut p = PollPolicy::default();
            mutate(&mut p);
            match p.validate() {
                Err(PolicyError::Invalid { field: f, .. }) => assert_eq!(f, field),
                Ok(()) => panic!("{field}: accepted"),
            }
        }
    }

    /// The key filter and the key scan never hide a stored name, and find
    /// only stored ones: every name of a full set (some sharing a length
    /// and first byte) is found, no near miss is.
    #[test]
    fn lookup_finds_exactly_the_stored_names() {
        let names = [
            "done",
            "dune",
            "d",
            "e",
            "error",
            "errors",
            "x",
            "xy",
            "xyz",
            "passed",
            "paused",
            "pending-approval",
            "ok",
            "oK",
            "é",
            "ab",
        ];
        let set = TerminalStates::of(&names).unwrap();
        for n in names {
            assert!(set.contains(n), "{n}");
            assert_eq!(set.find(n).map(|s| s.to_string()), Some(n.to_string()));
        }
        for n in [
            "", "don", "done ", "Done", "dunE", "f", "erro", "xyzz", "pass", "pending", "o",
            "running", "é!", "ba",
        ] {
            assert!(!set.contains(n), "{n}");
        }
        for i in 0..2000 {
            let n = format!("s{i}");
            assert!(!set.contains(&n), "{n}");
            let one = TerminalStates::of(&[&n]).unwrap();
            assert!(one.contains(&n) && !one.contains(&format!("{n}x")), "{n}");
        }
    }

    #[test]
    fn terminal_states_bounds() {
        let mut s = TerminalStates::EMPTY;
        for i in 0..TerminalStates::CAPACITY {
            assert!(s.insert(&format!("s{i}")));
        }
        assert!(!s.insert("one-too-many"));
        assert!(s.insert("s3"), "present already");
        assert_eq!(s.len(), TerminalStates::CAPACITY);
        assert!(s.contains("s15") && !s.contains("s16") && !s.contains(""));
        let long = "x".repeat(StateName::CAPACITY);
        assert!(TerminalStates::of(&[&long]).is_some_and(|t| t.contains(&long)));
        assert!(TerminalStates::of(&[&"x".repeat(StateName::CAPACITY + 1)]).is_none());
        assert_eq!(
            format!("{:?}", TerminalStates::default()),
            r#"{"passed", "failed", "cancelled", "canceled", "done", "succeeded", "success", "completed", "complete", "finished", "error", "errored", "failure", "aborted"}"#
        );
    }
}
