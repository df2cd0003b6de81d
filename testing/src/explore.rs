//! Exhaustive exploration: every script over a small alphabet of inputs, up
//! to a length, played against a machine and checked step by step.
//!
//! Where a property test samples scripts, the explorer enumerates them all:
//! for an alphabet of 8 inputs and length 6 that is every one of the
//! 299,593 scripts of length 0 to 6. It walks them as a tree, cloning the
//! runner (machine and checker) at each prefix, so each prefix is played
//! once; each script is also settled to its end (see
//! [`Settle`](crate::Settle)) to check that it ends with exactly one,
//! sticky outcome.

use std::collections::BTreeMap;

use crate::script::{Input, Invariants, ScriptRunner};
use crate::{Violation, origin};
use polite_core::{Machine, Outcome};

/// What an exploration covered.
///
/// ```
/// use polite_testing::Exploration;
/// let e = Exploration::default();
/// assert_eq!(e.scripts, 0);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exploration {
    /// The longest script: every script of length 0 to this was checked.
    pub depth: usize,
    /// Scripts checked: every script of length 0 to the depth.
    pub scripts: u64,
    /// Scripts of exactly the full length.
    pub full_length: u64,
    /// Events fed to machines in all (script inputs and settling).
    pub events: u64,
    /// How the settled scripts ended, by outcome kind (`Succeeded`,
    /// `TimedOut`, ...).
    pub outcomes: BTreeMap<String, u64>,
}

/// A script that breaks an invariant, and what it broke. The explorer
/// returns a shortest one (after a failure it searches the shorter lengths
/// again, breadth first by length).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counterexample {
    /// The inputs, in order.
    pub script: Vec<Input>,
    /// The broken invariant.
    pub violation: Violation,
}

impl std::fmt::Display for Counterexample {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} after the script [", self.violation)?;
        for (i, input) in self.script.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{input}")?;
        }
        f.write_str("]")
    }
}

impl std::error::Error for Counterexample {}

/// Plays every script of length 0 to `depth` over `alphabet` against
/// `runner` (a fresh [`ScriptRunner`] with a machine and its checker),
/// settling each one to its end.
///
/// # Errors
///
/// The first [`Counterexample`] found.
///
/// ```
/// use polite_testing::{Checker, Input, ScriptRunner, explore, origin};
/// use polite_core::SplitMix64;
/// use polite_core::{Method, RequestId, RequestInfo, RetryMachine, RetryPolicy};
/// use std::time::Duration;
///
/// let m = RetryMachine::new(RetryPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
///                           SplitMix64::new(1), origin(), Duration::from_secs(10)).unwrap();
/// let checker = Checker::for_machine(&m);
/// let alphabet = [Input::status(200), Input::status(503), Input::Wake, Input::Cancel];
/// let e = explore(ScriptRunner::new(origin(), m, checker), &alphabet, 4).unwrap();
/// assert_eq!(e.scripts, 1 + 4 + 16 + 64 + 256);
/// assert_eq!(e.full_length, 256);
/// ```
pub fn explore<M, C>(
    runner: ScriptRunner<M, C>,
    alphabet: &[Input],
    depth: usize,
) -> Result<Exploration, Counterexample>
where
    M: Machine + Clone,
    C: Invariants<M> + Clone,
{
    let mut runner = runner.recording(false);
    let mut path = Vec::with_capacity(depth);
    let mut stats = Exploration {
        depth,
        ..Exploration::default()
    };
    let fail = |path: &[usize], violation| Counterexample {
        script: path.iter().map(|&i| alphabet[i].clone()).collect(),
        violation,
    };
    runner.start().map_err(|v| fail(&path, v))?;
    if let Err(v) = walk(runner.clone(), alphabet, depth, &mut path, &mut stats) {
        // Depth first found *a* counterexample of length `path.len()`;
        // look for a shorter one, length by length.
        for shorter in 0..path.len() {
            let mut p = Vec::with_capacity(shorter);
            let mut s = Exploration::default();
            if let Err(v) = walk(runner.clone(), alphabet, shorter, &mut p, &mut s) {
                return Err(fail(&p, v));
            }
        }
        return Err(fail(&path, v));
    }
    Ok(stats)
}

fn walk<M, C>(
    runner: ScriptRunner<M, C>,
    alphabet: &[Input],
    left: usize,
    path: &mut Vec<usize>,
    stats: &mut Exploration,
) -> Result<(), Violation>
where
    M: Machine + Clone,
    C: Invariants<M> + Clone,
{
    stats.scripts += 1;
    if left == 0 {
        // A leaf: settle the runner itself (no copy: the leaves are most of
        // the tree, 7 in 8 of its nodes for an alphabet of 8).
        stats.full_length += 1;
        let (trace, settling) = runner.finish_counted()?;
        count(stats, &trace.outcome, settling);
        return Ok(());
    }
    let (trace, settling) = runner.clone().finish_counted()?;
    count(stats, &trace.outcome, settling);
    for (i, input) in alphabet.iter().enumerate() {
        let mut next = runner.clone();
        path.push(i);
        next.step(input)?;
        stats.events += next.events() - runner.events();
        walk(next, alphabet, left - 1, path, stats)?;
        path.pop();
    }
    Ok(())
}

/// Counts a settled script: its settling events and its outcome's kind
/// (without formatting or allocating: this runs once per script, millions
/// of times, but for the first script of each kind).
fn count(stats: &mut Exploration, outcome: &Outcome, settling: u64) {
    stats.events += settling;
    let kind = outcome_kind(outcome);
    match stats.outcomes.get_mut(kind) {
        Some(n) => *n += 1,
        None => {
            stats.outcomes.insert(kind.to_owned(), 1);
        }
    }
}

/// The name of an outcome's kind (`Succeeded`, `TimedOut`, ...).
fn outcome_kind(o: &Outcome) -> &'static str {
    match o {
        Outcome::Succeeded { .. } => "Succeeded",
        Outcome::Terminal { .. } => "Terminal",
        Outcome::NotRetryable { .. } => "NotRetryable",
        Outcome::RetriesExhausted { .. } => "RetriesExhausted",
        Outcome::RetryBudgetExhausted { .. } => "RetryBudgetExhausted",
        Outcome::RateLimited { .. } => "RateLimited",
        Outcome::NotReplayable { .. } => "NotReplayable",
        Outcome::Permanent { .. } => "Permanent",
        Outcome::TimedOut { .. } => "TimedOut",
        Outcome::Starved { .. } => "Starved",
        Outcome::Cancelled => "Cancelled",
        Outcome::Stale => "Stale",
        Outcome::BatchDone { .. } => "BatchDone",
        // An outcome added after this was written.
        _ => "Other",
    }
}

/// Shorthand: [`explore`] from a runner started at [`origin()`].
///
/// # Errors
///
/// The first [`Counterexample`] found.
///
/// ```
/// use polite_testing::{Checker, Input, explore_from_origin, origin};
/// use polite_core::SplitMix64;
/// use polite_core::{Method, RequestId, RequestInfo, RetryMachine, RetryPolicy};
/// use std::time::Duration;
/// let m = RetryMachine::new(RetryPolicy::default(), RequestInfo::new(RequestId(1), Method::Get),
///                           SplitMix64::new(1), origin(), Duration::from_secs(10)).unwrap();
/// let c = Checker::for_machine(&m);
/// assert!(explore_from_origin(m, c, &[Input::status(429).retry_after("1"), Input::Wake], 3).is_ok());
/// ```
pub fn explore_from_origin<M, C>(
    machine: M,
    checker: C,
    alphabet: &[Input],
    depth: usize,
) -> Result<Exploration, Counterexample>
where
    M: Machine + Clone,
    C: Invariants<M> + Clone,
{
    explore(
        ScriptRunner::new(origin(), machine, checker),
        alphabet,
        depth,
    )
}
