//! [`Coverage`]: what a set of runs reached, counted from their traces.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use polite_core::Action;
use polite_core::record::RetryAfterNote;

use crate::Trace;

/// What a set of runs reached, counted from their [`Trace`]s: how they
/// ended (outcome kinds), what their attempt records note (the
/// `Retry-After` reading, the failure class, where the planned delay came
/// from) and which phases the machine went through (sends, long polls,
/// sleeps, stops, notices). A tool that never reaches a kind cannot find a
/// bug behind it; polite's own coverage test prints these for the
/// explorer, the property strategies and the fuzz decoders.
///
/// ```
/// use polite_testing::{Coverage, Scripted, Simulator, origin};
/// use polite_core::{Method, RequestId, RequestInfo, RetryMachine, RetryPolicy, SplitMix64};
/// use std::time::Duration;
///
/// let t0 = origin();
/// let m = RetryMachine::new(RetryPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
///                           SplitMix64::new(1), t0, Duration::from_secs(30)).unwrap();
/// let trace = Simulator::new(t0)
///     .replies([Scripted::status(429).retry_after("2"), Scripted::status(200)])
///     .run(m)
///     .unwrap();
/// let mut c = Coverage::default();
/// c.add(&trace);
/// assert_eq!(c.outcomes["Succeeded"], 1);
/// assert_eq!(c.notes["Retry-After valid, within 60 s"], 1);
/// assert_eq!(c.notes["delay from RetryAfter"], 1);
/// assert_eq!(c.phases["send"], 2);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Traces added.
    pub runs: u64,
    /// Outcome kinds (`Succeeded`, `RateLimited`, ...).
    pub outcomes: BTreeMap<String, u64>,
    /// What attempt records note: `Retry-After absent`, `Retry-After valid,
    /// within 60 s`, `Retry-After valid, over 60 s`, `Retry-After valid,
    /// saturated`, `Retry-After rejected: <why>`, `class <class>`,
    /// `delay from <source>`.
    pub notes: BTreeMap<String, u64>,
    /// Phases: `send`, `send long poll`, `sleep`, `stop`, `notice <notice>`.
    pub phases: BTreeMap<String, u64>,
}

/// The first word of a `Debug` rendering: the variant's name.
fn kind(d: &dyn fmt::Debug) -> String {
    let s = format!("{d:?}");
    s.split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or_default()
        .to_owned()
}

impl Coverage {
    /// Counts one trace.
    pub fn add(&mut self, trace: &Trace) {
        self.runs += 1;
        *self.outcomes.entry(kind(&trace.outcome)).or_default() += 1;
        let mut note = |k: String| *self.notes.entry(k).or_default() += 1;
        for r in &trace.records {
            note(match r.retry_after {
                RetryAfterNote::Absent => "Retry-After absent".to_owned(),
                RetryAfterNote::Valid(d) if d == Duration::from_secs(u64::MAX) => {
                    "Retry-After valid, saturated".to_owned()
                }
                RetryAfterNote::Valid(d) if d > Duration::from_secs(60) => {
                    "Retry-After valid, over 60 s".to_owned()
                }
                RetryAfterNote::Valid(_) => "Retry-After valid, within 60 s".to_owned(),
                RetryAfterNote::Rejected(e) => format!("Retry-After rejected: {}", kind(&e)),
            });
            if let Some(c) = r.class {
                note(format!("class {}", kind(&c)));
            }
            if let Some(next) = r.next {
                note(format!("delay from {}", kind(&next.source)));
            }
        }
        let mut phase = |k: String| *self.phases.entry(k).or_default() += 1;
        for s in &trace.steps {
            phase(match s.action {
                Action::Send(p) if p.long_poll.is_some() => "send long poll".to_owned(),
                Action::Send(_) => "send".to_owned(),
                Action::SleepUntil(_) => "sleep".to_owned(),
                Action::Stop(_) => "stop".to_owned(),
            });
        }
        for (_, n) in &trace.notices {
            phase(format!("notice {}", kind(n)));
        }
    }

    /// Adds another coverage's counts to this one.
    ///
    /// ```
    /// use polite_testing::Coverage;
    /// let mut a = Coverage::default();
    /// a.runs = 2;
    /// a.outcomes.insert("Succeeded".into(), 2);
    /// let mut b = a.clone();
    /// b.merge(&a);
    /// assert_eq!((b.runs, b.outcomes["Succeeded"]), (4, 4));
    /// ```
    pub fn merge(&mut self, other: &Coverage) {
        self.runs += other.runs;
        for (mine, theirs) in [
            (&mut self.outcomes, &other.outcomes),
            (&mut self.notes, &other.notes),
            (&mut self.phases, &other.phases),
        ] {
            for (k, n) in theirs {
                *mine.entry(k.clone()).or_default() += n;
            }
        }
    }

    /// The kinds of `wanted` this coverage never reached, in any of its
    /// three tables.
    ///
    /// ```
    /// use polite_testing::Coverage;
    /// let mut c = Coverage::default();
    /// c.outcomes.insert("Succeeded".into(), 1);
    /// assert_eq!(c.missing(&["Succeeded", "TimedOut"]), vec!["TimedOut"]);
    /// ```
    #[must_use]
    pub fn missing<'a>(&self, wanted: &[&'a str]) -> Vec<&'a str> {
        wanted
            .iter()
            .copied()
            .filter(|k| {
                ![&self.outcomes, &self.notes, &self.phases]
                    .iter()
                    .any(|t| t.get(*k).is_some_and(|n| *n > 0))
            })
            .collect()
    }
}

impl fmt::Display for Coverage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} runs", self.runs)?;
        for (title, table) in [
            ("outcomes", &self.outcomes),
            ("record notes", &self.notes),
            ("phases", &self.phases),
        ] {
            writeln!(f, "  {title}:")?;
            for (k, n) in table {
                writeln!(f, "    {n:>9}  {k}")?;
            }
        }
        Ok(())
    }
}
