use super::*;

fn free(index: u32, running: bool) -> Seen {
    Seen {
        index,
        vm: Some(VmSeen {
            running,
            stopped: !running,
            ..VmSeen::default()
        }),
        lease: LeaseSeen::None,
    }
}

fn claimed(index: u32) -> Seen {
    Seen {
        lease: LeaseSeen::Claimed,
        ..free(index, true)
    }
}

fn pool(n: u32) -> Vec<Seen> {
    (1..=n).map(|i| free(i, false)).collect()
}

#[test]
fn growing_clones_the_missing_indices() {
    let p = plan(8, 0, &pool(4));
    assert_eq!(p.clone, vec![5, 6, 7, 8]);
    assert_eq!(p.counts.creating, 4);
    assert!(p.take.is_empty() && p.start.is_empty() && p.stop.is_empty());
    assert_eq!(
        plan(4, 0, &pool(4)),
        Plan {
            counts: Counts {
                members: 4,
                free: 4,
                ..Counts::default()
            },
            ..Plan::default()
        }
    );
}

#[test]
fn shrinking_takes_free_members_above_size_highest_first_never_claimed_ones() {
    let mut members = pool(8);
    members[6] = claimed(7);
    members[0] = claimed(1);
    let p = plan(2, 0, &members);
    assert_eq!(
        p.take,
        vec![
            (8, Removal::Shrink),
            (6, Removal::Shrink),
            (5, Removal::Shrink),
            (4, Removal::Shrink),
            (3, Removal::Shrink)
        ]
    );
    assert_eq!(p.counts.claimed, 2);
    assert!(p.clone.is_empty() && p.delete_vms.is_empty());
}

#[test]
fn a_removal_is_finished_vm_first_then_lease() {
    let marked = |index, why, lease| Seen {
        index,
        vm: Some(VmSeen {
            removing: Some(why),
            ..VmSeen::default()
        }),
        lease,
    };
    let p = plan(2, 0, &[marked(3, Removal::Shrink, LeaseSeen::Broker)]);
    assert_eq!(p.delete_vms, vec![3]);
    let gone = Seen {
        index: 3,
        vm: None,
        lease: LeaseSeen::Broker,
    };
    let p = plan(2, 0, &[free(1, false), free(2, false), gone]);
    assert_eq!((p.delete_leases, p.clone), (vec![3], vec![]));
    // A reset member: VM gone, Lease still there: not cloned until the Lease is gone too.
    let reset = Seen { index: 2, ..gone };
    let p = plan(2, 0, &[free(1, false), reset]);
    assert_eq!((p.delete_leases, p.clone.clone()), (vec![2], vec![]));
    let p = plan(2, 0, &[free(1, false)]);
    assert_eq!(p.clone, vec![2]);
    // A mark whose Lease was lost is taken again; one a claim won is removed.
    let p = plan(2, 0, &[marked(2, Removal::Reset, LeaseSeen::None)]);
    assert_eq!(p.take, vec![(2, Removal::Reset)]);
    let p = plan(2, 0, &[marked(2, Removal::Reset, LeaseSeen::Claimed)]);
    assert_eq!((p.unmark, p.take, p.counts.claimed), (vec![2], vec![], 1));
}

#[test]
fn a_broker_lease_without_the_mark_is_given_back_within_size_and_marked_above() {
    let held = |index| Seen {
        lease: LeaseSeen::Broker,
        ..free(index, false)
    };
    let p = plan(2, 0, &[free(1, false), held(2), held(3)]);
    assert_eq!(p.delete_leases, vec![2]);
    assert_eq!(p.take, vec![(3, Removal::Shrink)]);
    assert!(p.delete_vms.is_empty());
}

#[test]
fn a_broker_lease_just_taken_waits_for_its_mark_then_the_removal_goes_on() {
    let taking = |index| Seen {
        lease: LeaseSeen::Taking,
        ..free(index, true)
    };
    let p = plan(2, 2, &[free(1, true), taking(2), taking(3)]);
    assert!(p.delete_leases.is_empty() && p.take.is_empty() && p.unmark.is_empty());
    assert!(p.stop.is_empty(), "nor stopped by the warm buffer: {p:?}");
    assert_eq!(p.counts.removing, 2);
    let marked = Seen {
        vm: Some(VmSeen {
            removing: Some(Removal::Reset),
            ..VmSeen::default()
        }),
        ..taking(2)
    };
    assert_eq!(plan(2, 0, &[marked]).delete_vms, vec![2]);
}

#[test]
fn warm_starts_the_lowest_free_stopped_and_stops_the_highest_extra() {
    let mut members = pool(6);
    members[0] = claimed(1);
    let p = plan(6, 2, &members);
    assert_eq!(p.start, vec![2, 3]);
    let members: Vec<Seen> = (1..=6).map(|i| free(i, true)).collect();
    let p = plan(6, 2, &members);
    assert_eq!(p.stop, vec![6, 5, 4, 3]);
    assert_eq!(p.counts.warm, 6);
    // Members above size are removed, not warmed.
    let p = plan(2, 2, &pool(4));
    assert_eq!(p.start, vec![1, 2]);
}

/// Every combination of up to five indices, each absent, free (stopped or running), claimed,
/// labelled, broker-held or marked, against every size and warm: the rules' invariants.
#[test]
fn invariants_hold_for_every_small_pool() {
    let kinds: Vec<Option<Seen>> = {
        let mut k = vec![None];
        for running in [false, true] {
            let base = free(0, running);
            k.push(Some(base));
            k.push(Some(Seen {
                lease: LeaseSeen::Claimed,
                ..base
            }));
            k.push(Some(Seen {
                lease: LeaseSeen::Idle,
                ..base
            }));
            k.push(Some(Seen {
                vm: base.vm.map(|v| VmSeen {
                    labelled: true,
                    ..v
                }),
                ..base
            }));
            k.push(Some(Seen {
                lease: LeaseSeen::Broker,
                vm: base.vm.map(|v| VmSeen {
                    removing: Some(Removal::Reset),
                    ..v
                }),
                ..base
            }));
        }
        k.push(Some(Seen {
            index: 0,
            vm: None,
            lease: LeaseSeen::Claimed,
        }));
        k
    };
    let n = 4u32;
    let combos = (kinds.len() as u32).pow(n);
    for mut code in 0..combos {
        let mut members = Vec::new();
        for index in 1..=n {
            let kind = kinds[(code % kinds.len() as u32) as usize];
            code /= kinds.len() as u32;
            if let Some(mut seen) = kind {
                seen.index = index;
                members.push(seen);
            }
        }
        for size in 1..=n {
            for warm in 0..=size {
                let p = plan(size, warm, &members);
                let of = |i: &u32| members.iter().find(|m| m.index == *i).copied();
                let claimed =
                    |m: Seen| m.lease == LeaseSeen::Claimed || m.vm.is_some_and(|v| v.labelled);
                for i in p
                    .take
                    .iter()
                    .map(|t| &t.0)
                    .chain(&p.delete_vms)
                    .chain(&p.start)
                    .chain(&p.stop)
                {
                    let m = of(i).expect("acts only on members that exist");
                    assert!(!claimed(m), "claimed member {i} touched: {m:?} → {p:?}");
                }
                for i in &p.clone {
                    assert!(*i <= size && of(i).is_none(), "clone {i}: {p:?}");
                }
                for (i, why) in &p.take {
                    assert!(
                        *i > size || *why == Removal::Reset,
                        "{i} within {size}: {p:?}"
                    );
                }
                for i in &p.delete_vms {
                    assert_eq!(of(i).unwrap().lease, LeaseSeen::Broker);
                }
                for i in p.start.iter().chain(&p.stop) {
                    assert!(*i <= size, "warm acts within size only: {p:?}");
                }
                let stopped_free = members
                    .iter()
                    .filter(|m| m.index <= size && !claimed(**m) && m.lease != LeaseSeen::Broker)
                    .filter(|m| m.vm.is_some_and(|v| v.removing.is_none() && v.stopped))
                    .count();
                let running = p.counts.warm as usize + p.start.len() - p.stop.len();
                assert!(
                    running == warm as usize
                        || (running < warm as usize && p.start.len() == stopped_free),
                    "warm {warm}: {members:?} → {p:?}"
                );
                assert!(p.start.is_empty() || p.stop.is_empty());
                assert_eq!(plan(size, warm, &members), p, "deterministic");
            }
        }
    }
}
