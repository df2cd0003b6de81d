//! The script runner of the batch targets (`pace_batch`, `keyed_batch`),
//! compiled once in this crate, with the machine behind a vtable.
//!
//! Why (fuzz/README.md, "Speed"): libFuzzer's work after each execution
//! grows with the number of coverage counters the execution hit. The
//! batch targets instantiate `ScriptRunner<BatchMachine<..>, BatchChecker>`
//! in the fuzz target itself (where the machine's generic code must be
//! compiled to keep its counters), so the runner's own branches, its drop
//! glue and the checker's were counted too: about 70 of the 250 counters a
//! `keyed_batch` execution hits. Here the runner is generic over `&mut dyn
//! BatchRun` and only [`play`] is called from the targets: the runner, the
//! checker and their drop glue are this crate's code (built without
//! counters for fuzzing), while the machine's methods, reached through the
//! vtable that the target builds, stay the target's, with their counters.
//! The runner does exactly what it did with the machine by value: the
//! vtable forwards every `Machine` method to the machine's own.

use polite_core::{BatchMachine, BudgetSet, Event, Machine, Outcome, PaceSet};
use std::time::Instant;

use crate::script::{Input, Invariants, ScriptRunner, Settle};
use crate::{BatchChecker, Violation, origin};
use polite_core::Action;

/// A batch machine as the runner sees it: a [`Machine`] whose item
/// outcomes the [`BatchChecker`] reads after every step.
pub(crate) trait BatchRun: Machine {
    /// [`BatchMachine::outcomes`].
    fn outcomes(&self) -> &[Option<Outcome>];
    /// [`BatchMachine::ended_count`] and [`BatchMachine::last_ended`].
    fn ended(&self) -> (u32, Option<u32>);
}

impl<R: rand_core::Rng, P: PaceSet, B: BudgetSet> BatchRun for BatchMachine<R, P, B> {
    #[inline]
    fn outcomes(&self) -> &[Option<Outcome>] {
        BatchMachine::outcomes(self)
    }
    #[inline]
    fn ended(&self) -> (u32, Option<u32>) {
        (self.ended_count(), self.last_ended())
    }
}

/// The same checks as `Invariants<BatchMachine<R, P, B>>`: every input and
/// action, and the item outcomes after every step (those that changed,
/// as the batch counts them, and all of them at `Stop`).
impl<'a> Invariants<&'a mut dyn BatchRun> for BatchChecker {
    fn input(&mut self, now: Instant, event: &Event<'_>) {
        BatchChecker::input(self, now, event);
    }
    fn output(&mut self, now: Instant, action: &Action) -> Result<(), Violation> {
        BatchChecker::output(self, now, action)
    }
    fn observe(&mut self, machine: &&'a mut dyn BatchRun) -> Result<(), Violation> {
        // Only the items that ended since the last look, and every item at
        // `Stop` (`BatchChecker::outcomes_since`; fuzz/README.md, "Fourth
        // pass"). The property tests and the explorer keep looking at every
        // item after every step (`BatchChecker::outcomes`).
        let (ended, last) = machine.ended();
        self.outcomes_since(machine.outcomes(), ended, last)
    }
}

/// Plays `script` against `machine` (created at [`origin()`]) from
/// [`origin()`], checking every step with `checker`, then settles it as
/// `settle` says and checks its end (`ScriptRunner::finish`).
///
/// Not `#[inline]`: compiled here, once (see the module's comment).
#[inline(never)]
pub(crate) fn play(
    machine: &mut dyn BatchRun,
    checker: BatchChecker,
    settle: Settle,
    script: &[Input],
) -> Result<(), Violation> {
    let mut run = ScriptRunner::new(origin(), machine, checker)
        .settle(settle)
        .recording(false);
    run.play(script)?;
    run.finish().map(drop)
}
