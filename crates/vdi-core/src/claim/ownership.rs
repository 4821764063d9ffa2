//! A dedicated pool's members and their owners (SPEC "Pool policy and lifecycle": assignment):
//! a user's first claim makes the member theirs; later claims give them that member and no one
//! else. The one rule every front end applies to choose a member for a claimant ("Get a
//! desktop", `assign`) and to say what a pool offers them; the broker's grant follows the same
//! owner mark (`vdi_core::names::OWNER_ANNOTATION`). Pure: no request.

use crate::state::MemberView;

/// Whether owner marks decide who may take a member, given whether the pool's policy says
/// dedicated (`None`: no DesktopPool, or one whose policy cannot be read). In a dedicated pool,
/// and where no policy reads, owners keep their desktops (until an administrator says otherwise);
/// in a floating pool, marks left from a dedicated past keep nobody out. The broker's grant and
/// every front end's choice of a member follow this one rule.
pub fn owners_count(dedicated: Option<bool>) -> bool {
    dedicated != Some(false)
}

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
    fn owner_marks_count_unless_the_pool_is_floating() {
        assert!(owners_count(Some(true)) && owners_count(None) && !owners_count(Some(false)));
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
