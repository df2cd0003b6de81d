//! [`BudgetSet`]: retry budgets addressed by pace slot, so that a batch
//! whose items go to several origins draws each item's retries from its
//! own key's budget (SPEC §4.3: the retry budget is per key, like the
//! pace). Every [`RetryBudget`] is a set whose every slot is that budget.

use crate::budget::RetryBudget;
use crate::input::{Reply, RetryClass};

/// Retry budgets addressed by slot (an item's
/// [`pace_slot`](crate::RequestInfo::pace_slot)), for
/// [`BatchMachine::with_budget`](crate::BatchMachine::with_budget).
///
/// Implemented for every [`RetryBudget`] (one budget for every slot) and
/// for `Vec<B>` (slot `i` draws from element `i`; a slot past the end has
/// no budget: every retry is granted at no cost).
///
/// ```
/// use polite_core::BudgetSet;
/// use polite_core::budget::{RetryBucket, RetryCosts};
/// use polite_core::{Reply, RetryClass};
/// let mut budgets = vec![RetryBucket::new(14, RetryCosts::default()); 2];
/// assert_eq!(budgets.withdraw_slot(0, RetryClass::ServerError, Reply::Status(503)), Some(14));
/// assert_eq!(budgets.withdraw_slot(0, RetryClass::ServerError, Reply::Status(503)), None);
/// // Slot 1's origin still has its own tokens.
/// assert_eq!(budgets.withdraw_slot(1, RetryClass::ServerError, Reply::Status(503)), Some(14));
/// ```
pub trait BudgetSet {
    /// [`RetryBudget::withdraw`] from slot `slot`'s budget.
    fn withdraw_slot(&mut self, slot: u32, class: RetryClass, last: Reply) -> Option<u32>;
    /// [`RetryBudget::deposit`] into slot `slot`'s budget.
    fn deposit_slot(&mut self, slot: u32, last_cost: Option<u32>);
}

/// One budget for every slot.
impl<B: RetryBudget + ?Sized> BudgetSet for B {
    #[inline(always)]
    fn withdraw_slot(&mut self, _slot: u32, class: RetryClass, last: Reply) -> Option<u32> {
        RetryBudget::withdraw(self, class, last)
    }
    #[inline(always)]
    fn deposit_slot(&mut self, _slot: u32, last_cost: Option<u32>) {
        RetryBudget::deposit(self, last_cost);
    }
}

/// Slot `i` draws from `self[i]`; past the end, no budget.
impl<B: RetryBudget> BudgetSet for Vec<B> {
    fn withdraw_slot(&mut self, slot: u32, class: RetryClass, last: Reply) -> Option<u32> {
        match self.get_mut(slot as usize) {
            Some(b) => b.withdraw(class, last),
            None => Some(0),
        }
    }
    fn deposit_slot(&mut self, slot: u32, last_cost: Option<u32>) {
        if let Some(b) = self.get_mut(slot as usize) {
            b.deposit(last_cost);
        }
    }
}

/// One slot of a [`BudgetSet`] as a [`RetryBudget`] (what an item's retry
/// state draws from).
#[derive(Debug)]
pub(crate) struct SlotBudget<'a, S: ?Sized> {
    pub(crate) set: &'a mut S,
    pub(crate) slot: u32,
}

impl<S: BudgetSet + ?Sized> RetryBudget for SlotBudget<'_, S> {
    #[inline(always)]
    fn withdraw(&mut self, class: RetryClass, last: Reply) -> Option<u32> {
        self.set.withdraw_slot(self.slot, class, last)
    }
    #[inline(always)]
    fn deposit(&mut self, last_cost: Option<u32>) {
        self.set.deposit_slot(self.slot, last_cost);
    }
}
