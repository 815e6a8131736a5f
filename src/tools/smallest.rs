//! `Smallest`: the smallest items of a stream, in sorted order, kept in memory bounded
//! by a count and a weight budget rather than by the stream's length. `ls` keeps what
//! it can show of a folder with it, and the walk one window of a folder's names.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// The longest run of the smallest items offered whose length is at most `count` and
/// whose weights add up to at most `budget`; always at least the smallest item, so a
/// caller paging through a stream makes progress whatever one item weighs.
pub(crate) struct Smallest<T: Ord> {
    /// The kept items, largest on top (the first to go).
    heap: BinaryHeap<Weighted<T>>,
    count: usize,
    budget: usize,
    /// What the kept items weigh together.
    weight: usize,
    /// The smallest item let go so far: anything not below it can never be kept.
    bar: Option<T>,
    /// Items offered.
    seen: usize,
}

struct Weighted<T> {
    item: T,
    weight: usize,
}

impl<T: Ord> PartialEq for Weighted<T> {
    fn eq(&self, other: &Self) -> bool {
        self.item == other.item
    }
}
impl<T: Ord> Eq for Weighted<T> {}
impl<T: Ord> PartialOrd for Weighted<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T: Ord> Ord for Weighted<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.item.cmp(&other.item)
    }
}

impl<T: Ord> Smallest<T> {
    pub(crate) fn new(count: usize, budget: usize) -> Self {
        Smallest {
            heap: BinaryHeap::new(),
            count: count.max(1),
            budget,
            weight: 0,
            bar: None,
            seen: 0,
        }
    }

    /// Offers one item of the given weight.
    pub(crate) fn push(&mut self, item: T, weight: usize) {
        self.seen += 1;
        if self.bar.as_ref().is_some_and(|bar| item >= *bar) {
            return;
        }
        self.heap.push(Weighted { item, weight });
        self.weight += weight;
        // The largest goes while there are too many, or while the items it follows
        // already fill the budget (then it would never be reached).
        while self.heap.len() > self.count || (self.heap.len() > 1 && self.weight > self.budget) {
            let Some(top) = self.heap.pop() else { break };
            self.weight -= top.weight;
            self.bar = Some(top.item);
        }
    }

    /// How many items were offered, kept or not.
    pub(crate) fn seen(&self) -> usize {
        self.seen
    }

    /// How many are kept.
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    /// What the kept items weigh together.
    pub(crate) fn weight(&self) -> usize {
        self.weight
    }

    /// The kept items, smallest first.
    pub(crate) fn into_sorted(self) -> Vec<T> {
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|w| w.item)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Smallest;
    use proptest::prelude::*;

    fn keep(items: &[u32], count: usize, budget: usize) -> (Vec<u32>, usize) {
        let mut s = Smallest::new(count, budget);
        for &i in items {
            s.push(i, 10);
        }
        let seen = s.seen();
        (s.into_sorted(), seen)
    }

    #[test]
    fn keeps_the_smallest_in_order() {
        assert_eq!(keep(&[5, 3, 9, 1, 7], 3, usize::MAX), (vec![1, 3, 5], 5));
        assert_eq!(keep(&[2, 1], 5, usize::MAX), (vec![1, 2], 2));
        assert_eq!(keep(&[], 5, usize::MAX), (vec![], 0));
    }

    #[test]
    fn the_budget_bounds_the_run_kept() {
        // Each weighs 10: a budget of 25 holds two.
        assert_eq!(keep(&[5, 3, 9, 1, 7], 100, 25).0, vec![1, 3]);
        // One item over the budget is still kept when it is the smallest.
        assert_eq!(keep(&[4, 2, 8], 100, 5).0, vec![2]);
    }

    #[test]
    fn weights_differ_per_item() {
        let mut s = Smallest::new(100, 10);
        for (item, weight) in [("b", 4), ("a", 4), ("d", 1), ("c", 4)] {
            s.push(item, weight);
        }
        assert_eq!(s.weight(), 8);
        assert_eq!(s.into_sorted(), vec!["a", "b"]);
    }

    proptest! {
        /// Whatever the order offered, the result is the sorted list's longest head
        /// within the count and the budget (at least one item).
        #[test]
        fn matches_sort_then_take(
            items in proptest::collection::btree_set(0u32..10_000, 0..300),
            order in any::<u64>(),
            count in 1usize..50,
            budget in 0usize..400,
        ) {
            let sorted: Vec<u32> = items.iter().copied().collect();
            let mut offered = sorted.clone();
            let mut rng = fastrand::Rng::with_seed(order);
            rng.shuffle(&mut offered);
            let mut s = Smallest::new(count, budget);
            for &i in &offered {
                s.push(i, (i % 13) as usize + 1);
            }
            let mut want = Vec::new();
            let mut weight = 0;
            for &i in sorted.iter().take(count) {
                weight += (i % 13) as usize + 1;
                if weight > budget && !want.is_empty() {
                    break;
                }
                want.push(i);
            }
            prop_assert_eq!(s.seen(), sorted.len());
            prop_assert_eq!(s.into_sorted(), want);
        }
    }
}
