//! Live resize (issue 26, "Resize 4 → 8 → 2 with 2 members claimed"): growing clones the
//! missing members, shrinking removes free members above the size only, highest index first
//! (a claimed member above it stays until released), and a claimed member is never deleted,
//! whatever the sizes and the claims (a property over random cases).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use crate::{Member, Seen, claim_member, managed_pool, spec, wait_members};

/// Whether `now` is what `pool` of `size` with the members `claimed` (held as they were)
/// settles on (SPEC: members are `<pool>-1` … `<pool>-<size>`; a shrink removes free members
/// only, so a claimed member above `size` stays until released): exactly those members,
/// nothing under way.
fn settled_at(
    now: &BTreeMap<String, Member>,
    pool: &str,
    size: usize,
    claimed: &BTreeMap<String, Member>,
) -> bool {
    let want: BTreeSet<String> = (1..=size)
        .map(|i| format!("{pool}-{i}"))
        .chain(claimed.keys().cloned())
        .collect();
    now.keys().cloned().collect::<BTreeSet<String>>() == want && now.values().all(Member::settled)
}

/// Asserts the claimed members are as they were: the same VM (uid), holder, label, running.
fn untouched(now: &BTreeMap<String, Member>, claimed: &BTreeMap<String, Member>, when: &str) {
    for (name, before) in claimed {
        let after = now
            .get(name)
            .unwrap_or_else(|| panic!("{when}: claimed {name} is gone: {now:#?}"));
        assert_eq!(
            (
                &after.uid,
                &after.holder,
                &after.label,
                after.power.as_str()
            ),
            (&before.uid, &before.holder, &before.label, "Running"),
            "{when}: claimed {name} changed"
        );
    }
}

#[tokio::test]
async fn resize_4_to_8_to_2_leaves_the_two_claimed_members_alone() {
    let ns = managed_pool("resize", "rs", spec(4)).await;
    let seen = Seen::start(&ns, "rs").await;
    claim_member("bob", &ns, "rs", "rs-2").await;
    claim_member("alice", &ns, "rs", "rs-4").await;
    let claimed: BTreeMap<String, Member> = wait_members(&ns, "rs", "two claims running", |m| {
        ["rs-2", "rs-4"]
            .iter()
            .all(|c| m.get(*c).is_some_and(|m| m.power == "Running"))
    })
    .await
    .into_iter()
    .filter(|(name, _)| name == "rs-2" || name == "rs-4")
    .collect();

    // Grow: rs-5 … rs-8 cloned, stopped and free.
    corral_tests::set_pool_spec(&ns, "rs", json!({ "size": 8 })).await;
    let now = wait_members(&ns, "rs", "8 members", |m| settled_at(m, "rs", 8, &claimed)).await;
    let names: Vec<&str> = now.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "rs-1", "rs-2", "rs-3", "rs-4", "rs-5", "rs-6", "rs-7", "rs-8"
        ]
    );
    for i in 5..=8 {
        let m = &now[&format!("rs-{i}")];
        assert!(m.free() && m.power == "Stopped", "rs-{i}: {m:?}");
    }
    untouched(&now, &claimed, "after growing to 8");

    // Shrink to 5: the three free members of the highest indices go (rs-6, rs-7, rs-8).
    corral_tests::set_pool_spec(&ns, "rs", json!({ "size": 5 })).await;
    let now = wait_members(&ns, "rs", "5 members", |m| settled_at(m, "rs", 5, &claimed)).await;
    let names: Vec<&str> = now.keys().map(String::as_str).collect();
    assert_eq!(names, ["rs-1", "rs-2", "rs-3", "rs-4", "rs-5"]);
    untouched(&now, &claimed, "after shrinking to 5");

    // Shrink to 2: every free member above 2 goes (rs-3, rs-5); the claimed rs-4 stays.
    corral_tests::set_pool_spec(&ns, "rs", json!({ "size": 2 })).await;
    let now = wait_members(&ns, "rs", "2 members", |m| settled_at(m, "rs", 2, &claimed)).await;
    let names: Vec<&str> = now.keys().map(String::as_str).collect();
    assert_eq!(names, ["rs-1", "rs-2", "rs-4"]);
    untouched(&now, &claimed, "after shrinking to 2");
    let deleted = seen.deleted(&now);
    for (name, member) in &claimed {
        assert!(
            !deleted.contains(&(member.uid.clone(), name.clone())),
            "claimed {name} was deleted at some point: {deleted:?}"
        );
    }
}

/// A small deterministic generator (xorshift64*), so a failing case can be run again from its
/// seed (`POOL_POLICY_SEED`).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// Cases of the property, run at the same time in namespaces of their own.
const CASES: u64 = 4;
/// Resizes per case.
const STEPS: usize = 3;
/// Sizes drawn: 1 ..= MAX_SIZE.
const MAX_SIZE: u64 = 7;

#[tokio::test]
async fn no_claimed_member_is_ever_deleted_whatever_the_sizes_and_claims() {
    let seed = std::env::var("POOL_POLICY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_2026_u64);
    eprintln!("property seed {seed} (POOL_POLICY_SEED to run these cases again)");
    let cases = (0..CASES).map(|case| async move {
        let mut rng = Rng(seed.wrapping_add(case.wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1);
        let pool = format!("pp{case}");
        let first = 1 + rng.below(MAX_SIZE - 2) as usize;
        let sizes: Vec<usize> = (0..STEPS)
            .map(|_| 1 + rng.below(MAX_SIZE) as usize)
            .collect();
        let claims: Vec<String> = (1..=first)
            .filter(|_| rng.below(5) < 2)
            .map(|i| format!("{pool}-{i}"))
            .collect();
        let what = format!("case {case}: size {first}, claimed {claims:?}, resized to {sizes:?}");
        eprintln!("{what}");
        let ns = managed_pool("prop", &pool, spec(first as i32)).await;
        let seen = Seen::start(&ns, &pool).await;
        for (i, member) in claims.iter().enumerate() {
            let user = if i % 2 == 0 { "alice" } else { "bob" };
            claim_member(user, &ns, &pool, member).await;
        }
        let claimed: BTreeMap<String, Member> =
            wait_members(&ns, &pool, "the claims running", |m| {
                claims
                    .iter()
                    .all(|c| m.get(c).is_some_and(|m| m.power == "Running"))
            })
            .await
            .into_iter()
            .filter(|(name, _)| claims.contains(name))
            .collect();
        for size in &sizes {
            corral_tests::set_pool_spec(&ns, &pool, json!({ "size": size })).await;
            let now = wait_members(&ns, &pool, &format!("size {size} ({what})"), |m| {
                settled_at(m, &pool, *size, &claimed)
            })
            .await;
            untouched(&now, &claimed, &format!("{what}, at size {size}"));
            let deleted = seen.deleted(&now);
            for (name, member) in &claimed {
                assert!(
                    !deleted.contains(&(member.uid.clone(), name.clone())),
                    "{what}: claimed {name} was deleted at size {size}: {deleted:?}"
                );
            }
        }
    });
    futures::future::join_all(cases).await;
}
