//! Unit tests of the Job controller's arithmetic.

use std::collections::BTreeSet;

use super::reconcile::{compress, wanted};

#[test]
fn completed_indexes_are_written_as_ranges() {
    let set: BTreeSet<i32> = [0, 1, 2, 4, 6, 7].into();
    assert_eq!(compress(&set), "0-2,4,6-7");
    assert_eq!(compress(&BTreeSet::new()), "");
    assert_eq!(compress(&[5].into()), "5");
}

#[test]
fn active_pods_are_bounded_by_parallelism_and_what_remains() {
    let none = BTreeSet::new();
    assert_eq!(wanted(2, Some(3), false, 0, &none, &none).0, 2);
    assert_eq!(wanted(2, Some(3), false, 2, &none, &none).0, 1);
    assert_eq!(wanted(2, Some(3), false, 3, &none, &none).0, 0);
    // A work queue (no completions): no new pods once one succeeded.
    assert_eq!(wanted(4, None, false, 0, &none, &none).0, 4);
    assert_eq!(wanted(4, None, false, 1, &none, &none).0, 0);
    // Indexed: the lowest indexes neither done nor running are started.
    let done: BTreeSet<i32> = [0, 2].into();
    let running: BTreeSet<i32> = [1].into();
    let (count, missing) = wanted(2, Some(5), true, 2, &done, &running);
    assert_eq!((count, missing), (2, vec![3, 4]));
}
