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

#[test]
fn a_released_member_the_warm_buffer_wants_stays_warm_and_the_highest_extra_goes() {
    // dev-1 claimed (running), dev-2 warm, dev-3 stopped; warm 1: dev-1, released, is the
    // lowest free member that runs, so it stays and dev-2 is the extra.
    let members = vec![claimed(1), free(2, true), free(3, false)];
    assert!(stays_warm(3, 1, &members, 1));
    let after = vec![free(1, true), free(2, true), free(3, false)];
    assert_eq!(plan(3, 1, &after).stop, vec![2]);
    // Released above the running warm one: not wanted.
    let members = vec![free(1, true), claimed(2), free(3, false)];
    assert!(!stays_warm(3, 1, &members, 2));
    // Warm 2 wants both.
    assert!(stays_warm(3, 2, &members, 2));
    // No warm buffer, above the size, being removed, or no VM: never.
    assert!(!stays_warm(3, 0, &members, 2));
    assert!(!stays_warm(1, 2, &members, 2));
    let mut removing = claimed(2);
    removing.vm = removing.vm.map(|v| VmSeen {
        removing: Some(Removal::Shrink),
        ..v
    });
    assert!(!stays_warm(3, 2, &[free(1, true), removing], 2));
    assert!(!stays_warm(3, 2, &[free(1, true)], 2));
    // Another member's label (an assignment) counts as claimed, like a Lease: it is no warm
    // member, so the released one is wanted.
    let labelled = Seen {
        vm: Some(VmSeen {
            running: true,
            labelled: true,
            ..VmSeen::default()
        }),
        ..free(1, true)
    };
    assert!(stays_warm(3, 1, &[labelled, claimed(2)], 2));
    assert!(!stays_warm(3, 1, &[free(1, true), claimed(2)], 2));
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

#[test]
fn removals_read_back_from_their_annotation() {
    for why in [Removal::Shrink, Removal::Reset] {
        assert_eq!(Removal::parse(why.as_str()), Some(why));
    }
    assert_eq!(Removal::parse("Shrink"), None);
}

/// The example: p-1 free, p-2 free, p-3 claimed, p-4 free, size 2.
#[test]
fn a_resize_preview_names_what_goes_now_and_once_released_and_nothing_within_the_size() {
    let seen = [free(1, false), free(2, false), claimed(3), free(4, false)];
    let preview = resize_preview("p", 2, &seen);
    assert_eq!(preview.now, ["p-4"]);
    assert_eq!(preview.once_released, ["p-3"]);
    assert!(preview.cloned.is_empty());
    let grow = resize_preview("p", 6, &seen);
    assert_eq!(
        grow,
        ResizePreview {
            cloned: vec!["p-5".into(), "p-6".into()],
            ..ResizePreview::default()
        }
    );
}

/// A small deterministic generator (xorshift64*), so that a failure names its case.
struct Cases(u64);

impl Cases {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % below
    }
}

/// Over many random pools: what the preview says goes now is exactly what the broker's first
/// pass takes; what it says goes once released is exactly what a pass after every holder
/// released takes; nothing within the size is ever taken, and the pool ends within its size.
#[test]
fn the_preview_is_what_the_broker_does_over_random_pools() {
    let mut rng = Cases(0x9E37_79B9_7F4A_7C15);
    for case in 0..5000 {
        let members = 1 + rng.next(9) as u32;
        let size = 1 + rng.next(10) as u32;
        let mut seen: Vec<Seen> = Vec::new();
        for index in 1..=members {
            // Some indices have no VM (deleted by hand, being cloned).
            if rng.next(6) == 0 {
                continue;
            }
            let running = rng.next(2) == 0;
            seen.push(Seen {
                index,
                vm: Some(VmSeen {
                    running,
                    stopped: !running,
                    labelled: rng.next(5) == 0,
                    ..VmSeen::default()
                }),
                lease: [LeaseSeen::None, LeaseSeen::Idle, LeaseSeen::Claimed][rng.next(3) as usize],
            });
        }
        let what = format!("case {case}: size {size}, {seen:?}");
        let preview = resize_preview("p", size, &seen);
        let names = |indices: &[u32]| -> Vec<String> {
            indices.iter().map(|i| member_name("p", *i)).collect()
        };

        // The broker's first pass: it takes these now.
        let first = plan(size, 0, &seen);
        let taken: Vec<u32> = first.take.iter().map(|(i, _)| *i).collect();
        assert_eq!(names(&taken), preview.now, "{what}");
        assert!(taken.iter().all(|i| *i > size), "{what}");
        seen.retain(|m| !taken.contains(&m.index));

        // Every holder releases: the next pass takes these.
        for m in &mut seen {
            m.lease = LeaseSeen::None;
            if let Some(vm) = &mut m.vm {
                vm.labelled = false;
            }
        }
        let second = plan(size, 0, &seen);
        let mut later: Vec<u32> = second.take.iter().map(|(i, _)| *i).collect();
        later.sort_unstable_by(|a, b| b.cmp(a));
        assert_eq!(names(&later), preview.once_released, "{what}");
        seen.retain(|m| !later.contains(&m.index));
        assert!(seen.iter().all(|m| m.index <= size), "{what}");
    }
}
