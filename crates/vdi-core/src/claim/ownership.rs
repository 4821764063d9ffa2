//! A dedicated pool's members and their owners (SPEC "Pool policy and lifecycle": assignment):
//! a user's first claim makes the member theirs; later claims give them that member and no one
//! else. The one rule every front end applies to choose a member for a claimant ("Get a
//! desktop", `assign`) and to say what a pool offers them; the broker's grant follows the same
//! owner mark (`vdi_core::names::OWNER_ANNOTATION`). Pure: no request.

use crate::state::MemberView;

/// The member `who` owns among `members`, if any (its [`MemberView::owner`] is `who`).
pub fn own_member<'a>(members: &'a [MemberView], who: &str) -> Option<&'a MemberView> {
    members.iter().find(|m| m.owner.as_deref() == Some(who))
}

/// Whether a claim for someone whose own member is `own` ([`own_member`]) may take `member`:
/// their own, if they have one; else only a member nobody owns. Never another's.
pub fn may_take(member: &MemberView, own: Option<&MemberView>) -> bool {
    match own {
        Some(own) => own.name == member.name,
        None => member.owner.is_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claim::rules::tests::free;

    fn member(name: &str, owner: Option<&str>) -> MemberView {
        MemberView {
            owner: owner.map(Into::into),
            ..free(name)
        }
    }

    #[test]
    fn an_owner_takes_their_own_member_and_nobody_takes_another_s() {
        let members = [
            member("d-1", Some("bob")),
            member("d-2", None),
            member("d-3", Some("alice")),
        ];
        let takes = |who: &str| -> Vec<String> {
            let own = own_member(&members, who);
            members
                .iter()
                .filter(|m| may_take(m, own))
                .map(|m| m.name.clone())
                .collect()
        };
        assert_eq!(takes("alice"), ["d-3"], "alice: her own only");
        assert_eq!(takes("carol"), ["d-2"], "carol: the unowned only");
    }
}
